// Recovery with the real pusher-js and Herald's plugin (gen/typescript's
// enableRecovery): a client whose network is cut while triggers flow gets,
// after pusher-js reconnects by itself, every event once and in order on a
// public, a private and a presence channel, then pusher:recovered; the same
// run without the plugin loses events (so the test measures something).
// Where Herald cannot prove continuity it says so: pusher:recovery_failed.
//
// The network is cut by a TCP proxy between client and server that stops
// passing bytes (no close frame, no reset): pusher-js notices only through
// its own activity check, as on a dead Wi-Fi.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test recovery.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import net from 'node:net'

import { startHerald } from './herald.mjs'
import { Clients, connected, eventually, sdk, sleep, subscribe } from './helpers.mjs'

const dist = new URL('../../gen/typescript/dist/recovery.js', import.meta.url)
if (!existsSync(dist)) {
  throw new Error('gen/typescript is not built: run `make build-ts` (npm ci && npm run build in gen/typescript)')
}
const { enableRecovery } = await import(dist)

/**
 * A TCP proxy to target that the test can cut: while cut, it passes no
 * byte either way and leaves every connection open (new ones too); restore
 * drops the connections that lived through the cut, as a NAT that forgot
 * them would, and passes bytes again.
 */
async function startProxy (target) {
  let cut = false
  const pairs = new Set()
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host)
    const pair = { client, upstream, cutThrough: cut }
    pairs.add(pair)
    const forward = (from, to) => from.on('data', (b) => { if (!cut && !pair.cutThrough) to.write(b) })
    forward(client, upstream)
    forward(upstream, client)
    const end = () => { pairs.delete(pair); client.destroy(); upstream.destroy() }
    client.on('close', end).on('error', end)
    upstream.on('close', end).on('error', end)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    host: '127.0.0.1',
    port: server.address().port,
    cut () {
      cut = true
      for (const p of pairs) p.cutThrough = true
    },
    restore () {
      cut = false
      for (const p of pairs) if (p.cutThrough) { p.client.destroy(); p.upstream.destroy() }
    },
    close: () => new Promise((resolve) => { for (const p of pairs) { p.client.destroy(); p.upstream.destroy() } server.close(resolve) })
  }
}

const CHANNELS = ['rec-news', 'private-rec', 'presence-rec']

/**
 * A pusher-js client through proxy, subscribed to CHANNELS, recording per
 * channel the `i` of each `tick` it gets and the recovery events.
 */
async function listener (clients, herald, proxy, { plugin }) {
  const c = clients.connect({ host: proxy.host, port: proxy.port }, {
    server: sdk(herald),
    user: { user_id: 'u1', user_info: {} },
    // A dead network is noticed within about two seconds.
    options: { activityTimeout: 1000, pongTimeout: 1000 }
  })
  if (plugin) enableRecovery(c.pusher)
  await connected(c)
  const got = {}
  for (const name of CHANNELS) {
    got[name] = { ticks: [], recovered: [], failed: [] }
    const { channel } = await subscribe(c, name)
    channel.bind('tick', (d) => got[name].ticks.push(d.i))
    channel.bind('pusher:recovered', (d) => got[name].recovered.push(d))
    channel.bind('pusher:recovery_failed', (d) => got[name].failed.push(d))
  }
  return { c, got, socket: c.pusher.connection.socket_id }
}

/** Waits until l's client is connected again on a new connection. */
async function reconnected (l) {
  await eventually(() => {
    assert.notEqual(l.c.pusher.connection.socket_id, l.socket, `${l.c.label}: states ${l.c.states.items.join(' ')}`)
    assert.equal(l.c.pusher.connection.state, 'connected')
  }, 20_000)
  l.socket = l.c.pusher.connection.socket_id
}

/** Triggers tick i = 0, 1, … on every channel of CHANNELS each `every` ms until stop() (which resolves with the count). */
function stream (herald, every = 40) {
  let i = 0
  let stopped = false
  const done = (async () => {
    while (!stopped) {
      await sdk(herald).trigger(CHANNELS, 'tick', { i })
      i++
      await sleep(every)
    }
    return i
  })()
  return { stop: () => { stopped = true; return done }, count: () => i }
}

