// Idempotent publishing through the official `pusher` Node server SDK: a
// trigger (and a batch) retried with the same Idempotency-Key, on the same
// node or another node of a cluster on a real Redis, reaches each pusher-js
// subscriber once; the same key with another body is 422.
//
// The SDK has no option for extra headers; it takes an http.Agent, and an
// agent that sets the header on each request it carries is how an
// application sends one through it today.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test idempotency.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import Pusher from 'pusher'

import { Clients, sdk, connected, subscribe } from './helpers.mjs'
import { redisServerBin, startRedis, startNodes } from './cluster-helpers.mjs'

/** An http.Agent that sends Idempotency-Key: key with every request. */
function keyAgent (key) {
  return new (class extends http.Agent {
    addRequest (req, options) {
      req.setHeader('Idempotency-Key', key)
      super.addRequest(req, options)
    }
  })()
}

/** The SDK on node, sending key with every request. */
const keyed = (node, key) => sdk(node, { agent: keyAgent(key) })

/** Awaits an SDK call that must fail; returns the RequestError. */
async function failure (promise) {
  const err = await promise.then((res) => assert.fail(`expected a failure, got ${res.status}`), (e) => e)
  assert.ok(err instanceof Pusher.RequestError, `expected a RequestError, got ${err}`)
  return err
}

/** The events (name:data) c got on channel up to the marker event with data m. */
async function eventsUntilMarker (c, channel, m) {
  const marker = await c.frames.waitFor((f) => f.channel === channel && f.event === 'marker' && f.data?.m === m,
    { label: `marker ${m} on ${channel}` })
  return c.frames.items.slice(0, c.frames.items.indexOf(marker))
    .filter((f) => f.channel === channel && !f.event.startsWith('pusher'))
    .map((f) => `${f.event}:${JSON.stringify(f.data)}`)
}

const haveRedis = redisServerBin() !== undefined
if (!haveRedis && process.env.CI === 'true') throw new Error('redis-server is not installed (Debian package redis-server)')

describe('Idempotency-Key over two nodes of a cluster', { skip: !haveRedis && 'redis-server is not installed' }, () => {
  let redis, nodes
  const clients = new Clients()
  before(async () => {
    redis = await startRedis()
    nodes = await startNodes(redis, 2)
  })
  after(async () => {
    clients.closeAll()
    for (const n of nodes ?? []) await n.stop()
    await redis?.stop()
  })

  it('delivers a trigger retried on the other node once, and refuses the key with another body', async () => {
    const [a, b] = nodes
    const ca = clients.connect(a, { label: 'client of node a' })
    const cb = clients.connect(b, { label: 'client of node b' })
    await Promise.all([connected(ca), connected(cb)])
    await Promise.all([subscribe(ca, 'orders'), subscribe(cb, 'orders')])

    const first = await keyed(a, 'order-1').trigger('orders', 'created', { id: 1 })
    assert.equal(first.status, 200)
    assert.equal(first.headers.get('idempotent-replayed'), null)
    const retry = await keyed(b, 'order-1').trigger('orders', 'created', { id: 1 })
    assert.equal(retry.status, 200)
    assert.equal(retry.headers.get('idempotent-replayed'), 'true')
    assert.deepEqual(await retry.json(), await first.json())

    const reused = await failure(keyed(b, 'order-1').trigger('orders', 'created', { id: 2 }))
    assert.equal(reused.status, 422)
    assert.equal(JSON.parse(reused.body).error, 'idempotency_key_reused')

    // A batch too, retried on the other node.
    const batch = [{ channel: 'orders', name: 'b1', data: '1' }, { channel: 'orders', name: 'b2', data: '2' }]
    assert.equal((await keyed(a, 'batch-1').triggerBatch(batch)).status, 200)
    const batchRetry = await keyed(b, 'batch-1').triggerBatch(batch)
    assert.equal(batchRetry.headers.get('idempotent-replayed'), 'true')

    // Without a key, after all of them: what the retries had sent would
    // arrive before it (one stream, in order).
    await sdk(a).trigger('orders', 'marker', { m: 1 })
    for (const c of [ca, cb]) {
      assert.deepEqual(await eventsUntilMarker(c, 'orders', 1), ['created:{"id":1}', 'b1:1', 'b2:2'], c.label)
    }
  })
})
