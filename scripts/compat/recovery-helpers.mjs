// Shared helpers of the recovery suites (recovery*.test.mjs): Herald's
// plugin (gen/typescript's dist/recovery.js), a TCP proxy that cuts the
// network without the client knowing, a steady stream of triggers, pusher-js
// clients in Node that record what each channel gets, and the checks that
// every event arrived once and in order (or that, without the plugin, some
// were lost).

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import net from 'node:net'
import { before, after } from 'node:test'

import { startHerald } from './herald.mjs'
import { connected, eventually, sdk, sleep, subscribe } from './helpers.mjs'

const dist = new URL('../../gen/typescript/dist/recovery.js', import.meta.url)
if (!existsSync(dist)) {
  throw new Error('gen/typescript is not built: run `make build-ts` (npm ci && npm run build in gen/typescript)')
}

/** The plugin's enableRecovery, as the package builds it. */
export const { enableRecovery } = await import(dist)

/** The plugin's built ES module, as a page loads it without a bundler. */
export const RECOVERY_JS = readFileSync(dist, 'utf8')

/** The channels every stream triggers on: one of each kind. */
export const CHANNELS = ['rec-news', 'private-rec', 'presence-rec']

/**
 * A TCP proxy to target (or, a function, to where it says for each new
 * connection: a load balancer) that the test can cut: while cut, it passes no
 * byte either way and leaves every connection open; restore drops the
 * connections that lived through the cut, as a NAT that forgot them would,
 * and passes bytes again. A connection opened during the cut is held, what
 * the client sends kept, and goes through once restored, as TCP's
 * retransmissions would take it: a client's attempt to reconnect hangs
 * while the network is down and succeeds as soon as it is back (pusher-js
 * would otherwise wait out its 15 s connect timeout after a failed attempt).
 */