describe('recovery with pusher-js and the plugin, on one node', () => {
  let herald, proxy
  const clients = new Clients()
  before(async () => {
    herald = await startHerald({ env: { HERALD_APP_HISTORY_EVENTS: '1000', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2m' } })
    proxy = await startProxy(herald)
  })
  after(async () => {
    clients.closeAll()
    await proxy?.close()
    await herald?.stop()
  })

  /** Runs a stream, cuts the network for cutMs in its middle, and returns what each listener got and how many were sent. */
  async function cutDuringStream (listeners, cutMs) {
    const s = stream(herald)
    await eventually(() => assert.ok(s.count() >= 10))
    proxy.cut()
    await sleep(cutMs)
    proxy.restore()
    // pusher-js reconnects by itself; the stream goes on meanwhile.
    for (const l of listeners) await reconnected(l)
    await sleep(500)
    return s.stop()
  }

  it('delivers every event once and in order across a 5 s cut, then pusher:recovered; without the plugin events are lost', async () => {
    const withPlugin = await listener(clients, herald, proxy, { plugin: true })
    const without = await listener(clients, herald, proxy, { plugin: false })
    const sent = await cutDuringStream([withPlugin, without], 5000)
    const all = Array.from({ length: sent }, (_, i) => i)
    for (const name of CHANNELS) {
      const g = withPlugin.got[name]
      await eventually(() => assert.equal(g.ticks.length, sent, `${name}: ${g.ticks.length} of ${sent}`), 10_000)
      assert.deepEqual(g.ticks, all, `${name}: every tick once, in order`)
      assert.equal(g.recovered.length, 1, `${name}: pusher:recovered ${JSON.stringify(g.recovered)}`)
      assert.ok(g.recovered[0].replayed > 0, `${name}: replayed ${g.recovered[0].replayed}`)
      assert.deepEqual(g.failed, [])
    }
    for (const name of CHANNELS) {
      const g = without.got[name]
      assert.ok(g.ticks.length < sent, `${name}: the client without the plugin got ${g.ticks.length} of ${sent}: the cut lost nothing?`)
      assert.deepEqual(g.recovered, [])
    }
  })
})

describe('recovery fails closed', () => {
  let herald, proxy
  const clients = new Clients()
  before(async () => {
    herald = await startHerald({ env: { HERALD_APP_HISTORY_EVENTS: '5', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2s' } })
    proxy = await startProxy(herald)
  })
  after(async () => {
    clients.closeAll()
    await proxy?.close()
    await herald?.stop()
  })

  it('says pusher:recovery_failed (gap), and replays nothing, when the channel kept fewer events than were missed', async () => {
    const l = await listener(clients, herald, proxy, { plugin: true })
    proxy.cut()
    // One more than the 5 the channel keeps, within the window.
    await sdk(herald).triggerBatch(Array.from({ length: 6 }, (_, i) => ({ channel: 'rec-news', name: 'tick', data: JSON.stringify({ i }) })))
    proxy.restore()
    await reconnected(l)
    const g = l.got['rec-news']
    await eventually(() => assert.equal(g.failed.length, 1), 10_000)
    assert.deepEqual(g.failed[0], { reason: 'gap' })
    assert.deepEqual(g.ticks, [], 'a partial replay')
    assert.deepEqual(g.recovered, [])
  })

  it('gives pusher:recovery_failed (expired) to a client away longer than the window', async () => {
    const l = await listener(clients, herald, proxy, { plugin: true })
    proxy.cut()
    await sdk(herald).trigger('rec-news', 'tick', { i: 0 })
    await sleep(2500)
    proxy.restore()
    await reconnected(l)
    const g = l.got['rec-news']
    await eventually(() => assert.equal(g.failed.length, 1), 10_000)
    assert.deepEqual(g.failed[0], { reason: 'expired' })
    assert.deepEqual(g.ticks, [])
    // Recoverable again from where the new connection started.
    await sdk(herald).trigger('rec-news', 'tick', { i: 1 })
    await eventually(() => assert.deepEqual(g.ticks, [1]))
  })
})
