// Recovery over a cluster, with the real pusher-js and Herald's plugin:
// three nodes on a real Redis behind a TCP proxy that stands for the load
// balancer. A client whose network is cut for a minute comes back on another node, the
// one it was on SIGKILLed meanwhile, and gets every event it missed once
// and in order; without the plugin the same cut loses events. A rolling
// restart of all three nodes (SIGTERM, the 4200 close, pusher-js reconnects
// through the balancer to a node that runs) under a steady stream of
// triggers delivers every event exactly once to every subscriber.
//
// Triggers go out as an application that must not lose one sends them: each
// with an Idempotency-Key, retried on another node when its node goes away.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test recovery-cluster.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'

import { startHerald } from './herald.mjs'
import { Clients, eventually, sdk, sleep } from './helpers.mjs'
import { redisServerBin, startRedis, startNodes } from './cluster-helpers.mjs'
import { CHANNELS, assertLost, assertRecovered, listener, reconnected, startProxy } from './recovery-helpers.mjs'

const haveRedis = redisServerBin() !== undefined
if (!haveRedis && process.env.CI === 'true') throw new Error('redis-server is not installed (Debian package redis-server)')

const ENV = { HERALD_APP_HISTORY_EVENTS: '1000', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2m' }

/** The SDK on node, sending Idempotency-Key: key (it takes an agent, not headers). */
function keyed (node, key) {
  const agent = new (class extends http.Agent {
    addRequest (req, options) {
      req.setHeader('Idempotency-Key', key)
      super.addRequest(req, options)
    }
  })()
  return sdk(node, { agent })
}

/**
 * Triggers tick i = 0, 1, … on every channel of CHANNELS every `every` ms
 * until stop() (which resolves with the count), each through one of
 * live() (the nodes that serve), round robin, retried on the next with the
 * same Idempotency-Key until one answers 200: each tick is sent once.
 */
function idempotentStream (live, every = 40) {
  let i = 0
  let stopped = false
  let turn = 0
  const done = (async () => {
    while (!stopped) {
      for (let attempt = 0; ; attempt++) {
        const nodes = live()
        const node = nodes[turn++ % nodes.length]
        try {
          await keyed(node, `tick-${i}`).trigger(CHANNELS, 'tick', { i })
          break
        } catch (err) {
          if (attempt > 200) throw err
          await sleep(20) // its node is going away: the next one
        }
      }
      i++
      await sleep(every)
    }
    return i
  })()
  return { stop: () => { stopped = true; return done }, count: () => i }
}

/**
 * Registers the hooks of a suite (call it in a describe) that start a Redis
 * and three nodes on it before its tests, and stop them, clients first,
 * after them. Returns the suite's {redis, nodes, clients}; nodes may be
 * replaced by the tests (a restarted node), and are stopped as they are.
 */
function threeNodes () {
  const s = { clients: new Clients() }
  before(async () => {
    s.redis = await startRedis()
    s.nodes = await startNodes(s.redis, 3, ENV)
  })
  after(async () => {
    s.clients.closeAll()
    await Promise.allSettled((s.nodes ?? []).map((n) => n.kill('SIGKILL')))
    await s.redis?.stop()
  })
  return s
}

describe('recovery over three nodes of a cluster', { skip: !haveRedis && 'redis-server is not installed' }, () => {
  const suite = threeNodes()

  it('a client cut for 60 s from its node comes back on another, its old node SIGKILLed during the cut: every event once and in order; without the plugin events are lost', async () => {
    let target = suite.nodes[0]
    const proxy = await startProxy(() => target)
    try {
      const withPlugin = await listener(suite.clients, suite.nodes[2], proxy, { plugin: true, label: 'with the plugin' })
      const without = await listener(suite.clients, suite.nodes[2], proxy, { plugin: false, label: 'without' })
      // Ten a second: a minute's worth is within the 1000 events a channel keeps.
      const s = idempotentStream(() => [suite.nodes[2]], 100)
      await eventually(() => assert.ok(s.count() >= 10))
      proxy.cut()
      const killed = await suite.nodes[0].kill('SIGKILL')
      assert.equal(killed.signal, 'SIGKILL')
      target = suite.nodes[1] // the balancer sends the reconnects elsewhere
      // A minute: pusher-js's own attempts time out meanwhile and it goes
      // on trying (the single-node suite cuts for 5 s).
      await sleep(60_000)
      proxy.restore()
      await reconnected(withPlugin)
      await reconnected(without)
      await sleep(500) // some ticks on the new connections too
      const sent = await s.stop()
      await assertRecovered(() => withPlugin.got, sent, 'with the plugin, on another node')
      assertLost(without.got, sent, 'without the plugin')
    } finally {
      suite.clients.closeAll()
      await proxy.close()
    }
  })
})

describe('a rolling restart of a cluster under load', { skip: !haveRedis && 'redis-server is not installed' }, () => {
  const suite = threeNodes()

  it('restarting every node in turn (SIGTERM, 4200, reconnect elsewhere) delivers every event exactly once, in order, to every subscriber', async () => {
    // The balancer: each new WebSocket to the next node that serves; the
    // HTTP fallback's requests, which make one session, all to one node
    // (sticky, as balancers are set up for it) until that one goes.
    let live = [...suite.nodes]
    let turn = 0
    let sticky = suite.nodes[0]
    const proxy = await startProxy(() => live[turn++ % live.length])
    const stickyProxy = await startProxy(() => sticky)
    const xhr = { httpHost: stickyProxy.host, httpPort: stickyProxy.port, enabledTransports: ['xhr_streaming'], enableStats: false }
    try {
      const listeners = []
      for (const [i, [via, options]] of [[proxy, {}], [proxy, {}], [stickyProxy, xhr]].entries()) {
        listeners.push(await listener(suite.clients, suite.nodes[0], via, { plugin: true, options, user: `u${i}`, label: `client ${i}` }))
      }
      const s = idempotentStream(() => live)
      await eventually(() => assert.ok(s.count() >= 10))
      for (let i = 0; i < suite.nodes.length; i++) {
        const old = suite.nodes[i]
        live = live.filter((n) => n !== old)
        if (sticky === old) sticky = live[0]
        await old.stop() // SIGTERM: every WebSocket closes with 4200
        const fresh = await startHerald({ db: old.db, env: { HERALD_REDIS_URL: suite.redis.url, HERALD_NODE_ID: old.id, ...ENV } })
        suite.nodes[i] = { ...fresh, id: old.id }
        live.push(suite.nodes[i])
        await eventually(() => assert.ok(listeners.every((l) => l.c.pusher.connection.state === 'connected')), 20_000)
        await sleep(1000) // triggers flow on the restarted cluster before the next node goes
      }
      const sent = await s.stop()
      const all = Array.from({ length: sent }, (_, i) => i)
      for (const l of listeners) {
        await eventually(() => {
          for (const name of CHANNELS) assert.ok(l.got[name].ticks.length >= sent, `${l.c.label}: ${name}: ${l.got[name].ticks.length} of ${sent}`)
        }, 20_000)
        for (const name of CHANNELS) {
          const g = l.got[name]
          assert.deepEqual(g.ticks, all, `${l.c.label}: ${name}: every tick once, in order`)
          assert.deepEqual(g.failed, [], `${l.c.label}: ${name}: pusher:recovery_failed`)
        }
      }
      // Every client was on a node that restarted, so each recovered.
      for (const l of listeners) {
        for (const name of CHANNELS) assert.ok(l.got[name].recovered.length >= 1, `${l.c.label}: ${name}: never recovered`)
      }
    } finally {
      suite.clients.closeAll()
      await proxy.close()
      await stickyProxy.close()
    }
  })
})
