// Channel history through the official `pusher` Node server SDK: events
// triggered through each of three nodes of a cluster on a real Redis are read
// back on every node with the SDK's signed GET (pusher.get) of
// /channels/<name>/events: once each, in order, with the same ids; after=<id>
// returns what came later, as a backend hands a reconnecting client what it
// missed; a pusher-js client reconnecting gets it that way. An encrypted
// channel's events are kept as the ciphertext the SDK sent; an app without
// history is refused with 400 history_disabled.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test history.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import Pusher from 'pusher'

import { Clients, sdk, connected, subscribe } from './helpers.mjs'
import { redisServerBin, startRedis, startNodes } from './cluster-helpers.mjs'

const haveRedis = redisServerBin() !== undefined
if (!haveRedis && process.env.CI === 'true') throw new Error('redis-server is not installed (Debian package redis-server)')

/** Reads every event of channel through node's SDK, oldest first, in pages of limit. */
async function readAll (node, channel, { after, limit = 5 } = {}) {
  const params = after ? { after, limit } : { direction: 'oldest_first', limit }
  const events = []
  for (let i = 0; i < 100; i++) {
    const res = await sdk(node).get({ path: `/channels/${encodeURIComponent(channel)}/events`, params })
    assert.equal(res.status, 200)
    const page = await res.json()
    events.push(...page.events)
    if (!page.next_cursor) return events
    delete params.after
    Object.assign(params, { direction: 'oldest_first', cursor: page.next_cursor })
  }
  assert.fail('paging did not end')
}

describe('channel history over three nodes of a cluster', { skip: !haveRedis && 'redis-server is not installed' }, () => {
  let redis, nodes
  const clients = new Clients()
  before(async () => {
    redis = await startRedis()
    nodes = await startNodes(redis, 3, { HERALD_APP_HISTORY_EVENTS: '100', HERALD_APP_HISTORY_TTL: '5m' },
      { apps: [['--id', 'plain', '--key', 'plain-key', '--secret', 'plain-secret']] })
  })
  after(async () => {
    clients.closeAll()
    for (const n of nodes ?? []) await n.stop()
    await redis?.stop()
  })

  it('reads the events triggered through every node, once each and in order, on every node', async () => {
    for (let i = 0; i < 12; i++) {
      // Each trigger is answered before the next is sent: this is their order.
      await sdk(nodes[i % 3]).trigger('feed', 'tick', { i })
    }
    const first = await readAll(nodes[0], 'feed')
    assert.deepEqual(first.map((e) => [e.event, JSON.parse(e.data).i]), Array.from({ length: 12 }, (_, i) => ['tick', i]))
    for (const e of first) {
      assert.match(e.id, /^\d+-\d+$/)
      assert.ok(Math.abs(e.timestamp - Date.now()) < 60_000, `timestamp ${e.timestamp}`)
    }
    for (const node of nodes.slice(1)) assert.deepEqual(await readAll(node, 'feed'), first)
    for (const node of nodes) {
      const later = await readAll(node, 'feed', { after: first[4].id, limit: 3 })
      assert.deepEqual(later, first.slice(5))
    }
    // Newest first by default.
    const res = await sdk(nodes[2]).get({ path: '/channels/feed/events', params: { limit: 2 } })
    const page = await res.json()
    assert.deepEqual(page.events, [first[11], first[10]])
    assert.equal(page.next_cursor, first[10].id)
  })

  it('hands a reconnecting pusher-js client what it missed', async () => {
    const c = clients.connect(nodes[2])
    await connected(c)
    await subscribe(c, 'room')
    await sdk(nodes[0]).trigger('room', 'msg', { n: 1 })
    await c.frames.waitFor((f) => f.channel === 'room' && f.event === 'msg', { label: 'msg 1' })
    const [seen] = (await (await sdk(nodes[1]).get({ path: '/channels/room/events', params: { limit: 1 } })).json()).events
    c.pusher.disconnect()
    await sdk(nodes[0]).trigger('room', 'msg', { n: 2 })
    await sdk(nodes[1]).trigger('room', 'msg', { n: 3 })
    // The backend, asked on any node, gives the events after the last seen.
    const missed = await readAll(nodes[2], 'room', { after: seen.id })
    assert.deepEqual(missed.map((e) => JSON.parse(e.data).n), [2, 3])
  })

  it('keeps an encrypted channel\'s events as the ciphertext sent', async () => {
    const encrypting = sdk(nodes[0], { encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString('base64') })
    await encrypting.trigger('private-encrypted-vault', 'secret', { plain: 'text nobody may read' })
    const [kept] = await readAll(nodes[1], 'private-encrypted-vault')
    const sealed = JSON.parse(kept.data)
    assert.ok(sealed.nonce && sealed.ciphertext, `kept ${kept.data}`)
    assert.ok(!kept.data.includes('nobody may read'))
  })

  it('refuses the history of an app that keeps none', async () => {
    const plain = sdk(nodes[0], { appId: 'plain', key: 'plain-key', secret: 'plain-secret' })
    await plain.trigger('feed', 'tick', {})
    const err = await plain.get({ path: '/channels/feed/events' }).then(() => assert.fail('expected 400'), (e) => e)
    assert.ok(err instanceof Pusher.RequestError)
    assert.equal(err.status, 400)
    assert.equal(JSON.parse(err.body).error, 'history_disabled')
  })
})
