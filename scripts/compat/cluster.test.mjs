// Cluster mode of the real herald binary, driven by the real clients:
// three nodes (node-a, node-b, node-c) share one real redis-server
// (HERALD_REDIS_URL; the healthy suite also on three shards and on a Redis
// Cluster of three primaries), each on its own SQLite file with the same app, and
// pusher-js 8, laravel-echo and the `pusher` server SDK are spread over them.
// What one node is asked, every node must answer and deliver as a single
// node would: events, presence members, users, cache channels, subscription
// counts, the HTTP queries and webhooks (one receiver that every node posts
// to, each event once), and an app's max_presence_members and
// max_connections over all of them. Then the failures: a node SIGKILLed in
// the middle of a presence session, Redis restarted (empty) in the middle
// of a stream of triggers, and restarted between two heartbeats; and the
// primary of a Sentinel-managed Redis (a replica, a Sentinel) SIGKILLed in
// the middle of a stream of triggers, the nodes following the promotion.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1 cluster.test.mjs
// Without redis-server the suite is skipped with one line (a failure under CI=true).
//
// Waiting: every wait has a timeout. Absence ("nobody else got it", "no
// second member_added") is checked with a marker: every message goes through
// one Redis stream that every node reads in order, so once an event
// triggered after the thing that must not arrive has arrived, that thing
// would have too. A node writes its clients' changes to Redis in the order
// they happen, so a subscription of the same connection (or a sign-in on the
// same node) that succeeds after a change proves the change is in Redis.
// Webhooks come from each node's own outbox, in no order between nodes:
// their counts are checked once the hold (3 s) has passed and a settle time
// after the last expected one, in which a duplicate would show up.

import { describe, it, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import Pusher from 'pusher-js'
import Echo from 'laravel-echo'

import {
  WAIT_MS, Log, Clients, sdk, clientOptions, sdkAuthorizer, connected, subscribe, roundTrip, errorCode,
  eventually, once, withTimeout, sleep, startReceiver, signIn, signedIn, record
} from './helpers.mjs'
import { redisCli, redisServerBin, startRedis, startRedisCluster, startRedisShards, startNodes, startSentinel } from './cluster-helpers.mjs'

// ---------------------------------------------------------------------------
// Helpers

/** How long a dead node's clients may stay in the cluster: its heartbeat expires (5 s) and is checked every 1 s. */
const CONVERGE_MS = 10_000

/** After the last expected webhook, how long a duplicate from another node is given to show up. */
const SETTLE_MS = 1500

/** Triggers through node's server SDK (for the default app, or the app of creds) and asserts 200. */
async function trigger (node, channel, event, data, params, creds) {
  const res = await sdk(node, creds).trigger(channel, event, data, params)
  assert.equal(res.status, 200, `trigger ${event} on ${channel} through ${node.id}`)
  return res.json()
}

/** GETs an HTTP API path from node (of the default app, or of creds); asserts 200 and returns the JSON body. */
async function apiGet (node, path, params, creds) {
  const res = await sdk(node, creds).get({ path, params })
  assert.equal(res.status, 200, `GET ${path} from ${node.id}`)
  return res.json()
}

/** Waits until every node answers GET path (params) with exactly expected (asked of the default app, or of creds). */
async function agree (nodes, path, params, expected, timeout = WAIT_MS, creds) {
  await eventually(async () => {
    for (const node of nodes) {
      assert.deepEqual(await apiGet(node, path, params, creds), expected,
        `GET ${path}${params ? ` ${JSON.stringify(params)}` : ''} from ${node.id}`)
    }
  }, timeout)
}

// Frames the marker helper leaves out: the subscription's own and the counts.
const BOOKKEEPING = new Set(['pusher_internal:subscription_succeeded', 'pusher_internal:subscription_count', 'marker'])

/** c's frames on channel from index from to to, as {event, data}, without BOOKKEEPING frames. */
function framesOn (c, channel, from = 0, to = c.frames.length) {
  return c.frames.items.slice(from, to)
    .filter((f) => f.channel === channel && !BOOKKEEPING.has(f.event))
    .map((f) => ({ event: f.event, data: f.data }))
}

let markers = 0

/**
 * Triggers a marker on channel through node (of the default app, or of
 * creds) and waits until every client in cs has it; returns, per client, its
 * frames on channel before the marker from index from[i] (default 0), as
 * framesOn.
 */
async function marker (node, channel, cs, { from = [], creds } = {}) {
  const n = ++markers
  await trigger(node, channel, 'marker', { n }, undefined, creds)
  const seen = []
  for (const [i, c] of cs.entries()) {
    const m = await c.frames.waitFor((f) => f.event === 'marker' && f.channel === channel && f.data?.n === n,
      { from: from[i] ?? 0, label: `marker ${n} on ${channel}` })
    seen.push(framesOn(c, channel, from[i] ?? 0, c.frames.items.indexOf(m)))
  }
  return seen
}

/** The value of a metric without labels on node's GET /metrics (herald_cluster_up, ...). */
async function metric (node, name) {
  const res = await fetch(`http://${node.host}:${node.port}/metrics`)
  assert.equal(res.status, 200, `GET /metrics from ${node.id}`)
  const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name} `))
  assert.ok(line, `${name} on ${node.id}'s /metrics`)
  return Number(line.slice(name.length + 1))
}

/** Waits until c is disconnected with close code code. */
async function closedWith (c, code) {
  await c.errors.waitFor((e) => errorCode(e) === code, { label: `a connection error with code ${code}` })
  await c.states.waitFor((s) => s === 'disconnected', { label: 'state disconnected' })
}

/** Asserts that c is still on its first connection: connected, never disconnected, the same socket_id. */
async function stayedConnected (c, socketId) {
  await roundTrip(c)
  assert.equal(c.pusher.connection.state, 'connected', c.label)
  assert.equal(c.pusher.connection.socket_id, socketId, `${c.label}: reconnected with another socket_id`)
  assert.ok(!c.states.items.some((s) => s !== 'connecting' && s !== 'connected'), `${c.label}: states ${c.states.items}`)
}

/**
 * A stream of triggers of 'tick' ({ i }) on channel, one at a time, through
 * the nodes in turn, until stop() (which resolves when the last is
 * answered). results are their answers, in order: { i, node, status, body,
 * at: ms since the stream started }; ok and refused those from index from
 * on answered 200 and otherwise; since() the ms since the stream started;
 * flowingAgain waits for the stream to flow again after an outage.
 */
function triggerStream (nodes, channel) {
  const results = []
  const t0 = Date.now()
  let stopped = false
  const done = (async () => {
    for (let i = 0; !stopped; i++) {
      const node = nodes[i % nodes.length]
      try {
        const res = await sdk(node).trigger(channel, 'tick', { i })
        results.push({ i, node: node.id, status: res.status, at: Date.now() - t0 })
      } catch (err) {
        results.push({ i, node: node.id, status: err.status ?? `${err.message}: ${err.error?.message}`, body: err.body, at: Date.now() - t0 })
      }
    }
  })()
  const ok = (from = 0) => results.slice(from).filter((r) => r.status === 200)
  return {
    results,
    ok,
    refused: (from = 0) => results.slice(from).filter((r) => r.status !== 200),
    since: () => Date.now() - t0,
    stop: () => { stopped = true; return done },
    // After an outage (what), from results[from] on: every node accepts
    // again, and goes on accepting until every one of subs has had a tick
    // accepted since delivered.
    flowingAgain: (subs, from, what, timeout) => waitFor(
      () => nodes.every((node) => ok(from).filter((r) => r.node === node.id).length >= 10) &&
        subs.every((s) => s.frames.items.some((f) => f.event === 'tick' && f.data?.i >= from)),
      () => `10 triggers accepted by every node after the ${what}, and one delivered to every subscriber; the last results: ${JSON.stringify(results.slice(-20))}`,
      timeout)
  }
}

/** Waits (15 s by default) until pred() holds; label (a string, or a function giving one when it fails) says what, and what was seen. */
const waitFor = (pred, label, timeout = 15_000) =>
  eventually(() => assert.ok(pred(), typeof label === 'function' ? label() : label), timeout)

/** Asserts that each of the refused triggers of a stream was answered 503 cluster_unavailable. */
function assertUnavailable (refused) {
  for (const r of refused) {
    assert.equal(r.status, 503, `trigger ${r.i} through ${r.node}: ${JSON.stringify(r)}`)
    assert.equal(JSON.parse(r.body).error, 'cluster_unavailable', `trigger ${r.i} through ${r.node}: ${r.body}`)
  }
}