export async function startProxy (target) {
  let cut = false
  const pairs = new Set()
  const end = (pair) => { pairs.delete(pair); pair.client.destroy(); pair.upstream?.destroy() }
  const open = (pair) => {
    // target may be a function: each connection goes where it says then.
    const to = typeof target === 'function' ? target() : target
    const upstream = pair.upstream = net.connect(to.port, to.host)
    upstream.on('data', (b) => { if (!cut && !pair.cutThrough) pair.client.write(b) })
    upstream.on('close', () => end(pair)).on('error', () => end(pair))
    for (const b of pair.held ?? []) upstream.write(b)
    pair.held = undefined
  }
  const server = net.createServer((client) => {
    const pair = { client, cutThrough: false, held: cut ? [] : undefined }
    pairs.add(pair)
    client.on('data', (b) => {
      if (pair.held) pair.held.push(b)
      else if (!cut && !pair.cutThrough) pair.upstream.write(b)
    })
    client.on('close', () => end(pair)).on('error', () => end(pair))
    if (!pair.held) open(pair)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    host: '127.0.0.1',
    port: server.address().port,
    cut () {
      cut = true
      for (const p of pairs) if (!p.held) p.cutThrough = true
    },
    restore () {
      cut = false
      for (const p of pairs) {
        if (p.cutThrough) end(p)
        else if (p.held) open(p)
      }
    },
    close: () => new Promise((resolve) => { for (const p of pairs) end(p); server.close(resolve) })
  }
}

/**
 * Registers the hooks of a suite (call it in a describe) that start Herald
 * with env and a proxy to it before its tests, and stop both after them,
 * with clients (a Clients, if given) closed first. Returns the suite's
 * {herald, proxy}, set once its tests run.
 */
export function heraldBehindProxy (env, clients) {
  const s = {}
  before(async () => {
    s.herald = await startHerald({ env })
    s.proxy = await startProxy(s.herald)
  })
  after(async () => {
    clients?.closeAll()
    await s.proxy?.close()
    await s.herald?.stop()
  })
  return s
}

/** Triggers tick i = 0, 1, … on every channel of CHANNELS each `every` ms until stop() (which resolves with the count). */
export function stream (herald, every = 40) {
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

/**
 * Runs a stream, cuts proxy for cutMs in its middle, restores it, awaits
 * reconnected() (every client back on a new connection; the stream goes
 * on meanwhile) and resolves with how many ticks were sent.
 */
export async function cutDuringStream (herald, proxy, cutMs, reconnected) {
  const s = stream(herald)
  await eventually(() => assert.ok(s.count() >= 10))
  proxy.cut()
  await sleep(cutMs)
  proxy.restore()
  await reconnected()
  // Some ticks on the new connections too.
  await sleep(500)
  return s.stop()
}

/** A fresh record of what one channel got: tick numbers and the recovery events' data. */
export function channelRecord () {
  return { ticks: [], recovered: [], failed: [] }
}

/** Binds what a channelRecord records on a pusher-js channel. */
export function recordChannel (channel, g = channelRecord()) {
  channel.bind('tick', (d) => g.ticks.push(d.i))
  channel.bind('pusher:recovered', (d) => g.recovered.push(d))
  channel.bind('pusher:recovery_failed', (d) => g.failed.push(d))
  return g
}

/**
 * Waits until got() (a channel name's channelRecord each, read afresh each
 * time, e.g. from a page) has all of the `sent` ticks on every channel, and
 * asserts that each got every tick once, in order, and one pusher:recovered
 * that replayed some.
 */
export async function assertRecovered (got, sent, label) {
  const all = Array.from({ length: sent }, (_, i) => i)
  const g = await eventually(async () => {
    const g = await got()
    for (const name of CHANNELS) assert.ok(g[name].ticks.length >= sent, `${label}: ${name}: ${g[name].ticks.length} of ${sent} ticks`)
    return g
  }, 10_000)
  for (const name of CHANNELS) {
    assert.deepEqual(g[name].ticks, all, `${label}: ${name}: every tick once, in order`)
    assert.equal(g[name].recovered.length, 1, `${label}: ${name}: pusher:recovered ${JSON.stringify(g[name].recovered)}`)
    assert.ok(g[name].recovered[0].replayed > 0, `${label}: ${name}: replayed ${g[name].recovered[0].replayed}`)
    assert.deepEqual(g[name].failed, [], `${label}: ${name}: pusher:recovery_failed`)
  }
}

/** Asserts that a client without the plugin lost ticks on every channel (so the cut measures something). */
export function assertLost (g, sent, label) {
  for (const name of CHANNELS) {
    assert.ok(g[name].ticks.length < sent, `${label}: ${name}: got ${g[name].ticks.length} of ${sent}: the cut lost nothing?`)
    assert.deepEqual(g[name].recovered, [])
  }
}

/**
 * A pusher-js client in Node through proxy (more pusher-js options in
 * options), with the plugin when plugin, subscribed to CHANNELS, recording
 * per channel what it gets (got, a channelRecord each).
 */
export async function listener (clients, herald, proxy, { plugin, options = {}, user = 'u1', label } = {}) {
  const c = clients.connect({ host: proxy.host, port: proxy.port }, {
    server: sdk(herald),
    user: { user_id: user, user_info: {} },
    label,
    // A dead network is noticed within about two seconds.
    options: { activityTimeout: 1000, pongTimeout: 1000, ...options }
  })
  if (plugin) enableRecovery(c.pusher)
  await connected(c)
  const got = {}
  for (const name of CHANNELS) got[name] = recordChannel((await subscribe(c, name)).channel)
  return { c, got, socket: c.pusher.connection.socket_id }
}

/** Waits until l's client is connected again on a new connection. */
export async function reconnected (l) {
  await eventually(() => {
    assert.notEqual(l.c.pusher.connection.socket_id, l.socket, `${l.c.label}: states ${l.c.states.items.join(' ')}`)
    assert.equal(l.c.pusher.connection.state, 'connected')
  }, 20_000)
  l.socket = l.c.pusher.connection.socket_id
}
