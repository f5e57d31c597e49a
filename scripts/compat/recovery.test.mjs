// Recovery with the real pusher-js and Herald's plugin (gen/typescript's
// enableRecovery): a client whose network is cut while triggers flow gets,
// after pusher-js reconnects by itself, every event once and in order on a
// public, a private and a presence channel, then pusher:recovered; the same
// run without the plugin loses events (so the test measures something).
// So over a WebSocket, over xhr_streaming, and through laravel-echo's
// listen() with enableRecovery(echo.connector.pusher).
// Where Herald cannot prove continuity it says so: pusher:recovery_failed.
//
// The network is cut by a TCP proxy between client and server that stops
// passing bytes (no close frame, no reset): pusher-js notices only through
// its own activity check, as on a dead Wi-Fi (recovery-helpers.mjs).
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test recovery.test.mjs

import { describe, it, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import Echo from 'laravel-echo'
import Pusher from 'pusher-js'

import { APP } from './herald.mjs'
import { Clients, Log, WAIT_MS, clientOptions, eventually, sdk, sdkAuthorizer, sleep, withTimeout } from './helpers.mjs'
import { assertLost, assertRecovered, channelRecord, cutDuringStream, enableRecovery, heraldBehindProxy, listener, reconnected } from './recovery-helpers.mjs'

describe('recovery with pusher-js and the plugin, on one node', () => {
  const clients = new Clients()
  const s = heraldBehindProxy({ HERALD_APP_HISTORY_EVENTS: '1000', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2m' }, clients)

  afterEach(() => clients.closeAll())

  // pusher-js's options for each transport, through the proxy.
  const transports = {
    ws: () => ({}),
    xhr_streaming: (proxy) => ({ httpHost: proxy.host, httpPort: proxy.port, enabledTransports: ['xhr_streaming'], enableStats: false })
  }
  for (const [transport, options] of Object.entries(transports)) {
    it(`over ${transport}: delivers every event once and in order across a 5 s cut, then pusher:recovered; without the plugin events are lost`, async () => {
      const withPlugin = await listener(clients, s.herald, s.proxy, { plugin: true, options: options(s.proxy) })
      const without = await listener(clients, s.herald, s.proxy, { plugin: false, options: options(s.proxy) })
      const sent = await cutDuringStream(s.herald, s.proxy, 5000, async () => {
        await reconnected(withPlugin)
        await reconnected(without)
      })
      for (const l of [withPlugin, without]) assert.equal(l.c.pusher.connection.connection?.transport?.name, transport)
      await assertRecovered(() => withPlugin.got, sent, 'with the plugin')
      assertLost(without.got, sent, 'without the plugin')
    })
  }

  it('laravel-echo (broadcaster pusher) with enableRecovery(echo.connector.pusher): every event once and in order through listen()', async () => {
    const echo = new Echo({
      broadcaster: 'pusher',
      key: APP.key,
      Pusher,
      ...clientOptions(s.proxy),
      activityTimeout: 1000,
      pongTimeout: 1000,
      channelAuthorization: { customHandler: sdkAuthorizer(sdk(s.herald), { user_id: 'echo', user_info: {} }) }
    })
    const pusher = echo.connector.pusher
    clients.open.add(pusher)
    enableRecovery(pusher)
    const c = { pusher, label: 'laravel-echo', states: new Log('laravel-echo: states') }
    pusher.connection.bind('state_change', ({ current }) => c.states.push(current))
    const got = {}
    const subscribed = []
    // Echo's own names: channel, private and join add the prefixes.
    for (const [name, channel] of [['rec-news', echo.channel('rec-news')], ['private-rec', echo.private('rec')], ['presence-rec', echo.join('rec')]]) {
      const g = got[name] = channelRecord()
      channel.listen('.tick', (d) => g.ticks.push(d.i))
      channel.listen('.pusher:recovered', (d) => g.recovered.push(d))
      channel.listen('.pusher:recovery_failed', (d) => g.failed.push(d))
      subscribed.push(withTimeout(new Promise((resolve, reject) => {
        channel.subscribed(resolve)
        channel.error((err) => reject(new Error(`${name}: ${JSON.stringify(err)}`)))
      }), WAIT_MS, `Echo's ${name} to subscribe`))
    }
    await Promise.all(subscribed)
    const l = { c, got, socket: echo.socketId() }
    const sent = await cutDuringStream(s.herald, s.proxy, 5000, () => reconnected(l))
    await assertRecovered(() => got, sent, 'laravel-echo')
  })
})

describe('recovery fails closed', () => {
  const clients = new Clients()
  const s = heraldBehindProxy({ HERALD_APP_HISTORY_EVENTS: '5', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2s' }, clients)

  it('says pusher:recovery_failed (gap), and replays nothing, when the channel kept fewer events than were missed', async () => {
    const l = await listener(clients, s.herald, s.proxy, { plugin: true })
    s.proxy.cut()
    // One more than the 5 the channel keeps, within the window.
    await sdk(s.herald).triggerBatch(Array.from({ length: 6 }, (_, i) => ({ channel: 'rec-news', name: 'tick', data: JSON.stringify({ i }) })))
    s.proxy.restore()
    await reconnected(l)
    const g = l.got['rec-news']
    await eventually(() => assert.equal(g.failed.length, 1), 10_000)
    assert.deepEqual(g.failed[0], { reason: 'gap' })
    assert.deepEqual(g.ticks, [], 'a partial replay')
    assert.deepEqual(g.recovered, [])
  })

  it('gives pusher:recovery_failed (expired) to a client away longer than the window', async () => {
    const l = await listener(clients, s.herald, s.proxy, { plugin: true })
    s.proxy.cut()
    await sdk(s.herald).trigger('rec-news', 'tick', { i: 0 })
    await sleep(2500)
    s.proxy.restore()
    await reconnected(l)
    const g = l.got['rec-news']
    await eventually(() => assert.equal(g.failed.length, 1), 10_000)
    assert.deepEqual(g.failed[0], { reason: 'expired' })
    assert.deepEqual(g.ticks, [])
    // Recoverable again from where the new connection started.
    await sdk(s.herald).trigger('rec-news', 'tick', { i: 1 })
    await eventually(() => assert.deepEqual(g.ticks, [1]))
  })
})

describe('recovery of an app without history', () => {
  const clients = new Clients()
  const s = heraldBehindProxy({ HERALD_APP_HISTORY_EVENTS: '0' }, clients)

  it('says pusher:recovery_failed (off) after a reconnect, rather than nothing', async () => {
    const l = await listener(clients, s.herald, s.proxy, { plugin: true })
    s.proxy.cut()
    await sdk(s.herald).trigger('rec-news', 'tick', { i: 0 })
    s.proxy.restore()
    await reconnected(l)
    const g = l.got['rec-news']
    await eventually(() => assert.equal(g.failed.length, 1), 10_000)
    assert.deepEqual(g.failed[0], { reason: 'off' })
    assert.deepEqual(g.ticks, [])
    assert.deepEqual(g.recovered, [])
  })
})