/**
 * Connects a pusher-js client on each node as user-<node id>, subscribed to
 * name and to the presence channel room, and waits until every node lists
 * them all. Returns the clients (subs), their socket ids, the member list
 * every node gives (everyone) and where each client's frames of room start
 * (roomFrom), for assertStateKept.
 */
async function subscribersOnEveryNode (clients, nodes, name, room) {
  const subs = nodes.map((node) => clients.connect(node, { user: { user_id: `user-${node.id}` }, label: `subscriber on ${node.id}` }))
  for (const s of subs) {
    await subscribe(s, name)
    await subscribe(s, room)
  }
  const everyone = { users: nodes.map((node) => ({ id: `user-${node.id}` })) }
  await agree(nodes, `/channels/${room}/users`, undefined, everyone)
  return { subs, everyone, sockets: subs.map((s) => s.pusher.connection.socket_id), roomFrom: subs.map((s) => s.frames.length) }
}

/**
 * After an outage (what: 'restart', 'failover'), with the clients of
 * subscribersOnEveryNode: reports what each node published again; the
 * connections stayed open and the cluster's state is rebuilt: the same
 * members and counts from every node, and no member came or went.
 */
async function assertStateKept (t, nodes, name, room, { subs, everyone, sockets, roomFrom }, what) {
  const replays = await Promise.all(nodes.map((node) => metric(node, 'herald_cluster_messages_replayed_total')))
  t.diagnostic(`messages published again after the ${what}, per node: ${replays}`)
  for (const [k, s] of subs.entries()) await stayedConnected(s, sockets[k])
  await agree(nodes, `/channels/${room}/users`, undefined, everyone, 15_000)
  await agree(nodes, `/channels/${name}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 3 }, 15_000)
  const roomSeen = await marker(nodes[1], room, subs, { from: roomFrom })
  for (const frames of roomSeen) assert.deepEqual(frames, [], `no member_added or member_removed from the ${what}`)
}

// Webhook kinds left out of the session counts (checked on their own).
const COUNTS = new Set(['subscription_count', 'cache_miss'])

/** The accepted webhook events about channel (without COUNTS unless all). */
function hookEvents (receiver, channel, { all = false } = {}) {
  return receiver.accepted().filter((e) => e.channel === channel && (all || !COUNTS.has(e.name)))
}

/** A webhook event as one comparable line: name, channel, and user or event. */
const hookLine = (e) => [e.name, e.channel, e.user_id ?? '', e.event ?? '', e.data ?? '', e.subscription_count ?? ''].join(' ')

/**
 * Waits until the accepted webhook events about channels (without COUNTS)
 * are, as a multiset, expected; then SETTLE_MS more, and asserts they still
 * are: no node sent one twice, no second node sent one the first did.
 */
async function hooksExactly (receiver, channels, expected, { timeout = 15_000, all = false } = {}) {
  const lines = () => channels.flatMap((ch) => hookEvents(receiver, ch, { all })).map(hookLine).sort()
  const want = expected.map(hookLine).sort()
  await receiver.requests.waitUntil(() => lines().length >= want.length,
    { timeout, label: `${want.length} webhook events about ${channels.join(', ')}` })
  await sleep(SETTLE_MS) // what is under test: nothing more arrives
  assert.deepEqual(lines(), want, 'the webhook events, each exactly once')
  receiver.checkAll()
}

// ---------------------------------------------------------------------------
// Without redis-server

const redisBin = redisServerBin()
const CI = process.env.CI === 'true'

if (!redisBin && CI) {
  it('cluster: redis-server is installed (CI=true)', () => {
    assert.fail('redis-server is not installed; CI must install it (Debian package redis-server)')
  })
} else if (!redisBin) {
  it('cluster', { skip: 'redis-server is not installed (Debian package redis-server): skipping the cluster suites' }, () => {})
} else {
  clusterSuites()
}

/**
 * Starts a Redis (of topology: 'one Redis', '3 shards' or 'Redis Cluster')
 * and three nodes on it (each with env, and the apps given as `herald apps
 * create` arguments), with a webhook receiver every node posts to when
 * webhooks is set.
 */
async function startCluster ({ webhooks = false, env = {}, apps, topology = 'one Redis' } = {}) {
  const redis = await { 'one Redis': startRedis, '3 shards': () => startRedisShards(3), 'Redis Cluster': () => startRedisCluster(3) }[topology]()
  let receiver
  try {
    receiver = webhooks ? await startReceiver({ label: 'the webhook receiver of every node' }) : undefined
    const nodes = await startNodes(redis, 3, receiver ? { ...env, HERALD_APP_WEBHOOK_URL: receiver.url } : env, { apps })
    return { redis, nodes, receiver }
  } catch (err) {
    // The after hook gets nothing to stop: what started goes now, or the
    // redis-servers would keep the test process alive after the suite.
    await redis.stop()
    await receiver?.close()
    throw err
  }
}

/** Stops what startCluster started (any part may be missing), the clients first; a dead node is killed instead. */
async function stopCluster ({ clients, redis, nodes, receiver, dead = [] }) {
  clients.closeAll()
  for (const node of nodes ?? []) await (dead.includes(node) ? node.kill('SIGKILL') : node.stop())
  await redis?.stop()
  await receiver?.close()
}

function clusterSuites () {
  for (const topology of ['one Redis', '3 shards', 'Redis Cluster']) healthySuite(topology)
  failureSuites()
}

// ---------------------------------------------------------------------------
// Three healthy nodes, on one Redis, on three shards (HERALD_REDIS_URL a list)
// and on a Redis Cluster of three primaries (redis-cluster://)

function healthySuite (topology) {
  describe(`cluster: three nodes on ${topology}, clients spread over them`, () => {
    let redis, nodes, receiver
    const clients = new Clients()
    before(async () => ({ redis, nodes, receiver } = await startCluster({ webhooks: true, topology })))
    after(() => stopCluster({ clients, redis, nodes, receiver }))
    afterEach(() => clients.closeAll())

    it('public channel: an event triggered on any node reaches every subscriber on every node, once, in order', async () => {
      const name = 'cl-news'
      const [a, b, c] = nodes
      const subs = [a, a, b, c].map((node, i) => clients.connect(node, { label: `subscriber ${i} on ${node.id}` }))
      for (const s of subs) await subscribe(s, name)
      const story = (n) => ({ event: 'story', data: { n, text: 'é ✓ "quoted"', from: nodes[n].id } })
      for (const [n, node] of nodes.entries()) await trigger(node, name, 'story', story(n).data)
      const seen = await marker(b, name, subs)
      for (const [i, frames] of seen.entries()) {
        assert.deepEqual(frames, [story(0), story(1), story(2)], `${subs[i].label}: each event once, in the order triggered`)
      }
    })

    it('triggerBatch through any node: each event of the batch reaches its channel\'s subscribers on every node, once, in batch order; socket_id excludes across nodes', async () => {
      const [a, b, c] = nodes
      const names = ['cl-batch-1', 'cl-batch-2']
      const subs = [a, b, c].map((node) => clients.connect(node, { label: `subscriber on ${node.id}` }))
      for (const s of subs) for (const name of names) await subscribe(s, name)
      const ev = (name, n) => ({ channel: name, name: 'batched', data: JSON.stringify({ n }) })
      // Through node-b; the second event leaves out the subscriber on node-c.
      const batch = [ev(names[0], 1), { ...ev(names[1], 2), socket_id: subs[2].pusher.connection.socket_id }, ev(names[0], 3), ev(names[1], 4)]
      const res = await sdk(b).triggerBatch(batch)
      assert.equal(res.status, 200, 'triggerBatch through node-b')
      // And one through node-c, after it.
      const res2 = await sdk(c).triggerBatch([ev(names[1], 5), ev(names[0], 6)])
      assert.equal(res2.status, 200, 'triggerBatch through node-c')
      for (const name of names) {
        const seen = await marker(a, name, subs)
        const ns = (frames) => frames.map((f) => f.data.n)
        const want = name === names[0] ? [1, 3, 6] : [2, 4, 5]
        for (const [i, frames] of seen.entries()) {
          const expected = i === 2 && name === names[1] ? [4, 5] : want
          assert.deepEqual(ns(frames), expected, `${subs[i].label} on ${name}`)
          for (const f of frames) assert.equal(f.event, 'batched')
        }
      }
    })

    it('private channel: client events reach the subscribers on the other nodes, not the sender; socket_id excludes across nodes', async () => {
      const name = 'private-cl-desk'
      const [a, b, c] = nodes
      const a0 = clients.connect(a, { label: 'a0 on node-a' })
      const a1 = clients.connect(a, { label: 'a1 on node-a' })
      const b0 = clients.connect(b, { label: 'b0 on node-b' })
      const c0 = clients.connect(c, { label: 'c0 on node-c' })
      const all = [a0, a1, b0, c0]
      for (const x of all) await subscribe(x, name)
      const start = all.map((x) => x.frames.length)

      const e1 = { event: 'client-typing', data: { who: 'a0' } }
      const e2 = { event: 'client-typing', data: { who: 'c0' } }
      const e3 = { event: 'excluded', data: { n: 3 } }
      const e4 = { event: 'excluded', data: { n: 4 } }
      const arrived = (x, e, i) => x.frames.waitFor((f) => f.channel === name && f.event === e.event && f.data?.who === e.data.who,
        { from: start[i], label: `${e.event} from ${e.data.who}` })

      assert.ok(a0.pusher.channel(name).trigger(e1.event, e1.data))
      await Promise.all([a1, b0, c0].map((x) => arrived(x, e1, all.indexOf(x))))
      assert.ok(c0.pusher.channel(name).trigger(e2.event, e2.data))
      await Promise.all([a0, a1, b0].map((x) => arrived(x, e2, all.indexOf(x))))

      // Triggered on node-c, excluding a socket on node-a; on node-b, excluding one on node-c.
      await trigger(c, name, e3.event, e3.data, { socket_id: a0.pusher.connection.socket_id })
      await trigger(b, name, e4.event, e4.data, { socket_id: c0.pusher.connection.socket_id })

      const seen = await marker(a, name, all, { from: start })
      assert.deepEqual(seen[0], [e2, e4], 'a0: not its own client event, not the event excluding it')
      assert.deepEqual(seen[1], [e1, e2, e3, e4], 'a1: the same node as a0, nothing excluded')
      assert.deepEqual(seen[2], [e1, e2, e3, e4], 'b0')
      assert.deepEqual(seen[3], [e1, e3], 'c0: not its own client event, not the event excluding it')
    })

    it('presence: one user on two nodes is one member; member_added at their first connection anywhere, member_removed after the last', async () => {
      const room = 'presence-cl-room'
      const [a, b, c] = nodes
      const alice = { user_id: 'alice', user_info: { name: 'Alice', note: 'ünïcødé ✓' } }
      const bob = { user_id: 'bob', user_info: { name: 'Bob' } }
      const aliceA = clients.connect(a, { user: alice, label: 'alice on node-a' })
      const aliceB = clients.connect(b, { user: alice, label: 'alice on node-b' })
      const bobC = clients.connect(c, { user: bob, label: 'bob on node-c' })

      const { data: aliceMembers } = await subscribe(aliceA, room)
      assert.deepEqual(aliceMembers.members, { alice: alice.user_info })
      const added = once(aliceA.pusher.channel(room), 'pusher:member_added')
      const { data: bobMembers } = await subscribe(bobC, room)
      assert.deepEqual(bobMembers.members, { alice: alice.user_info, bob: bob.user_info })
      assert.deepEqual(bobMembers.me, { id: 'bob', info: bob.user_info })
      assert.deepEqual((await added)[0], { id: 'bob', info: bob.user_info })

      // Alice's second connection, on another node: she is a member already.
      const bobFrom = bobC.frames.length
      const { data: tabMembers } = await subscribe(aliceB, room)
      assert.equal(tabMembers.count, 2)
      assert.deepEqual(tabMembers.members, { alice: alice.user_info, bob: bob.user_info })
      let seen = await marker(c, room, [bobC, aliceA], { from: [bobFrom, 0] })
      assert.deepEqual(seen[0], [], 'bob: no member_added for alice\'s second connection')
      assert.deepEqual(seen[1], [{ event: 'pusher_internal:member_added', data: { user_id: 'bob', user_info: bob.user_info } }])
      const both = { users: [{ id: 'alice' }, { id: 'bob' }] }
      await agree(nodes, `/channels/${room}/users`, undefined, both)
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 2 })

      // Her first connection leaves; node-a has written that once the same
      // connection's next subscription succeeds.
      const bobFrom2 = bobC.frames.length
      aliceA.pusher.unsubscribe(room)
      await subscribe(aliceA, 'cl-room-barrier')
      seen = await marker(b, room, [bobC], { from: [bobFrom2] })
      assert.deepEqual(seen[0], [], 'bob: no member_removed while alice is still subscribed on node-b')
      assert.equal(bobC.pusher.channel(room).members.count, 2)
      await agree(nodes, `/channels/${room}/users`, undefined, both)

      // Her last connection leaves.
      const removed = once(bobC.pusher.channel(room), 'pusher:member_removed')
      aliceB.pusher.disconnect()
      assert.deepEqual((await removed)[0], { id: 'alice', info: alice.user_info })
      seen = await marker(a, room, [bobC], { from: [bobFrom2] })
      assert.deepEqual(seen[0], [{ event: 'pusher_internal:member_removed', data: { user_id: 'alice' } }])
      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'bob' }] })
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 1 })
    })

    it('laravel-echo: join (here, joining, leaving) and whisper between clients on different nodes', async () => {
      const echos = []
      const echo = (node, user) => {
        const e = new Echo({
          broadcaster: 'pusher',
          key: node.key,
          Pusher,
          ...clientOptions(node),
          channelAuthorization: { customHandler: sdkAuthorizer(sdk(node), user) }
        })
        echos.push(e)
        return e
      }
      const nextCall = (register, label) => withTimeout(new Promise((resolve) => register((...args) => resolve(args))), WAIT_MS, label)
      const subscribed = (channel, label) => withTimeout(new Promise((resolve, reject) => {
        channel.subscribed(resolve)
        channel.error((err) => reject(new Error(`${label}: ${JSON.stringify(err)}`)))
      }), WAIT_MS, `${label} to subscribe`)
      try {
        const [a, b, c] = nodes
        const ann = echo(a, { user_id: '1', user_info: { id: 1, name: 'Ann' } })
        const ben = echo(c, { user_id: '2', user_info: { id: 2, name: 'Ben' } })

        const annRoom = ann.join('cl-room.1')
        const annHere = nextCall((cb) => annRoom.here(cb), 'here (ann)')
        const joining = nextCall((cb) => annRoom.joining(cb), 'joining')
        assert.deepEqual(await annHere, [[{ id: 1, name: 'Ann' }]])
        const benRoom = ben.join('cl-room.1')
        const benHere = await nextCall((cb) => benRoom.here(cb), 'here (ben)')
        assert.deepEqual(benHere[0].sort((x, y) => x.id - y.id), [{ id: 1, name: 'Ann' }, { id: 2, name: 'Ben' }])
        assert.deepEqual(await joining, [{ id: 2, name: 'Ben' }])

        const reaction = nextCall((cb) => annRoom.listenForWhisper('reaction', cb), 'whisper reaction')
        benRoom.whisper('reaction', { emoji: '🎉' })
        assert.deepEqual(await reaction, [{ emoji: '🎉' }, { user_id: '2' }])

        const annChat = ann.private('cl-chat.9')
        const benChat = ben.private('cl-chat.9')
        await Promise.all([subscribed(annChat, 'ann private-cl-chat.9'), subscribed(benChat, 'ben private-cl-chat.9')])
        const typing = nextCall((cb) => benChat.listenForWhisper('typing', cb), 'whisper typing')
        annChat.whisper('typing', { name: 'Ann', typing: true })
        assert.deepEqual(await typing, [{ name: 'Ann', typing: true }, {}])

        const shipped = nextCall((cb) => ben.channel('cl-orders').listen('.OrderShipped', cb), '.OrderShipped')
        await subscribed(ben.channel('cl-orders'), 'ben cl-orders')
        await trigger(b, 'cl-orders', 'OrderShipped', { order: { id: 1 } })
        assert.deepEqual((await shipped)[0], { order: { id: 1 } })

        const leaving = nextCall((cb) => annRoom.leaving(cb), 'leaving')
        ben.leave('cl-room.1')
        assert.deepEqual(await leaving, [{ id: 2, name: 'Ben' }])
        await agree(nodes, '/channels/presence-cl-room.1/users', undefined, { users: [{ id: '1' }] })
      } finally {
        for (const e of echos) e.disconnect()
      }
    })

    it('sendToUser through any node reaches the user\'s connections on every node; terminate_connections through any node closes them all (4009)', async () => {
      const [a, b, c] = nodes
      const aliceA = await signIn(clients, a, { id: 'alice' })
      const aliceB = await signIn(clients, b, { id: 'alice' })
      const bobC = await signIn(clients, c, { id: 'bob' })
      const bobSocket = bobC.pusher.connection.socket_id
      const notes = [aliceA, aliceB, bobC].map((x) => record(x.pusher.user, ['note', 'marker'], `${x.label}: user events`))

      const note = { text: 'hello alice', nested: { list: [1, 'two', null] } }
      assert.equal((await sdk(c).sendToUser('alice', 'note', note)).status, 200)
      for (const log of notes.slice(0, 2)) {
        assert.deepEqual(await log.waitFor((e) => e.name === 'note', { label: 'note' }), { name: 'note', data: note })
      }
      // Bob, and alice's connections, get nothing more: markers sent afterwards arrive alone.
      assert.equal((await sdk(a).sendToUser('bob', 'marker', { n: 1 })).status, 200)
      assert.equal((await sdk(a).sendToUser('alice', 'marker', { n: 2 })).status, 200)
      for (const log of notes) await log.waitFor((e) => e.name === 'marker', { label: 'marker' })
      assert.deepEqual(notes[2].items, [{ name: 'marker', data: { n: 1 } }])
      for (const log of notes.slice(0, 2)) assert.deepEqual(log.items, [{ name: 'note', data: note }, { name: 'marker', data: { n: 2 } }])

      // Terminated through node-c, where alice has no connection.
      assert.equal((await sdk(c).terminateUserConnections('alice')).status, 200)
      await closedWith(aliceA, 4009)
      await closedWith(aliceB, 4009)
      await stayedConnected(bobC, bobSocket)
      // Bob's through node-a, where he has none.
      assert.equal((await sdk(a).terminateUserConnections('bob')).status, 200)
      await closedWith(bobC, 4009)

      // Not banned: alice comes back on node-b and is reached through node-a.
      const from = aliceB.frames.length
      aliceB.pusher.connect()
      await aliceB.frames.waitFor((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === '#server-to-user-alice',
        { from, label: 'signed in again after reconnecting' })
      const back = record(aliceB.pusher.user, ['welcome-back'], 'alice: user events')
      await sdk(a).sendToUser('alice', 'welcome-back', { n: 1 })
      assert.deepEqual(await back.waitFor(() => true, { label: 'welcome-back' }), { name: 'welcome-back', data: { n: 1 } })
    })

    it('watchlist: online when a watched user\'s first connection anywhere signs in, offline when the last leaves, once each', async () => {
      const [a, b, c] = nodes
      const bobB = await signIn(clients, b, { id: 'bob' })
      const alice = clients.connect(a, { userData: { id: 'alice', watchlist: ['bob', 'carol', 'dave'] }, label: 'alice on node-a' })
      const watch = record(alice.pusher.user.watchlist, ['online', 'offline'], 'alice: watchlist events')
      alice.pusher.signin()
      await signedIn(alice, 'alice')
      await watch.waitUntil((items) => items.length >= 2, { label: 'the initial online and offline events' })
      assert.deepEqual(watch.items, [
        { name: 'online', data: { name: 'online', user_ids: ['bob'] } },
        { name: 'offline', data: { name: 'offline', user_ids: ['carol', 'dave'] } }
      ])

      // Bob's second connection, on node-c: online already, nothing. Carol
      // signs in on node-c afterwards: the next event is hers.
      const bobC = await signIn(clients, c, { id: 'bob' })
      const carol = await signIn(clients, c, { id: 'carol' })
      await watch.waitFor((e) => e.name === 'online' && e.data.user_ids.includes('carol'), { from: 2, label: 'online carol' })

      // Bob's first connection leaves (node-b); carol's (node-c); then bob's last (node-c).
      bobB.pusher.disconnect()
      carol.pusher.disconnect()
      await watch.waitFor((e) => e.name === 'offline' && e.data.user_ids.includes('carol'), { from: 3, label: 'offline carol' })
      bobC.pusher.disconnect()
      await watch.waitFor((e) => e.name === 'offline' && e.data.user_ids.includes('bob'), { from: 3, label: 'offline bob' })

      // Dave signs in on node-b, which wrote bob's first sign-out before his
      // sign-in: had that sent an offline, it would be before dave's online.
      await signIn(clients, b, { id: 'dave' })
      await watch.waitFor((e) => e.name === 'online' && e.data.user_ids.includes('dave'), { from: 3, label: 'online dave' })
      assert.deepEqual(watch.items.slice(2), [
        { name: 'online', data: { name: 'online', user_ids: ['carol'] } },
        { name: 'offline', data: { name: 'offline', user_ids: ['carol'] } },
        { name: 'offline', data: { name: 'offline', user_ids: ['bob'] } },
        { name: 'online', data: { name: 'online', user_ids: ['dave'] } }
      ], 'once each: nothing for bob\'s second connection coming or his first leaving')
      assert.equal(alice.pusher.connection.state, 'connected')
    })

    it('cache channels: the last event triggered on one node is replayed to subscribers on the others; cache_miss on an empty one', async () => {
      const [a, b, c] = nodes
      const prices = 'cache-cl-prices'
      await trigger(a, prices, 'price', { sku: 'A1', cents: 1999 })
      await trigger(b, prices, 'price', { sku: 'A1', cents: 2499 })
      const last = { sku: 'A1', cents: 2499 }
      for (const node of nodes) {
        const body = await apiGet(node, `/channels/${prices}`, { info: 'cache' })
        assert.equal(body.cache?.data, JSON.stringify(last), `GET /channels/${prices}?info=cache from ${node.id}`)
        assert.ok(Number.isInteger(body.cache.ttl) && body.cache.ttl <= 1800 && body.cache.ttl >= 1790, `ttl ${body.cache.ttl}`)
      }

      const subs = [b, c].map((node) => clients.connect(node, { label: `subscriber on ${node.id}` }))
      for (const s of subs) await subscribe(s, prices)
      const seen = await marker(a, prices, subs)
      for (const frames of seen) assert.deepEqual(frames, [{ event: 'price', data: last }], 'the last event, once, right after subscribing')

      const emptyName = 'cache-cl-empty'
      const first = clients.connect(c, { label: 'first subscriber on node-c' })
      const miss = once(first.pusher.subscribe(emptyName), 'pusher:cache_miss')
      await subscribe(first, emptyName)
      await miss
      for (const node of nodes) {
        assert.deepEqual(await apiGet(node, `/channels/${emptyName}`, { info: 'cache' }), { occupied: true, cache: null }, node.id)
      }
      await trigger(a, emptyName, 'fill', { n: 1 })
      const second = clients.connect(b, { label: 'second subscriber on node-b' })
      await subscribe(second, emptyName)
      const [firstSeen, secondSeen] = await marker(c, emptyName, [first, second])
      assert.deepEqual(firstSeen, [{ event: 'pusher:cache_miss', data: {} }, { event: 'fill', data: { n: 1 } }])
      assert.deepEqual(secondSeen, [{ event: 'fill', data: { n: 1 } }], 'no cache_miss once filled on another node')

      // One cache_miss webhook: the first subscription only.
      await receiver.requests.waitUntil(() => hookEvents(receiver, emptyName, { all: true }).some((e) => e.name === 'cache_miss'),
        { label: 'the cache_miss webhook' })
      await sleep(SETTLE_MS) // what is under test: no second one
      assert.deepEqual(hookEvents(receiver, emptyName, { all: true }).filter((e) => e.name === 'cache_miss'),
        [{ name: 'cache_miss', channel: emptyName }])
    })

    it('HTTP queries: every node gives the same answer about channels, counts and users held on all of them', async () => {
      const [a, b, c] = nodes
      const room = 'presence-cl-q'
      const news = 'cl-q-news'
      const desk = 'private-cl-q-desk'
      const ann = { user_id: 'ann', user_info: { name: 'Ann' } }
      const annA = clients.connect(a, { user: ann, label: 'ann on node-a' })
      const annB = clients.connect(b, { user: ann, label: 'ann on node-b' })
      const benC = clients.connect(c, { user: { user_id: 'ben' }, label: 'ben on node-c' })
      for (const x of [annA, annB, benC]) await subscribe(x, room)
      const newsSubs = [a, b, b].map((node, i) => clients.connect(node, { label: `news ${i} on ${node.id}` }))
      for (const x of newsSubs) await subscribe(x, news)
      await subscribe(benC, desk)

      await agree(nodes, '/channels', { filter_by_prefix: 'presence-', info: 'user_count' }, { channels: { [room]: { user_count: 2 } } })
      await agree(nodes, '/channels', { filter_by_prefix: 'cl-q-' }, { channels: { [news]: {} } })
      await agree(nodes, '/channels', { filter_by_prefix: 'private-cl-q-' }, { channels: { [desk]: {} } })
      await agree(nodes, `/channels/${news}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 3 })
      await agree(nodes, `/channels/${desk}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 1 })
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 2 })
      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'ann' }, { id: 'ben' }] })
      await agree(nodes, '/channels/cl-q-nobody', { info: 'subscription_count' }, { occupied: false, subscription_count: 0 })
      for (const node of nodes) {
        assert.deepEqual(await trigger(node, [news, room], 'ping', {}, { info: 'subscription_count,user_count' }),
          { channels: { [news]: { subscription_count: 3 }, [room]: { user_count: 2 } } }, `trigger info from ${node.id}`)
      }

      // Some leave, on different nodes.
      newsSubs[1].pusher.unsubscribe(news)
      annA.pusher.disconnect()
      benC.pusher.disconnect()
      await agree(nodes, `/channels/${news}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 2 })
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 1 })
      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'ann' }] })
      await agree(nodes, `/channels/${desk}`, { info: 'subscription_count' }, { occupied: false, subscription_count: 0 })
      await agree(nodes, '/channels', { filter_by_prefix: 'private-cl-q-' }, { channels: {} })
      for (const node of nodes) {
        assert.deepEqual(await trigger(node, [news, room], 'ping', {}, { info: 'subscription_count,user_count' }),
          { channels: { [news]: { subscription_count: 2 }, [room]: { user_count: 1 } } }, `trigger info from ${node.id}`)
      }
    })

    // As on one node (channels-users.test.mjs): each subscriber gets the count
    // of its own subscription after subscription_succeeded, then one per change.
    it('pusher-js subscription_count: subscribers on every node get the cluster-wide count as others join and leave on other nodes', async () => {
      const name = 'cl-counted'
      const [a, b, c] = nodes
      const [sA, sB, sC] = nodes.map((node) => clients.connect(node, { label: `subscriber on ${node.id}` }))
      const watchCounts = (x) => {
        const log = new Log(`${x.label}: pusher:subscription_count`)
        x.pusher.subscribe(name).bind('pusher:subscription_count', (data) => log.push(data.subscription_count))
        return log
      }

      const countsA = watchCounts(sA)
      await subscribe(sA, name)
      await countsA.waitFor((n) => n === 1, { label: 'count 1 (node-a)' })

      const countsB = watchCounts(sB)
      await subscribe(sB, name)
      await countsA.waitFor((n) => n === 2, { from: 1, label: 'count 2 after node-b\'s joined (node-a)' })
      await countsB.waitFor((n) => n === 2, { label: 'count 2 (node-b)' })

      const countsC = watchCounts(sC)
      await subscribe(sC, name)
      await countsA.waitFor((n) => n === 3, { from: 2, label: 'count 3 after node-c\'s joined (node-a)' })
      await countsB.waitFor((n) => n === 3, { from: 1, label: 'count 3 after node-c\'s joined (node-b)' })
      await countsC.waitFor((n) => n === 3, { label: 'count 3 (node-c)' })
      for (const x of [sA, sB, sC]) assert.equal(x.pusher.channel(name).subscriptionCount, 3, x.label)
      await agree(nodes, `/channels/${name}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 3 })

      // node-b's leaves by unsubscribing, node-c's by disconnecting.
      sB.pusher.unsubscribe(name)
      await countsA.waitFor((n) => n === 2, { from: 3, label: 'count 2 after node-b\'s left (node-a)' })
      await countsC.waitFor((n) => n === 2, { from: 1, label: 'count 2 after node-b\'s left (node-c)' })
      sC.pusher.disconnect()
      await countsA.waitFor((n) => n === 1, { from: 4, label: 'count 1 after node-c\'s left (node-a)' })

      // Nothing more, nothing twice: a count would have come before the marker.
      await marker(b, name, [sA])
      assert.deepEqual(countsA.items, [1, 2, 3, 2, 1], 'node-a: one count per change anywhere, in order')
      assert.deepEqual(countsB.items, [2, 3], 'node-b: from its subscription until it left')
      assert.deepEqual(countsC.items, [3, 2], 'node-c: from its subscription until it left')
      assert.equal(sA.pusher.channel(name).subscriptionCount, 1)
      await agree(nodes, `/channels/${name}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 1 })
    })

    it('webhooks: a presence session over three nodes is reported once — occupied, member_added, client_event, member_removed, vacated', async () => {
      const room = 'presence-cl-hooked'
      const pub = 'cl-hooked-public'
      const [a, b, c] = nodes
      const alice = { user_id: 'alice', user_info: { name: 'Alice' } }
      const aliceA = clients.connect(a, { user: alice, label: 'alice on node-a' })
      const aliceB = clients.connect(b, { user: alice, label: 'alice on node-b' })
      const bobC = clients.connect(c, { user: { user_id: 'bob' }, label: 'bob on node-c' })
      await subscribe(aliceA, room)
      await subscribe(aliceB, room)
      const { channel } = await subscribe(bobC, room)
      const bobSocket = bobC.pusher.connection.socket_id
      const hello = once(aliceB.pusher.channel(room), 'client-hello')
      channel.trigger('client-hello', { text: 'hi ✓' })
      await hello
      const pubSubs = nodes.map((node) => clients.connect(node, { label: `public subscriber on ${node.id}` }))
      for (const x of pubSubs) await subscribe(x, pub)

      aliceA.pusher.unsubscribe(room)
      await subscribe(aliceA, 'cl-hooked-barrier')
      bobC.pusher.disconnect()
      aliceB.pusher.disconnect()
      for (const x of pubSubs) x.pusher.disconnect()

      await hooksExactly(receiver, [room, pub], [
        { name: 'channel_occupied', channel: room },
        { name: 'member_added', channel: room, user_id: 'alice' },
        { name: 'member_added', channel: room, user_id: 'bob' },
        { name: 'client_event', channel: room, event: 'client-hello', data: JSON.stringify({ text: 'hi ✓' }), user_id: 'bob' },
        { name: 'member_removed', channel: room, user_id: 'bob' },
        { name: 'member_removed', channel: room, user_id: 'alice' },
        { name: 'channel_vacated', channel: room },
        { name: 'channel_occupied', channel: pub },
        { name: 'channel_vacated', channel: pub }
      ])
      const clientEvent = hookEvents(receiver, room).find((e) => e.name === 'client_event')
      assert.equal(clientEvent.socket_id, bobSocket)
      // One subscription_count per change, from whichever node made it.
      assert.deepEqual(hookEvents(receiver, pub, { all: true }).filter((e) => e.name === 'subscription_count')
        .map((e) => e.subscription_count).sort(), [0, 1, 1, 2, 2, 3])
    })

    // The hold is kept in Redis: leaving on one node and coming back on
    // another within it cancels out, as on one node.
    it('webhooks: a member leaving on one node and coming back on another within 3 s is reported as neither', async () => {
      const room = 'presence-cl-flip'
      const solo = 'presence-cl-flip-solo'
      const [a, b, c] = nodes
      const anchor = clients.connect(c, { user: { user_id: 'anchor' }, label: 'anchor on node-c' })
      const aliceA = clients.connect(a, { user: { user_id: 'alice' }, label: 'alice on node-a' })
      const aliceB = clients.connect(b, { user: { user_id: 'alice' }, label: 'alice on node-b' })
      const carolA = clients.connect(a, { user: { user_id: 'carol' }, label: 'carol on node-a' })
      const carolB = clients.connect(b, { user: { user_id: 'carol' }, label: 'carol on node-b' })
      await subscribe(anchor, room)
      await subscribe(aliceA, room)
      await subscribe(carolA, solo)
      await hooksExactly(receiver, [room, solo], [
        { name: 'channel_occupied', channel: room },
        { name: 'member_added', channel: room, user_id: 'anchor' },
        { name: 'member_added', channel: room, user_id: 'alice' },
        { name: 'channel_occupied', channel: solo },
        { name: 'member_added', channel: solo, user_id: 'carol' }
      ])

      // Alice leaves the room on node-a and is back on node-b; carol, alone
      // in hers, leaves it (vacating it) on node-a and is back on node-b.
      const gone = once(anchor.pusher.channel(room), 'pusher:member_removed')
      const backAgain = once(anchor.pusher.channel(room), 'pusher:member_added')
      aliceA.pusher.disconnect()
      carolA.pusher.disconnect()
      await gone
      await subscribe(aliceB, room)
      await subscribe(carolB, solo)
      await backAgain

      // After the hold, with alice and carol members again, the webhooks
      // must not say otherwise.
      await sleep(3500) // the hold is what is under test
      await hooksExactly(receiver, [room, solo], [
        { name: 'channel_occupied', channel: room },
        { name: 'member_added', channel: room, user_id: 'anchor' },
        { name: 'member_added', channel: room, user_id: 'alice' },
        { name: 'channel_occupied', channel: solo },
        { name: 'member_added', channel: solo, user_id: 'carol' }
      ])
    })
  })
}

