// Channels user features and webhooks of the real herald binary, driven by
// the real clients: pusher-js 8 signs in with a userAuthentication
// customHandler backed by the `pusher` server SDK's authenticateUser; the SDK
// sends to users (sendToUser) and terminates their connections
// (terminateUserConnections). Webhooks go to a local HTTP receiver that checks
// every request with the SDK's webhook(request).isValid() and by recomputing
// the HMAC itself.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1
//
// Waiting: every wait has a timeout; nothing sleeps for a fixed time except
// where a timeout is what is under test (the 3 s webhook hold, the
// user-authentication timeout). Absence is checked with a marker sent after
// the thing that must not arrive, on a path whose order the server keeps:
// one connection's frames are queued in order, and one webhook endpoint gets
// one channel's requests one at a time in the order they were written to the
// outbox (so a webhook marker goes on the channel under test).

import { describe, it, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'

import { APP, startHerald, heraldCli, freshDB } from './herald.mjs'
import {
  WAIT_MS, Log, Clients, sdk, connected, subscribe, roundTrip, errorCode, eventually, sleep,
  withTimeout, once, startReceiver, signIn, signedIn, record
} from './helpers.mjs'

// ---------------------------------------------------------------------------
// Helpers

/** The auth string of pusher:signin, computed here (for user_data the SDK refuses to sign). */
function signUser (socketId, userDataJSON, secret = APP.secret) {
  const sig = createHmac('sha256', secret).update(`${socketId}::user::${userDataJSON}`).digest('hex')
  return { auth: `${APP.key}:${sig}`, user_data: userDataJSON }
}

/** Waits until c is disconnected with close code code (seen as a connection error). */
async function closedWith (c, code) {
  await c.errors.waitFor((e) => errorCode(e) === code, { label: `a connection error with code ${code}` })
  await c.states.waitFor((s) => s === 'disconnected', { label: 'state disconnected' })
}

// Webhook event kinds every endpoint of the default app gets but the session
// checks leave out (they have their own checks).
const COUNTS = new Set(['subscription_count', 'cache_miss'])

/** The accepted webhook events about channel, without subscription_count / cache_miss. */
function hookEvents (receiver, channel, { all = false } = {}) {
  return receiver.accepted().filter((e) => e.channel === channel && (all || !COUNTS.has(e.name)))
}

/** Waits until at least n accepted webhook events are about channel (see hookEvents); returns them. */
async function waitHooks (receiver, channel, n, { timeout = WAIT_MS, all = false } = {}) {
  await receiver.requests.waitUntil(() => hookEvents(receiver, channel, { all }).length >= n,
    { timeout, label: `${n} webhook events about ${channel}` })
  return hookEvents(receiver, channel, { all })
}

/** The first accepted request that holds an event passing pred. */
function requestWith (receiver, pred) {
  return receiver.requests.items.find((r) => r.status < 300 && r.body?.events?.some(pred))
}

// ---------------------------------------------------------------------------
// Sign-in, server-to-user, watchlist, subscription_count, terminate

describe('users: sign-in, server-to-user events, watchlist, subscription_count, terminate_connections', () => {
  let herald, server
  const clients = new Clients()
  before(async () => {
    herald = await startHerald()
    server = sdk(herald)
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
  })
  afterEach(() => clients.closeAll())

  it('pusher.signin(): signinDonePromise resolves, user.user_data is the signed user_data', async () => {
    const userData = { id: 'alice', user_info: { name: 'Alice', note: 'ünïcødé ✓' }, watchlist: ['bob'] }
    const c = await signIn(clients, herald, userData)
    assert.deepEqual(c.pusher.user.user_data, userData)
    const success = c.frames.items.find((f) => f.event === 'pusher:signin_success')
    assert.deepEqual(success.data, { user_data: JSON.stringify(userData) }, 'signin_success echoes the exact user_data string')
    assert.equal(c.pusher.connection.state, 'connected')
    assert.deepEqual(c.errors.items, [])
    await roundTrip(c)
  })

  it('a bad sign-in is refused with close code 4009: forged signature, another socket\'s signature, user_data without id', async () => {
    const forged = clients.connect(herald, {
      label: 'forged signature',
      authenticate: (params, cb) => cb(null, { auth: `${APP.key}:${'0'.repeat(64)}`, user_data: JSON.stringify({ id: 'mallory' }) })
    })
    const otherSocket = clients.connect(herald, {
      label: 'signature for another socket',
      authenticate: (params, cb) => cb(null, server.authenticateUser('1234.5678', { id: 'mallory' }))
    })
    const noID = clients.connect(herald, {
      label: 'user_data without id',
      authenticate: (params, cb) => cb(null, signUser(params.socketId, JSON.stringify({ user_info: { name: 'x' } })))
    })
    for (const c of [forged, otherSocket, noID]) {
      await connected(c)
      c.pusher.signin()
      await closedWith(c, 4009)
      assert.equal(c.pusher.user.user_data, null, `${c.label}: not signed in`)
      assert.ok(!c.frames.items.some((f) => f.event === 'pusher:signin_success'), `${c.label}: no signin_success`)
      const err = c.frames.items.find((f) => f.event === 'pusher:error')
      assert.equal(err?.data?.code, 4009, `${c.label}: pusher:error 4009 before the close`)
      assert.equal(typeof err.data.message, 'string')
    }
  })

  it('sendToUser reaches every signed-in connection of the user (pusher.user.bind), not another user\'s', async () => {
    const alice1 = await signIn(clients, herald, { id: 'alice' }, 'alice tab 1')
    const alice2 = await signIn(clients, herald, { id: 'alice' }, 'alice tab 2')
    const bob = await signIn(clients, herald, { id: 'bob' })
    const notes = [alice1, alice2, bob].map((c) => record(c.pusher.user, ['note', 'marker'], `${c.label}: user events`))

    // A connection may not subscribe to another user's server-to-user channel
    // (pusher-js refuses '#' names itself, so the frame is sent directly).
    bob.pusher.send_event('pusher:subscribe', { channel: '#server-to-user-alice' })
    const refused = await bob.frames.waitFor((f) => f.event === 'pusher:subscription_error' && f.channel === '#server-to-user-alice',
      { label: 'subscription_error for #server-to-user-alice' })
    assert.equal(refused.data.status, 403)

    const note = { text: 'hello alice', n: 1, nested: { list: [1, 'two', null] } }
    const res = await server.sendToUser('alice', 'note', note)
    assert.equal(res.status, 200)
    for (const log of notes.slice(0, 2)) {
      assert.deepEqual(await log.waitFor((e) => e.name === 'note', { label: 'note' }), { name: 'note', data: note })
    }
    const frame = alice1.frames.items.find((f) => f.event === 'note')
    assert.equal(frame.channel, '#server-to-user-alice')

    // Bob: a marker sent to him afterwards arrives with nothing before it.
    assert.equal((await server.sendToUser('bob', 'marker', { n: 1 })).status, 200)
    await notes[2].waitFor((e) => e.name === 'marker', { label: 'marker for bob' })
    assert.deepEqual(notes[2].items, [{ name: 'marker', data: { n: 1 } }])
    assert.deepEqual(notes[0].items, [{ name: 'note', data: note }])
    assert.deepEqual(notes[1].items, [{ name: 'note', data: note }])
  })

  it('watchlist: initial online/offline after sign-in, then online/offline as watched users come and go', async () => {
    const bob1 = await signIn(clients, herald, { id: 'bob' }, 'bob tab 1')
    const alice = clients.connect(herald, { userData: { id: 'alice', watchlist: ['bob', 'carol'] } })
    const watch = record(alice.pusher.user.watchlist, ['online', 'offline'], 'alice: watchlist events')
    alice.pusher.signin()
    await signedIn(alice, 'alice')

    // The initial state: bob online (signed in first), carol offline.
    await watch.waitUntil((items) => items.length >= 2, { label: 'the initial online and offline events' })
    assert.deepEqual(watch.items, [
      { name: 'online', data: { name: 'online', user_ids: ['bob'] } },
      { name: 'offline', data: { name: 'offline', user_ids: ['carol'] } }
    ])

    // Bob's second connection: he is online already, so nothing. Carol signs
    // in afterwards: the next event is hers.
    const bob2 = await signIn(clients, herald, { id: 'bob' }, 'bob tab 2')
    const carol = await signIn(clients, herald, { id: 'carol' })
    await watch.waitFor((e) => e.name === 'online' && e.data.user_ids.includes('carol'), { from: 2, label: 'online carol' })
    assert.deepEqual(watch.items.slice(2), [{ name: 'online', data: { name: 'online', user_ids: ['carol'] } }],
      'online carol, and nothing for bob\'s second connection')

    // Bob's first tab leaves while the second stays: nothing. The server has
    // removed it once the channel it was on is unoccupied.
    await subscribe(bob1, 'bob1-barrier')
    bob1.pusher.disconnect()
    await eventually(async () => {
      const res = await server.get({ path: '/channels/bob1-barrier' })
      assert.deepEqual(await res.json(), { occupied: false })
    })

    carol.pusher.disconnect()
    await watch.waitFor((e) => e.name === 'offline' && e.data.user_ids.includes('carol'), { from: 3, label: 'offline carol' })
    bob2.pusher.disconnect()
    await watch.waitFor((e) => e.name === 'offline' && e.data.user_ids.includes('bob'), { from: 3, label: 'offline bob' })
    assert.deepEqual(watch.items.slice(3), [
      { name: 'offline', data: { name: 'offline', user_ids: ['carol'] } },
      { name: 'offline', data: { name: 'offline', user_ids: ['bob'] } }
    ], 'offline carol; bob only when his last connection left')
    assert.equal(alice.pusher.connection.state, 'connected')
  })

  it('a watchlist of 101 ids: signed in with the first 100 watched and a non-fatal 4302 error', async () => {
    const ids = Array.from({ length: 101 }, (_, i) => `watched-${String(i).padStart(3, '0')}`)
    const c = clients.connect(herald, { userData: { id: 'big-watcher', watchlist: ids } })
    const watch = record(c.pusher.user.watchlist, ['online', 'offline'], 'big-watcher: watchlist events')
    c.pusher.signin()
    await signedIn(c, 'big-watcher')
    const err = await c.errors.waitFor((e) => errorCode(e) === 4302, { label: 'a pusher:error with code 4302' })
    assert.equal(typeof (err.data ?? err.error.data).message, 'string')
    await watch.waitFor(() => true, { label: 'the initial offline event' })
    await roundTrip(c)
    assert.deepEqual(watch.items, [{ name: 'offline', data: { name: 'offline', user_ids: ids.slice(0, 100) } }])
    assert.equal(c.pusher.connection.state, 'connected')
    assert.ok(!c.states.items.includes('disconnected'))
  })

  it('pusher:subscription_count on a public channel follows subscribes and leaves; none on presence channels', async () => {
    const name = 'counted-news'
    const [a, b, c] = ['a', 'b', 'c'].map((x) => clients.connect(herald, { label: `client ${x}` }))
    const counts = new Map()
    const watchCounts = (client) => {
      const log = new Log(`${client.label}: subscription counts`)
      counts.set(client, log)
      client.pusher.subscribe(name).bind('pusher:subscription_count', (data) => log.push(data.subscription_count))
      return log
    }

    const countsA = watchCounts(a)
    await subscribe(a, name)
    await countsA.waitFor((n) => n === 1, { label: 'count 1' })

    const countsB = watchCounts(b)
    await subscribe(b, name)
    await countsA.waitFor((n) => n === 2, { from: 1, label: 'count 2 (a)' })
    await countsB.waitFor((n) => n === 2, { label: 'count 2 (b)' })

    const countsC = watchCounts(c)
    await subscribe(c, name)
    for (const log of [countsA, countsB, countsC]) await log.waitFor((n) => n === 3, { label: 'count 3' })
    assert.equal(a.pusher.channel(name).subscriptionCount, 3)

    b.pusher.unsubscribe(name)
    await countsA.waitFor((n) => n === 2, { from: 3, label: 'count 2 after b left (a)' })
    await countsC.waitFor((n) => n === 2, { from: 1, label: 'count 2 after b left (c)' })
    c.pusher.disconnect()
    await countsA.waitFor((n) => n === 1, { from: 4, label: 'count 1 after c left' })
    assert.deepEqual(countsA.items, [1, 2, 3, 2, 1])
    assert.deepEqual(countsB.items, [2, 3])
    assert.deepEqual(countsC.items, [3, 2])
    assert.equal(a.pusher.channel(name).subscriptionCount, 1)
    const res = await server.get({ path: `/channels/${name}`, params: { info: 'subscription_count' } })
    assert.deepEqual(await res.json(), { occupied: true, subscription_count: 1 })

    // Presence channels count members instead: no subscription_count frames.
    const p1 = clients.connect(herald, { user: { user_id: 'p1' } })
    const p2 = clients.connect(herald, { user: { user_id: 'p2' } })
    const { channel: room } = await subscribe(p1, 'presence-counted')
    const joined = once(room, 'pusher:member_added')
    await subscribe(p2, 'presence-counted')
    await joined
    await roundTrip(p1)
    await roundTrip(p2)
    for (const p of [p1, p2]) {
      assert.deepEqual(p.frames.items.filter((f) => f.event === 'pusher_internal:subscription_count'), [])
    }
  })

  it('terminateUserConnections closes every connection of the user with 4009; others stay; the user can come back', async () => {
    const alice1 = await signIn(clients, herald, { id: 'alice' }, 'alice tab 1')
    const alice2 = await signIn(clients, herald, { id: 'alice' }, 'alice tab 2')
    const bob = await signIn(clients, herald, { id: 'bob' })
    const bobSocket = bob.pusher.connection.socket_id

    const res = await server.terminateUserConnections('alice')
    assert.equal(res.status, 200)
    await closedWith(alice1, 4009)
    await closedWith(alice2, 4009)

    await roundTrip(bob)
    assert.equal(bob.pusher.connection.state, 'connected')
    assert.equal(bob.pusher.connection.socket_id, bobSocket)
    assert.ok(!bob.states.items.includes('disconnected'), `bob's states: ${bob.states.items}`)
    const bobNotes = record(bob.pusher.user, ['still-here'], 'bob: user events')
    await server.sendToUser('bob', 'still-here', { ok: true })
    await bobNotes.waitFor(() => true, { label: 'still-here' })

    // Not banned: pusher-js reconnects when asked and signs in again by itself.
    const from = alice1.frames.length
    alice1.pusher.connect()
    await alice1.frames.waitFor((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === '#server-to-user-alice',
      { from, label: 'signed in again after reconnecting' })
    assert.equal(alice1.pusher.user.user_data.id, 'alice')
    const back = record(alice1.pusher.user, ['welcome-back'], 'alice: user events')
    await server.sendToUser('alice', 'welcome-back', { n: 1 })
    assert.deepEqual(await back.waitFor(() => true, { label: 'welcome-back' }), { name: 'welcome-back', data: { n: 1 } })
  })
})

// ---------------------------------------------------------------------------
// The user-authentication timeout (per app; off on the default app)

describe('user-authentication timeout (an app with --user-auth-timeout 1s)', () => {
  let herald, server
  const clients = new Clients()
  const creds = { appId: '2', key: 'k-auth-timeout', secret: 's-auth-timeout' }
  before(async () => {
    const db = freshDB()
    await heraldCli('apps', 'create', '--db', db, '--id', creds.appId, '--key', creds.key, '--secret', creds.secret, '--user-auth-timeout', '1s')
    herald = await startHerald({ db })
    server = sdk(herald, creds)
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
  })

  it('closes (4009) connections that neither sign in nor subscribe to an authorized channel; keeps the others', async () => {
    const opts = (label, extra = {}) => ({ key: creds.key, server, label, ...extra })
    const idle = clients.connect(herald, opts('idle client'))
    const publicOnly = clients.connect(herald, opts('public channel only'))
    const signed = clients.connect(herald, opts('signed-in client', { userData: { id: 'ann' } }))
    const authorized = clients.connect(herald, opts('private channel subscriber'))
    const start = Date.now()
    signed.pusher.signin()
    await subscribe(publicOnly, 'open-lobby')
    await subscribe(authorized, 'private-room')
    await signedIn(signed, 'ann')

    await closedWith(idle, 4009)
    await closedWith(publicOnly, 4009)
    const elapsed = Date.now() - start
    assert.ok(elapsed >= 900, `closed ${elapsed} ms after connecting`)

    await sleep(Math.max(0, 2000 - (Date.now() - start))) // the timeout is what is under test
    for (const c of [signed, authorized]) {
      await roundTrip(c)
      assert.equal(c.pusher.connection.state, 'connected', c.label)
      assert.ok(!c.states.items.includes('disconnected'), `${c.label}: ${c.states.items}`)
    }
  })
})

// ---------------------------------------------------------------------------
// Webhooks

describe('webhooks (HERALD_APP_WEBHOOK_URL): a scripted presence session', () => {
  let herald, receiver
  const clients = new Clients()
  before(async () => {
    receiver = await startReceiver()
    herald = await startHerald({ env: { HERALD_APP_WEBHOOK_URL: receiver.url } })
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
    await receiver?.close()
  })
  afterEach(() => clients.closeAll())

  it('occupy, join, client event, leave, vacate: the exact events, signed; member_removed and vacated held 3 s', async () => {
    const room = 'presence-session'
    const alice = clients.connect(herald, { user: { user_id: 'alice', user_info: { name: 'Alice' } } })
    const bob = clients.connect(herald, { user: { user_id: 'bob', user_info: { name: 'Bob' } } })
    const aliceSocket = await connected(alice)
    await connected(bob)

    const { channel } = await subscribe(alice, room) // occupies the channel
    const joined = once(channel, 'pusher:member_added')
    await subscribe(bob, room)
    await joined
    const hello = once(bob.pusher.channel(room), 'client-hello')
    channel.trigger('client-hello', { text: 'hi ✓', n: 1 })
    await hello

    const left = once(channel, 'pusher:member_removed')
    const bobLeft = Date.now()
    bob.pusher.disconnect()
    await left
    const aliceLeft = Date.now()
    alice.pusher.unsubscribe(room)

    const events = await waitHooks(receiver, room, 7, { timeout: 15_000 })
    assert.deepEqual(events, [
      { name: 'channel_occupied', channel: room },
      { name: 'member_added', channel: room, user_id: 'alice' },
      { name: 'member_added', channel: room, user_id: 'bob' },
      { name: 'client_event', channel: room, event: 'client-hello', data: JSON.stringify({ text: 'hi ✓', n: 1 }), socket_id: aliceSocket, user_id: 'alice' },
      { name: 'member_removed', channel: room, user_id: 'bob' },
      { name: 'member_removed', channel: room, user_id: 'alice' },
      { name: 'channel_vacated', channel: room }
    ])
    // Presence channels have no subscription_count; nothing else about the room.
    assert.deepEqual(hookEvents(receiver, room, { all: true }), events)

    const removedBob = requestWith(receiver, (e) => e.name === 'member_removed' && e.user_id === 'bob')
    const vacated = requestWith(receiver, (e) => e.name === 'channel_vacated' && e.channel === room)
    assert.ok(removedBob.at - bobLeft >= 2900, `member_removed(bob) arrived ${removedBob.at - bobLeft} ms after bob left`)
    assert.ok(vacated.at - aliceLeft >= 2900, `channel_vacated arrived ${vacated.at - aliceLeft} ms after alice left`)
    for (const r of receiver.requests.items) {
      assert.ok(Math.abs(r.body.time_ms - r.at) < 10_000, `time_ms ${r.body.time_ms} is about when it was sent (${r.at})`)
    }
    receiver.checkAll()
  })

  it('leaving and coming back within 3 s reports neither: no member_removed/member_added, no vacated/occupied', async () => {
    const room = 'presence-flip'
    const solo = 'presence-flip-solo'
    const alice = clients.connect(herald, { user: { user_id: 'alice' } })
    const bob = clients.connect(herald, { user: { user_id: 'bob' } })
    const carol = clients.connect(herald, { user: { user_id: 'carol' } })
    await subscribe(alice, room)
    await subscribe(bob, room)
    await subscribe(carol, solo)
    await waitHooks(receiver, room, 3)
    await waitHooks(receiver, solo, 2)
    // (Their order is checked by the session test above.)
    const kinds = (channel) => hookEvents(receiver, channel).map((e) => `${e.name}${e.user_id ? `(${e.user_id})` : ''}`).sort()
    assert.deepEqual(kinds(room), ['channel_occupied', 'member_added(alice)', 'member_added(bob)'])
    assert.deepEqual(kinds(solo), ['channel_occupied', 'member_added(carol)'])
    const start = receiver.requests.length

    // Bob leaves the room and comes back; carol, alone, leaves hers (vacating
    // it) and comes back. Alice sees bob go and come: that is not held.
    const gone = once(alice.pusher.channel(room), 'pusher:member_removed')
    const backAgain = once(alice.pusher.channel(room), 'pusher:member_added')
    const flipped = Date.now()
    bob.pusher.unsubscribe(room)
    carol.pusher.unsubscribe(solo)
    await gone
    await subscribe(bob, room)
    await subscribe(carol, solo)
    await backAgain
    assert.ok(Date.now() - flipped < 2500, 'the flip took less than the hold')

    // Past the hold: a held event would be written to the outbox by now, so
    // before client events sent from here on.
    await sleep(Math.max(0, 3500 - (Date.now() - flipped))) // the hold is what is under test
    alice.pusher.channel(room).trigger('client-marker', { n: 1 })
    carol.pusher.channel(solo).trigger('client-marker', { n: 2 })
    for (const channel of [room, solo]) {
      await receiver.requests.waitFor((r) => r.body?.events?.some((e) => e.event === 'client-marker' && e.channel === channel),
        { from: start, label: `the client-marker webhook of ${channel}` })
    }
    const since = receiver.requests.items.slice(start).filter((r) => r.status < 300).flatMap((r) => r.body.events)
      .filter((e) => (e.channel === room || e.channel === solo) && !COUNTS.has(e.name))
    assert.deepEqual(since.map((e) => [e.channel, e.name, e.data ? JSON.parse(e.data).n : e.user_id]).sort(), [
      [room, 'client_event', 1],
      [solo, 'client_event', 2]
    ])
    receiver.checkAll()
  })

  it('subscription_count webhooks on a public channel: one per change, with the count', async () => {
    const name = 'hooked-counts'
    const a = clients.connect(herald)
    const b = clients.connect(herald)
    await subscribe(a, name)
    await waitHooks(receiver, name, 2, { all: true })
    await subscribe(b, name)
    await waitHooks(receiver, name, 3, { all: true })
    b.pusher.disconnect()
    await waitHooks(receiver, name, 4, { all: true })
    assert.deepEqual(hookEvents(receiver, name, { all: true }), [
      { name: 'channel_occupied', channel: name },
      { name: 'subscription_count', channel: name, subscription_count: 1 },
      { name: 'subscription_count', channel: name, subscription_count: 2 },
      { name: 'subscription_count', channel: name, subscription_count: 1 }
    ])
    receiver.checkAll()
  })
})

describe('webhooks: a receiver failing its first 2 attempts', () => {
  let herald, receiver
  const clients = new Clients()
  before(async () => {
    receiver = await startReceiver({ respond: (r) => (r.n <= 2 ? 500 : 200) })
    herald = await startHerald({ env: { HERALD_APP_WEBHOOK_URL: receiver.url } })
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
    await receiver?.close()
  })

  it('gets every event exactly once, in order, after retries 1 s then 2 s apart', async () => {
    const name = 'private-retried'
    const c = clients.connect(herald)
    const socketId = await connected(c)
    const { channel } = await subscribe(c, name)
    for (let n = 0; n < 3; n++) channel.trigger('client-step', { n })
    await roundTrip(c)

    const events = await waitHooks(receiver, name, 4, { timeout: 15_000 })
    const step = (n) => ({ name: 'client_event', channel: name, event: 'client-step', data: JSON.stringify({ n }), socket_id: socketId })
    assert.deepEqual(events, [{ name: 'channel_occupied', channel: name }, step(0), step(1), step(2)])

    // The first request was tried three times, the same bytes each time.
    const [r1, r2, r3] = receiver.requests.items
    assert.deepEqual([r1.status, r2.status, r3.status], [500, 500, 200])
    assert.equal(r2.rawBody, r1.rawBody)
    assert.equal(r3.rawBody, r1.rawBody)
    assert.ok(r2.at - r1.at >= 900, `second attempt ${r2.at - r1.at} ms after the first`)
    assert.ok(r3.at - r2.at >= 1900, `third attempt ${r3.at - r2.at} ms after the second (backoff doubles)`)
    assert.ok(r3.at - r1.at < 10_000, `recovered ${r3.at - r1.at} ms after the first attempt`)

    // Nothing is delivered twice: a marker sent now comes after everything
    // else, and every accepted request is a different one.
    channel.trigger('client-marker', { n: 99 })
    await receiver.requests.waitFor((r) => r.body?.events?.some((e) => e.event === 'client-marker'), { label: 'the marker webhook' })
    const accepted = receiver.requests.items.filter((r) => r.status < 300)
    assert.equal(new Set(accepted.map((r) => r.rawBody)).size, accepted.length, 'an accepted request was delivered again')
    const all = receiver.accepted().map((e) => JSON.stringify(e))
    assert.equal(new Set(all).size, all.length, `an event was delivered twice: ${all.join('\n')}`)
    assert.deepEqual(hookEvents(receiver, name), [{ name: 'channel_occupied', channel: name }, step(0), step(1), step(2),
      { ...step(99), event: 'client-marker', data: JSON.stringify({ n: 99 }) }])
    receiver.checkAll()
  })
})

describe('webhooks: per-endpoint event and prefix filters and batching (herald apps update --webhook)', () => {
  let herald
  const receivers = {}
  const clients = new Clients()
  before(async () => {
    receivers.kinds = await startReceiver({ label: 'events=channel_occupied+channel_vacated' })
    receivers.prefix = await startReceiver({ label: 'prefix=private-' })
    receivers.batch = await startReceiver({ label: 'events=client_event,batch' })
    const db = freshDB()
    await heraldCli('apps', 'create', '--db', db, '--id', APP.appId, '--key', APP.key, '--secret', APP.secret)
    await heraldCli('apps', 'update', APP.appId, '--db', db,
      '--webhook', `${receivers.kinds.url},events=channel_occupied+channel_vacated`,
      '--webhook', `${receivers.prefix.url},prefix=private-`,
      '--webhook', `${receivers.batch.url},events=client_event,batch`)
    herald = await startHerald({ db })
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
    for (const r of Object.values(receivers)) await r.close()
  })

  it('each endpoint gets only its kinds / channels; the batching one gets several events per request', async () => {
    const c = clients.connect(herald)
    const socketId = await connected(c)
    await subscribe(c, 'filtered-public')
    const { channel } = await subscribe(c, 'private-filtered')
    for (let n = 0; n < 3; n++) channel.trigger('client-burst', { n })
    await roundTrip(c)
    const left = Date.now()
    c.pusher.unsubscribe('filtered-public')
    c.pusher.unsubscribe('private-filtered')

    const { kinds, prefix, batch } = receivers
    await kinds.requests.waitUntil(() => kinds.accepted().length >= 4, { timeout: 15_000, label: '2 occupied and 2 vacated' })
    const byChannel = (a, b) => a.channel.localeCompare(b.channel) || a.name.localeCompare(b.name)
    assert.deepEqual(kinds.accepted().sort(byChannel), [
      { name: 'channel_occupied', channel: 'filtered-public' },
      { name: 'channel_vacated', channel: 'filtered-public' },
      { name: 'channel_occupied', channel: 'private-filtered' },
      { name: 'channel_vacated', channel: 'private-filtered' }
    ])
    assert.ok(kinds.requests.items.every((r) => r.body.events.length === 1), 'one event per request without batch')
    assert.ok(Date.now() - left >= 2900)

    await prefix.requests.waitUntil(() => prefix.accepted().some((e) => e.name === 'channel_vacated'), { label: 'vacated private-filtered' })
    const step = (n) => ({ name: 'client_event', channel: 'private-filtered', event: 'client-burst', data: JSON.stringify({ n }), socket_id: socketId })
    assert.ok(prefix.accepted().every((e) => e.channel === 'private-filtered'), JSON.stringify(prefix.accepted()))
    assert.deepEqual(prefix.accepted().filter((e) => !COUNTS.has(e.name)), [
      { name: 'channel_occupied', channel: 'private-filtered' },
      step(0), step(1), step(2),
      { name: 'channel_vacated', channel: 'private-filtered' }
    ])
    assert.deepEqual(prefix.accepted().find((e) => e.name === 'subscription_count'),
      { name: 'subscription_count', channel: 'private-filtered', subscription_count: 1 })

    await batch.requests.waitUntil(() => batch.accepted().length >= 3, { label: '3 client events' })
    assert.deepEqual(batch.accepted(), [step(0), step(1), step(2)])
    assert.ok(batch.requests.length < 3, `3 client events sent together came in ${batch.requests.length} requests despite batch`)
    for (const r of Object.values(receivers)) r.checkAll()
  })
})

describe('webhooks: the outbox survives SIGKILL', () => {
  const clients = new Clients()
  const servers = []
  const receivers = []
  after(async () => {
    clients.closeAll()
    for (const h of servers) await h.kill('SIGKILL')
    for (const r of receivers) await r.close()
  })

  /**
   * Starts a server whose webhook receiver fails every request, occupies
   * private-durable and sends a client event there; resolves once the
   * receiver has seen two failed attempts of the first request (by then the
   * later events, written within the 100 ms flush, are in the outbox too).
   */
  async function failingSession () {
    const receiver = await startReceiver({ respond: () => 500 })
    receivers.push(receiver)
    const env = { HERALD_APP_WEBHOOK_URL: receiver.url }
    const herald = await startHerald({ env })
    servers.push(herald)
    const name = 'private-durable'
    const c = clients.connect(herald)
    const socketId = await connected(c)
    const { channel } = await subscribe(c, name)
    channel.trigger('client-before-crash', { n: 1 })
    await roundTrip(c)
    await receiver.requests.waitUntil((rs) => rs.length >= 2, { label: 'two failed attempts' })
    assert.ok(receiver.requests.items.every((r) => r.status === 500))
    assert.equal(receiver.requests.items[1].rawBody, receiver.requests.items[0].rawBody, 'the retry is the same request')
    const expected = [
      { name: 'channel_occupied', channel: name },
      { name: 'subscription_count', channel: name, subscription_count: 1 },
      { name: 'client_event', channel: name, event: 'client-before-crash', data: JSON.stringify({ n: 1 }), socket_id: socketId }
    ]
    return { receiver, env, herald, name, expected, client: c }
  }

  /** SIGKILLs herald, lets the receiver succeed and starts a new server on the same database file. */
  async function crashAndRestart ({ receiver, env, herald, client }) {
    const ended = await herald.kill('SIGKILL')
    assert.equal(ended.signal, 'SIGKILL')
    client.pusher.disconnect()
    const attemptsBefore = receiver.requests.length
    receiver.respond = () => 200
    const restarted = await startHerald({ db: herald.db, env })
    servers.push(restarted)
    return { restarted, attemptsBefore }
  }

  /** Asserts that no accepted request or event came twice, after a marker webhook of the new server. */
  async function exactlyOnce (receiver, restarted) {
    const m = clients.connect(restarted)
    await subscribe(m, 'after-restart')
    await waitHooks(receiver, 'after-restart', 1)
    const accepted = receiver.requests.items.filter((r) => r.status < 300)
    assert.equal(new Set(accepted.map((r) => r.rawBody)).size, accepted.length, 'a request was delivered twice')
    const events = receiver.accepted().map((e) => JSON.stringify(e))
    assert.equal(new Set(events).size, events.length, `an event was delivered twice:\n${events.join('\n')}`)
  }

  it('events whose webhooks failed before the crash are delivered, once each, by the restarted server', async () => {
    const session = await failingSession()
    const { receiver, name, expected } = session
    const failed = receiver.requests.items[0]
    const { restarted, attemptsBefore } = await crashAndRestart(session)

    const byName = (a, b) => a.name.localeCompare(b.name)
    await waitHooks(receiver, name, 3, { all: true, timeout: 15_000 })
    // (Their order after a restart is the next test's concern.)
    assert.deepEqual(hookEvents(receiver, name, { all: true }).sort(byName), [...expected].sort(byName))
    // The failed request itself was delivered, byte for byte (time_ms included).
    const same = receiver.requests.items.slice(attemptsBefore).filter((r) => r.rawBody === failed.rawBody)
    assert.deepEqual(same.map((r) => r.status), [200])
    await exactlyOnce(receiver, restarted)
    assert.deepEqual(hookEvents(receiver, name, { all: true }).sort(byName), [...expected].sort(byName))
    receiver.checkAll()
  })

  it('after a restart a request waiting for its retry still holds back the later ones of its endpoint (order kept)', async () => {
    const session = await failingSession()
    const { receiver, name, expected } = session
    // The second failure scheduled the next attempt 2 s later. Crash in the
    // middle of that backoff, when it is surely recorded (the backoff is what
    // is under test), so that on restart the later requests are due at once
    // and the first one is not yet.
    await sleep(Math.max(0, receiver.requests.items[1].at + 1000 - Date.now()))
    const { restarted } = await crashAndRestart(session)

    await waitHooks(receiver, name, 3, { all: true, timeout: 15_000 })
    assert.deepEqual(hookEvents(receiver, name, { all: true }), expected,
      'the endpoint got the requests out of the order they were written in')
    await exactlyOnce(receiver, restarted)
    receiver.checkAll()
  })
})
