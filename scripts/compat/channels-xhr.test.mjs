// The HTTP fallback of the real herald binary, driven by pusher-js 8's node
// build forced onto each of its HTTP transports in turn
// (enabledTransports: ['xhr_streaming'], then ['xhr_polling']) with httpHost
// and httpPort pointing at herald: the same protocol 7 as over a WebSocket,
// for every channel kind, client events both ways with a WebSocket client,
// sign-in and server-to-user events, terminate_connections (4009), an
// unknown app key (4001, no reconnection), the server's ping answered over
// xhr_send and a server restart. The node build carries its own
// XMLHttpRequest.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1 channels-xhr.test.mjs
//
// Waiting: nothing sleeps for a fixed time; every wait has a timeout.

import { describe, it, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import PusherServer from 'pusher'

import { APP, startHerald, freshDB, freePort } from './herald.mjs'
import { WAIT_MS, Clients, sdkAuthorizer, connected, subscribe, roundTrip, errorCode, once, sleep } from './helpers.mjs'

/** Encryption master key of the server SDK (for private-encrypted- channels). */
const MASTER_KEY = randomBytes(32).toString('base64')

function sdk (herald) {
  return new PusherServer({
    ...APP,
    host: '127.0.0.1',
    port: String(herald.port),
    useTLS: false,
    encryptionMasterKeyBase64: MASTER_KEY
  })
}

/** pusher-js options that allow only transport, over herald's HTTP port. */
function httpOptions (herald, transport) {
  return {
    httpHost: herald.host,
    httpPort: herald.port,
    forceTLS: false,
    enableStats: false,
    enabledTransports: [transport]
  }
}

/** The name of the transport pusher-js connected with. */
function transportOf (c) {
  return c.pusher.connection.connection?.transport?.name
}

for (const transport of ['xhr_streaming', 'xhr_polling']) {
  describe(`pusher-js over ${transport}`, () => {
    const clients = new Clients()
    let herald, server

    /** A pusher-js client forced onto transport; more options (userData, user) as Clients.connect takes. */
    const connect = (o = {}) => clients.connect(herald, {
      server,
      ...o,
      options: { ...httpOptions(herald, transport), ...o.options }
    })
    /** A pusher-js client over a WebSocket, for the other end of client events. */
    const connectWS = (o = {}) => clients.connect(herald, { server, ...o, label: 'WebSocket client' })

    before(async () => {
      herald = await startHerald()
      server = sdk(herald)
    })
    after(async () => {
      clients.closeAll()
      await herald?.stop()
    })
    afterEach(() => clients.closeAll())

    it(`connects over ${transport}: a socket_id, and pings answered`, async () => {
      const c = connect()
      const socketId = await connected(c)
      assert.match(socketId, /^\d+\.\d+$/)
      assert.equal(transportOf(c), transport)
      await roundTrip(c)
      assert.equal(transportOf(c), transport)
    })

    it('public channel: SDK-triggered events with the exact data', async () => {
      const c = connect()
      const { channel } = await subscribe(c, 'public-news')
      const data = { headline: 'fallback', n: 42, text: 'é ✓ "quoted" \\ back\nline', list: [1, null] }
      const got = once(channel, 'story')
      const res = await server.trigger('public-news', 'story', data)
      assert.equal(res.status, 200)
      assert.deepEqual((await got)[0], data)
      assert.equal(transportOf(c), transport)
    })

    it('private channel: authorized through the SDK; client events both ways with a WebSocket client', async () => {
      const c = connect()
      const ws = connectWS()
      const { channel: mine } = await subscribe(c, 'private-chat')
      const { channel: theirs } = await subscribe(ws, 'private-chat')

      const toWS = once(theirs, 'client-typing')
      assert.equal(mine.trigger('client-typing', { from: transport }), true)
      assert.deepEqual((await toWS)[0], { from: transport })

      const fromWS = once(mine, 'client-typing')
      assert.equal(theirs.trigger('client-typing', { from: 'ws' }), true)
      assert.deepEqual((await fromWS)[0], { from: 'ws' })
    })

    it('private-encrypted channel: pusher-js decrypts what herald relays', async () => {
      const c = connect()
      const { channel } = await subscribe(c, 'private-encrypted-vault')
      const data = { secret: 'over HTTP', unicode: 'ünïcødé ✓' }
      const got = once(channel, 'unlocked')
      assert.equal((await server.trigger('private-encrypted-vault', 'unlocked', data)).status, 200)
      assert.deepEqual((await got)[0], data)
    })

    it('presence channel: members, member_added and member_removed with a WebSocket client', async () => {
      const c = connect({ user: { user_id: 'http-user', user_info: { via: transport } } })
      const { channel } = await subscribe(c, 'presence-room')
      assert.equal(channel.members.count, 1)
      assert.equal(channel.members.me.id, 'http-user')

      const added = once(channel, 'pusher:member_added')
      const ws = connectWS({ user: { user_id: 'ws-user' } })
      const { channel: wsChannel } = await subscribe(ws, 'presence-room')
      assert.equal((await added)[0].id, 'ws-user')
      assert.deepEqual(wsChannel.members.get('http-user').info, { via: transport })

      // pusher-js ends an HTTP session by dropping its request, which the
      // server cannot tell from a stream being reopened: the session leaves
      // its channels after the 5 s disconnect delay.
      const removed = once(wsChannel, 'pusher:member_removed', { timeout: 15_000 })
      c.pusher.disconnect()
      assert.equal((await removed)[0].id, 'http-user')
    })

    it('cache channel: the last event on subscribe, pusher:cache_miss on an empty one', async () => {
      assert.equal((await server.trigger('cache-prices', 'price', { cents: 2499 })).status, 200)
      const c = connect()
      const channel = c.pusher.subscribe('cache-prices')
      const got = once(channel, 'price')
      await once(channel, 'pusher:subscription_succeeded')
      assert.deepEqual((await got)[0], { cents: 2499 })

      const empty = c.pusher.subscribe('cache-empty')
      const miss = once(empty, 'pusher:cache_miss')
      await once(empty, 'pusher:subscription_succeeded')
      await miss
    })

    it('unknown app key: pusher:error 4001, and pusher-js does not come back', async () => {
      const c = connect({ key: 'no-such-key' })
      await c.errors.waitFor((e) => errorCode(e) === 4001, { label: 'an error with code 4001' })
      // Codes 4000-4099 mean "refused": pusher-js disconnects for good, as
      // over a WebSocket ('failed' is only for a transport it cannot use).
      await c.states.waitFor((s) => s === 'disconnected', { label: 'state disconnected' })
      assert.deepEqual(c.states.items, ['disconnected'])
      assert.ok(!c.pusher.connection.retryTimer?.isRunning(), 'pusher-js has a reconnection scheduled')
    })

    it('sign-in: a server-to-user event arrives; terminate_connections closes with 4009', async () => {
      const c = connect({ userData: { id: 'erin' } })
      await connected(c)
      c.pusher.signin()
      await c.frames.waitFor((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === '#server-to-user-erin',
        { label: 'signed in as erin' })
      const note = new Promise((resolve) => c.pusher.user.bind('note', resolve))
      assert.equal((await server.sendToUser('erin', 'note', { hi: transport })).status, 200)
      assert.deepEqual(await note, { hi: transport })

      assert.equal((await server.terminateUserConnections('erin')).status, 200)
      await c.errors.waitFor((e) => errorCode(e) === 4009, { label: 'an error with code 4009' })
      await c.states.waitFor((s) => s === 'disconnected', { label: 'state disconnected' })
    })
  })

  describe(`pusher-js over ${transport} pinged by the server (HERALD_ACTIVITY_TIMEOUT=1s, HERALD_PONG_TIMEOUT=1s)`, () => {
    const clients = new Clients()
    let herald
    before(async () => {
      herald = await startHerald({ env: { HERALD_ACTIVITY_TIMEOUT: '1s', HERALD_PONG_TIMEOUT: '1s' } })
    })
    after(async () => {
      clients.closeAll()
      await herald?.stop()
    })

    it('answers the ping over xhr_send: still connected, the same session, past the pong timeout', async () => {
      const c = clients.connect(herald, { options: httpOptions(herald, transport) })
      const socketId = await connected(c)
      await c.frames.waitFor((f) => f.event === 'pusher:ping', { label: 'the server\'s pusher:ping' })
      // Unanswered, the session would close with 4201 a second after the ping.
      await sleep(2500) // the timeouts are what is under test
      assert.equal(c.pusher.connection.state, 'connected')
      assert.equal(c.pusher.connection.socket_id, socketId)
      assert.equal(transportOf(c), transport)
      assert.deepEqual(c.states.items, ['connected'])
      assert.ok(!c.errors.items.some((e) => errorCode(e) === 4201), JSON.stringify(c.errors.items))
    })
  })

  describe(`pusher-js over ${transport} across a server restart`, () => {
    const clients = new Clients()
    let herald
    after(async () => {
      clients.closeAll()
      await herald?.stop()
    })

    it('reconnects by itself (4200, then a new session on the new server) and subscribes again', async () => {
      const addr = `127.0.0.1:${await freePort()}`
      const db = freshDB()
      herald = await startHerald({ env: { HERALD_ADDR: addr }, db })
      const c = clients.connect(herald, { options: httpOptions(herald, transport) })
      const { channel } = await subscribe(c, 'public-restart')
      const first = c.pusher.connection.socket_id

      const shutdown = c.errors.waitFor((e) => errorCode(e) === 4200, { label: 'an error with code 4200', timeout: 15_000 })
      await herald.stop()
      await shutdown
      herald = await startHerald({ env: { HERALD_ADDR: addr }, db })
      const from = c.frames.length
      await c.frames.waitFor((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === 'public-restart',
        { from, label: 'subscribed again after the restart', timeout: 60_000 })
      assert.notEqual(c.pusher.connection.socket_id, first)
      assert.equal(transportOf(c), transport)
      const got = once(channel, 'back', { timeout: WAIT_MS })
      assert.equal((await sdk(herald).trigger('public-restart', 'back', { ok: true })).status, 200)
      assert.deepEqual((await got)[0], { ok: true })
    })
  })
}