function failureSuites () {
  // -------------------------------------------------------------------------
  // The app's limits, held over the cluster

  describe('cluster: an app\'s max_presence_members and max_connections hold over the three nodes', () => {
    // Apps of their own (in every node's database), so that the default
    // app's clients elsewhere in the file count toward neither.
    const FULL = Object.freeze({ appId: 'cl-full', key: 'cl-full-key', secret: 'cl-full-secret', maxMembers: 3 })
    const QUOTA = Object.freeze({ appId: 'cl-quota', key: 'cl-quota-key', secret: 'cl-quota-secret', maxConnections: 3 })
    const creds = ({ appId, key, secret }) => ({ appId, key, secret })
    let redis, nodes
    const clients = new Clients()
    before(async () => ({ redis, nodes } = await startCluster({
      apps: [
        ['--id', FULL.appId, '--key', FULL.key, '--secret', FULL.secret, '--max-presence-members', String(FULL.maxMembers)],
        ['--id', QUOTA.appId, '--key', QUOTA.key, '--secret', QUOTA.secret, '--max-connections', String(QUOTA.maxConnections)]
      ]
    })))
    after(() => stopCluster({ clients, redis, nodes }))
    afterEach(() => clients.closeAll())

    it('presence: members on three nodes fill the channel; one more user on any node gets subscription_error 403 LimitReached; a member\'s connection on another node is let in', async () => {
      const room = 'presence-cl-full'
      const [a, b, c] = nodes
      const member = (node, id) => clients.connect(node, {
        key: FULL.key,
        server: sdk(node, creds(FULL)),
        user: { user_id: id, user_info: { name: id.toUpperCase() } },
        label: `${id} on ${node.id}`
      })
      const info = (id) => ({ name: id.toUpperCase() })
      const u1A = member(a, 'u1')
      const u2B = member(b, 'u2')
      const u3C = member(c, 'u3')
      await subscribe(u1A, room)
      const joined = [u1A, u2B].map((x) => once(x.pusher.subscribe(room), 'pusher:member_added',
        { filter: (m) => m.id === 'u3', label: `member_added u3 (${x.label})` }))
      await subscribe(u2B, room)
      const { data: full } = await subscribe(u3C, room)
      assert.equal(full.count, FULL.maxMembers)
      assert.deepEqual(full.members, { u1: info('u1'), u2: info('u2'), u3: info('u3') })
      await Promise.all(joined)
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 3 }, WAIT_MS, creds(FULL))
      const from = [u1A, u2B, u3C].map((x) => x.frames.length)

      // A fourth user, on node-b: refused the way pusher-js reports it, and
      // still connected.
      const u4B = member(b, 'u4')
      const u4Socket = await connected(u4B)
      const answer = u4B.pusher.subscribe(room)
      let admitted = false
      answer.bind('pusher:subscription_succeeded', () => { admitted = true })
      const [err] = await once(answer, 'pusher:subscription_error', { label: 'pusher:subscription_error for u4' })
      assert.deepEqual(err, { type: 'LimitReached', error: `The presence channel has the maximum of ${FULL.maxMembers} members.`, status: 403 })
      await stayedConnected(u4B, u4Socket)

      // u1's second connection, on node-c: a member already, let in.
      const u1C = member(c, 'u1')
      const { data: again } = await subscribe(u1C, room)
      assert.equal(again.count, FULL.maxMembers)
      assert.deepEqual(again.members, { u1: info('u1'), u2: info('u2'), u3: info('u3') })
      assert.deepEqual(again.me, { id: 'u1', info: info('u1') })

      // Neither was news to the members on any node; u4 was never admitted.
      const seen = await marker(a, room, [u1A, u2B, u3C], { from, creds: creds(FULL) })
      for (const frames of seen) assert.deepEqual(frames, [], 'no member_added for u4 nor for u1\'s second connection')
      await roundTrip(u4B)
      assert.ok(!admitted && !u4B.frames.items.some((f) => f.channel === room && f.event === 'pusher_internal:subscription_succeeded'),
        'u4 got subscription_succeeded as well')
      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'u1' }, { id: 'u2' }, { id: 'u3' }] }, WAIT_MS, creds(FULL))

      // A member leaving on node-c frees a place for anyone on any node.
      const left = once(u1A.pusher.channel(room), 'pusher:member_removed', { filter: (m) => m.id === 'u3', label: 'member_removed u3' })
      u3C.pusher.disconnect()
      await left
      const u5A = member(a, 'u5')
      const { data: after } = await subscribe(u5A, room)
      assert.deepEqual(Object.keys(after.members).sort(), ['u1', 'u2', 'u5'])
      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'u1' }, { id: 'u2' }, { id: 'u5' }] }, WAIT_MS, creds(FULL))
    })

    it('max_connections: the connections on the other nodes count (from their next heartbeat); one more on any node is refused with 4004; a leave anywhere makes room', async (t) => {
      const [a, b, c] = nodes
      const conns = `herald_connections{app_id="${QUOTA.appId}"}`
      /** node's own open connections of the app, as its /metrics says. */
      const local = (node) => metric(node, conns)
      let n = 0
      /** Opens a connection of the quota app on node: resolves with it once connected, or refused (4004 and disconnected, never connected). */
      const attempt = async (node) => {
        const x = clients.connect(node, { key: QUOTA.key, label: `connection ${++n} of ${QUOTA.appId} on ${node.id}` })
        const state = await x.states.waitFor((s) => s === 'connected' || s === 'disconnected' || s === 'failed' || s === 'unavailable',
          { label: 'connected or refused' })
        if (state === 'connected') return { x, refused: false }
        await x.errors.waitFor((e) => errorCode(e) === 4004, { label: 'a connection error with code 4004' })
        await x.states.waitFor((s) => s === 'disconnected', { label: 'state disconnected' })
        assert.ok(!x.states.items.includes('connected'), `${x.label}: connected before being refused`)
        return { x, refused: true }
      }
      /**
       * Until node refuses a connection (within timeout): each one it still
       * accepts is closed again, and gone from its count, before the next.
       * Resolves with how many it accepted first.
       */
      const refusedOn = async (node, ownCount, why, timeout = 5000) => {
        const deadline = Date.now() + timeout
        for (let accepted = 0; ; accepted++) {
          const { x, refused } = await attempt(node)
          if (refused) return accepted
          x.pusher.disconnect()
          await eventually(async () => assert.equal(await local(node), ownCount, `${node.id}'s own connections of the app`))
          assert.ok(Date.now() < deadline, `${node.id} still accepted a connection ${timeout} ms after ${why}`)
          await sleep(100) // the poll's interval: what is awaited is the next heartbeat
        }
      }
      /** Until node accepts a connection (within timeout); resolves with it. */
      const acceptedOn = async (node, why, timeout = 5000) => {
        const deadline = Date.now() + timeout
        for (;;) {
          const { x, refused } = await attempt(node)
          if (!refused) return x
          assert.ok(Date.now() < deadline, `${node.id} still refused connections ${timeout} ms after ${why}`)
          await sleep(100) // the poll's interval: what is awaited is the next heartbeat
        }
      }

      // One connection on each node: three, the cap, none of them over any
      // node's own count.
      const first = []
      for (const node of nodes) {
        const { x, refused } = await attempt(node)
        assert.ok(!refused, `${x.label} refused: only ${first.length} connections before it`)
        first.push(x)
      }
      const sockets = first.map((x) => x.pusher.connection.socket_id)
      const openedAt = Date.now()

      // node-a holds one of them: it refuses a second only by counting
      // node-b's and node-c's.
      const early = await refusedOn(a, 1, 'the three were connected')
      t.diagnostic(`node-a refused the 4th connection ${Date.now() - openedAt} ms after the three were connected (${early} accepted before)`)
      assert.equal(await local(a), 1, 'node-a itself has one connection of the app: under the cap on its own')
      await refusedOn(b, 1, 'node-a refused')
      await refusedOn(c, 1, 'node-a refused')
      // And it stays so: refused on every node at once now.
      for (const node of nodes) assert.equal((await attempt(node)).refused, true, `the 4th connection on ${node.id}, again`)
      for (const [i, x] of first.entries()) await stayedConnected(x, sockets[i])

      // node-b's leaves: within a heartbeat node-c takes one more (two of its
      // own), and then node-b, with none, refuses one.
      first[1].pusher.disconnect()
      await eventually(async () => assert.equal(await local(b), 0, 'node-b\'s connections of the app'))
      const leftAt = Date.now()
      const second = await acceptedOn(c, 'node-b\'s connection left')
      t.diagnostic(`node-c took a connection ${Date.now() - leftAt} ms after node-b's left`)
      assert.equal(await local(c), 2)
      await refusedOn(b, 0, 'node-c took its second')
      assert.equal(await local(b), 0, 'node-b has none of the app\'s connections: it counts node-a\'s one and node-c\'s two')
      // node-a and node-c learn of the others' counts from their own next
      // heartbeats, which a loaded machine may hold up past node-b's: each
      // refuses a 4th within one.
      await refusedOn(a, 1, 'node-b refused')
      await refusedOn(c, 2, 'node-b refused')
      for (const x of [first[0], first[2], second]) await roundTrip(x)
    })
  })

  // -------------------------------------------------------------------------
  // A node dies

  describe('cluster: a node SIGKILLed in the middle of a presence session', () => {
    let redis, nodes, receiver
    const clients = new Clients()
    before(async () => ({ redis, nodes, receiver } = await startCluster({ webhooks: true })))
    after(() => stopCluster({ clients, redis, nodes, receiver, dead: nodes?.slice(2) }))

    it('the survivors see member_removed and offline within 10 s; every survivor\'s HTTP answers agree; webhooks once', async (t) => {
      const room = 'presence-cl-crash'
      const alone = 'cl-crash-alone'
      const [a, b, c] = nodes
      const survivors = [a, b]
      const aliceA = clients.connect(a, { user: { user_id: 'alice' }, userData: { id: 'alice', watchlist: ['bob', 'carol'] }, label: 'alice on node-a' })
      const watch = record(aliceA.pusher.user.watchlist, ['online', 'offline'], 'alice: watchlist events')
      aliceA.pusher.signin()
      await signedIn(aliceA, 'alice')
      const carolB = clients.connect(b, { user: { user_id: 'carol' }, label: 'carol on node-b' })
      const bobC = clients.connect(c, { user: { user_id: 'bob' }, userData: { id: 'bob' }, label: 'bob on node-c' })
      bobC.pusher.signin()
      await signedIn(bobC, 'bob')
      const carolC = clients.connect(c, { user: { user_id: 'carol' }, userData: { id: 'carol' }, label: 'carol on node-c' })
      carolC.pusher.signin()
      await signedIn(carolC, 'carol')
      const carolBSignedIn = await signIn(clients, b, { id: 'carol' }, 'carol signed in on node-b')
      for (const x of [aliceA, carolB, bobC, carolC]) await subscribe(x, room)
      await subscribe(carolC, alone)
      await watch.waitFor((e) => e.name === 'online' && e.data.user_ids.includes('carol'), { label: 'online bob and carol' })
      const watchFrom = watch.length

      await agree(nodes, `/channels/${room}/users`, undefined, { users: [{ id: 'alice' }, { id: 'bob' }, { id: 'carol' }] })
      await agree(nodes, `/channels/${alone}`, undefined, { occupied: true })
      await hooksExactly(receiver, [room, alone], [
        { name: 'channel_occupied', channel: room },
        { name: 'member_added', channel: room, user_id: 'alice' },
        { name: 'member_added', channel: room, user_id: 'carol' },
        { name: 'member_added', channel: room, user_id: 'bob' },
        { name: 'channel_occupied', channel: alone }
      ])
      const sockets = [aliceA, carolB, carolBSignedIn].map((x) => x.pusher.connection.socket_id)
      const fromA = aliceA.frames.length
      const fromB = carolB.frames.length

      const killedAt = Date.now()
      const ended = await c.kill('SIGKILL')
      assert.equal(ended.signal, 'SIGKILL')
      const removedA = once(aliceA.pusher.channel(room), 'pusher:member_removed', { timeout: CONVERGE_MS, label: 'member_removed bob (alice, node-a)' })
      const removedB = once(carolB.pusher.channel(room), 'pusher:member_removed', { timeout: CONVERGE_MS, label: 'member_removed bob (carol, node-b)' })
      const offline = watch.waitFor((e) => e.name === 'offline', { from: watchFrom, timeout: CONVERGE_MS, label: 'offline bob' })
      assert.equal((await removedA)[0].id, 'bob')
      assert.equal((await removedB)[0].id, 'bob')
      assert.deepEqual(await offline, { name: 'offline', data: { name: 'offline', user_ids: ['bob'] } })
      const converged = Date.now() - killedAt
      assert.ok(converged <= CONVERGE_MS, `the survivors saw bob leave ${converged} ms after node-c died`)
      t.diagnostic(`the survivors saw bob leave ${converged} ms after node-c died`)

      // Carol is still a member and online through node-b; only bob left.
      const seen = await marker(a, room, [aliceA, carolB], { from: [fromA, fromB] })
      for (const frames of seen) assert.deepEqual(frames, [{ event: 'pusher_internal:member_removed', data: { user_id: 'bob' } }])
      assert.deepEqual(watch.items.slice(watchFrom), [{ name: 'offline', data: { name: 'offline', user_ids: ['bob'] } }])
      await agree(survivors, `/channels/${room}/users`, undefined, { users: [{ id: 'alice' }, { id: 'carol' }] })
      await agree(survivors, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 2 })
      await agree(survivors, `/channels/${alone}`, { info: 'subscription_count' }, { occupied: false, subscription_count: 0 })
      await agree(survivors, '/channels', { filter_by_prefix: 'presence-', info: 'user_count' }, { channels: { [room]: { user_count: 2 } } })
      for (const [i, x] of [aliceA, carolB, carolBSignedIn].entries()) await stayedConnected(x, sockets[i])

      // The webhooks of bob and of the vacated channel, sent by a survivor, once.
      await hooksExactly(receiver, [room, alone], [
        { name: 'channel_occupied', channel: room },
        { name: 'member_added', channel: room, user_id: 'alice' },
        { name: 'member_added', channel: room, user_id: 'carol' },
        { name: 'member_added', channel: room, user_id: 'bob' },
        { name: 'channel_occupied', channel: alone },
        { name: 'member_removed', channel: room, user_id: 'bob' },
        { name: 'channel_vacated', channel: alone }
      ], { timeout: 20_000 })
    })
  })

  // -------------------------------------------------------------------------
  // Redis restarts

  describe('cluster: Redis restarted (empty) in the middle of a stream of triggers', () => {
    let redis, nodes, receiver
    const clients = new Clients()
    before(async () => ({ redis, nodes, receiver } = await startCluster({ webhooks: true })))
    after(() => stopCluster({ clients, redis, nodes, receiver }))

    it('every trigger answered 200 reaches the subscribers on every node, every refused one is 503 cluster_unavailable; connections stay open', async (t) => {
      const name = 'cl-stream'
      const room = 'presence-cl-stream'
      const before = await subscribersOnEveryNode(clients, nodes, name, room)
      const { subs } = before

      const stream = triggerStream(nodes, name)
      const { results, ok, refused } = stream
      let killedAt, restartedAt // ms since the stream started
      // Per subscriber, the ticks it had when Redis was killed; the first
      // trigger not answered before Redis was gone.
      const ticksOf = (s) => new Set(s.frames.items.filter((f) => f.event === 'tick').map((f) => f.data.i))
      let received, killedFrom
      try {
        await waitFor(() => ok().length >= 30, '30 triggers answered before the restart')
        received = subs.map(ticksOf)
        await redis.kill()
        killedAt = stream.since()
        killedFrom = results.length
        // Kept down until every node has refused one and its heartbeat has
        // seen the outage (a restart between two heartbeats is the next test).
        await waitFor(() => new Set(refused(killedFrom).map((r) => r.node)).size === nodes.length,
          () => `every node refusing while Redis is down; results since the kill: ${JSON.stringify(results.slice(killedFrom).slice(-20))}`)
        await eventually(async () => {
          for (const node of nodes) assert.equal(await metric(node, 'herald_cluster_up'), 0, `${node.id}: herald_cluster_up`)
        }, 10_000)
        const restartedFrom = results.length
        await redis.start()
        restartedAt = stream.since()
        // Back: each node accepts again, and goes on accepting until every
        // subscriber has had an event accepted after the restart.
        await stream.flowingAgain(subs, restartedFrom, 'restart', 30_000)
      } finally {
        await stream.stop()
      }

      assertUnavailable(refused())
      const accepted = ok().map((r) => r.i)
      assert.ok(refused().length > 0)

      // Every accepted trigger reaches every subscriber, once; no refused one
      // does. Redis keeps nothing when killed (no persistence): a trigger it
      // took just before that a node had not read yet is gone from it, and
      // reaches that node only because its publishing node publishes it
      // again once Redis is back. Those (sent before the kill and not at the
      // subscriber at the kill) may come late, after triggers sent since;
      // every other one comes in the order it was sent.
      const lateAt = (k) => new Set(ok().filter((r) => r.i <= killedFrom && !received[k].has(r.i)).map((r) => r.i))
      const missing = (s) => {
        const got = ticksOf(s)
        return ok().filter((r) => !got.has(r.i))
      }
      for (const s of subs) {
        await s.frames.waitUntil(() => missing(s).length === 0, { timeout: 15_000, label: 'every accepted tick' }).catch(() => {
          const lost = missing(s)
          assert.fail(`${s.label}: ${lost.length} of the ${accepted.length} triggers answered 200 never arrived; Redis was ` +
            `killed at ${killedAt} ms and answered again at ${restartedAt} ms; the first lost ones (trigger, node, answered at ms): ` +
            JSON.stringify(lost.slice(0, 8).map((r) => [r.i, r.node, r.at])) + ', the last: ' + JSON.stringify(lost.slice(-3).map((r) => [r.i, r.node, r.at])))
        })
      }
      // The trigger in flight when Redis was killed may have been taken (and
      // read by a node) with its answer lost with Redis: refused, yet
      // delivered — like any request whose answer is lost. No other refused
      // one may arrive.
      const inFlight = refused().some((r) => r.i === killedFrom) ? [killedFrom] : []
      const seen = await marker(nodes[0], name, subs)
      for (const [k, frames] of seen.entries()) {
        const got = frames.map((f) => f.data.i)
        const mayBeLate = lateAt(k)
        assert.ok(got.filter((i) => inFlight.includes(i)).length <= 1, `${subs[k].label}: the trigger in flight at the kill twice`)
        if (got.some((i) => inFlight.includes(i))) t.diagnostic(`${subs[k].label}: trigger ${inFlight}, refused as Redis was killed, had reached it`)
        const delivered = got.filter((i) => !inFlight.includes(i))
        assert.deepEqual([...delivered].sort((x, y) => x - y), accepted, `${subs[k].label}: every accepted tick once, and nothing else`)
        assert.deepEqual(delivered.filter((i) => !mayBeLate.has(i)), accepted.filter((i) => !mayBeLate.has(i)),
          `${subs[k].label}: the accepted ticks in order (but for those Redis lost and their node published again)`)
        if (mayBeLate.size > 0) t.diagnostic(`${subs[k].label}: triggers ${[...mayBeLate]}, answered 200, had not arrived at the kill; all came`)
      }
      await assertStateKept(t, nodes, name, room, before, 'restart')

      // Still one cluster: a new subscriber on node-c is seen joining by the others.
      const late = clients.connect(nodes[2], { user: { user_id: 'late' }, label: 'late subscriber on node-c' })
      const joined = subs.map((s) => once(s.pusher.channel(room), 'pusher:member_added', { filter: (m) => m.id === 'late' }))
      await subscribe(late, room)
      await Promise.all(joined)
      await agree(nodes, `/channels/${room}`, { info: 'user_count' }, { occupied: true, user_count: 4 })
    })
  })

  // -------------------------------------------------------------------------
  // A Sentinel failover

  describe('cluster: the Sentinel-managed primary SIGKILLed in the middle of a stream of triggers', () => {
    let primary, replica, sentinel, nodes
    const clients = new Clients()
    before(async () => {
      primary = await startRedis()
      replica = await startRedis({ args: ['--replicaof', '127.0.0.1', String(primary.port)] })
      sentinel = await startSentinel('herald', primary.port)
      // The Sentinel promotes only a replica it knows, and one in sync.
      await eventually(async () => assert.match(await redisCli(replica.port, 'INFO', 'replication'), /master_link_status:up/), 15_000)
      await eventually(async () => assert.match(await redisCli(sentinel.port, 'SENTINEL', 'MASTER', 'herald'), /^num-slaves\n1$/m), 30_000)
      nodes = await startNodes({ url: `redis-sentinel://127.0.0.1:${sentinel.port}/herald` }, 3)
    })
    after(async () => {
      await stopCluster({ clients, redis: primary, nodes })
      await replica?.stop()
      await sentinel?.stop()
    })

    it('the nodes follow the promotion: every trigger answered 200 reaches every subscriber once, the others are 503 cluster_unavailable; connections stay open; the presence lists agree', async (t) => {
      const name = 'cl-failover'
      const room = 'presence-cl-failover'
      const before = await subscribersOnEveryNode(clients, nodes, name, room)
      const { subs } = before

      const stream = triggerStream(nodes, name)
      const { results, ok, refused } = stream
      let killedAt, killedFrom
      try {
        await waitFor(() => ok().length >= 30, '30 triggers answered before the failover')
        await primary.kill()
        killedAt = stream.since()
        killedFrom = results.length
        // No one restarts the primary: the nodes must find the promoted
        // replica through the Sentinel by themselves.
        await stream.flowingAgain(subs, killedFrom, 'failover', 60_000)
      } finally {
        await stream.stop()
      }

      assertUnavailable(refused())
      const accepted = ok().map((r) => r.i)
      const acceptedSet = new Set(accepted)
      const ticksOf = (s) => s.frames.items.filter((f) => f.event === 'tick').map((f) => f.data.i)
      for (const s of subs) {
        await s.frames.waitUntil(() => { const got = new Set(ticksOf(s)); return accepted.every((i) => got.has(i)) },
          { timeout: 15_000, label: `${s.label}: every accepted tick` })
      }
      // Once a marker triggered after them all has arrived, every tick that
      // was coming has: each accepted one once, none twice. A refused one
      // may have been taken by the primary just before it died, its answer
      // lost with it, like any request whose answer is lost: reported.
      const seen = await marker(nodes[0], name, subs)
      for (const [k, frames] of seen.entries()) {
        const got = frames.map((f) => f.data.i)
        assert.equal(new Set(got).size, got.length, `${subs[k].label}: a tick twice: ${got}`)
        assert.deepEqual(got.filter((i) => acceptedSet.has(i)).sort((x, y) => x - y), accepted, `${subs[k].label}: every accepted tick once`)
        const refusedYetDelivered = got.filter((i) => !acceptedSet.has(i))
        if (refusedYetDelivered.length > 0) t.diagnostic(`${subs[k].label}: triggers ${refusedYetDelivered}, answered 503 as the primary died, had reached it`)
      }
      const window = refused().map((r) => r.at - killedAt)
      t.diagnostic(`primary SIGKILLed at ${killedAt} ms of the stream; ${accepted.length} triggers answered 200, ${window.length} answered 503, ` +
        `from ${Math.min(...window)} ms to ${Math.max(...window)} ms after the kill (the 503 window)`)
      await assertStateKept(t, nodes, name, room, before, 'failover')
    })
  })

  describe('cluster: Redis restarted (empty) between two heartbeats', () => {
    let redis, nodes
    const clients = new Clients()
    before(async () => ({ redis, nodes } = await startCluster()))
    after(() => stopCluster({ clients, redis, nodes }))

    // A restart shorter than a heartbeat fails no write: the stream reader,
    // seeing Redis's generation change, asks for the rebuild.
    it('the nodes\' records are rebuilt all the same: members, counts and occupancy come back on every node', async () => {
      const room = 'presence-cl-blink'
      const news = 'cl-blink-news'
      const subs = nodes.map((node) => clients.connect(node, { user: { user_id: `user-${node.id}` }, label: `subscriber on ${node.id}` }))
      for (const s of subs) {
        await subscribe(s, room)
        await subscribe(s, news)
      }
      const sockets = subs.map((s) => s.pusher.connection.socket_id)
      const everyone = { users: nodes.map((node) => ({ id: `user-${node.id}` })) }
      await agree(nodes, `/channels/${room}/users`, undefined, everyone)
      const from = subs.map((s) => s.frames.length)

      await redis.restart()
      await agree(nodes, `/channels/${room}/users`, undefined, everyone, CONVERGE_MS)
      await agree(nodes, `/channels/${news}`, { info: 'subscription_count' }, { occupied: true, subscription_count: 3 }, CONVERGE_MS)
      await agree(nodes, '/channels', { filter_by_prefix: 'presence-', info: 'user_count' }, { channels: { [room]: { user_count: 3 } } })
      for (const [k, s] of subs.entries()) await stayedConnected(s, sockets[k])
      const seen = await marker(nodes[2], room, subs, { from })
      for (const frames of seen) assert.deepEqual(frames, [], 'no member_added or member_removed from the rebuild')
    })
  })
}
