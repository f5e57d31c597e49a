// Two herald nodes on one PostgreSQL database are one Beams service, seen
// through the real Beams Node server SDK (@pusher/push-notifications-server):
// devices registered and bound to a user through node A's Device API are
// reached by publishToInterests and publishToUsers made through node B, each
// device once, with the same publish status asked through either node; an
// instance secret key rotated through node A's admin API is refused by node
// B within seconds (it reloads its instances from the database every second)
// and the new one works there. Deliveries go to the fake gateways of
// server/push/pushtest (see fakegateways.mjs).
//
// The PostgreSQL server is a real one this suite starts (postgres.mjs); were
// the nodes on separate databases, node B would know no device of node A's,
// its publishes would target nobody, and it would keep the old secret.
//
// Run: make test-compat, or
//   go build -o bin/fakegateways ./server/push/pushtest/cmd/fakegateways
//   cd scripts/compat && HERALD_BIN=$PWD/herald FAKEGW_BIN=$PWD/../../bin/fakegateways node --test beams-postgres.test.mjs
// Without the PostgreSQL binaries the suite is skipped with one line (a
// failure under CI=true).

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import PushNotifications from '@pusher/push-notifications-server'

import { startHerald } from './herald.mjs'
import { eventually } from './helpers.mjs'
import { startFakes, metadataOf, publishIdOf } from './fakegateways.mjs'
import { postgresBinDir, startPostgres } from './postgres.mjs'

const INSTANCE_ID = '3c5e7a90-1b2d-4f6a-8e0c-9d8b7a6f5e4d'
const SECRET_KEY = 'PGSHARED0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456'
const BUNDLE = 'com.example.compat'
const ADMIN_TOKEN = 'beams-postgres-admin-token-0123'
/** How long a publish may take to be done. */
const PUBLISH_MS = 30_000
/** How long node B may accept a rotated-out secret key: it reloads its instances every second. */
const ROTATION_MS = 5_000

const request = {
  apns: { aps: { alert: { title: 'Hello', body: 'from Node' } }, data: { kind: 'greeting' } },
  fcm: { notification: { title: 'Hello', body: 'from Node' }, data: { kind: 'greeting' } },
  web: { notification: { title: 'Hello', body: 'from Node' }, data: { kind: 'greeting' } }
}

const pgBin = postgresBinDir()
const CI = process.env.CI === 'true'

if (!pgBin && CI) {
  it('beams on PostgreSQL: PostgreSQL is installed (CI=true)', () => {
    assert.fail('PostgreSQL is not installed; CI must install it (Debian package postgresql)')
  })
} else if (!pgBin) {
  it('beams on PostgreSQL', { skip: 'PostgreSQL is not installed (Debian package postgresql): skipping the Beams suite on PostgreSQL' }, () => {})
} else {
  postgresSuite()
}

function postgresSuite () {
  describe('Beams on two herald nodes sharing one PostgreSQL database', () => {
    let pg, fakes, a, b, beamsB
    /** Every publish made, by id: the devices it must reach exactly once and those it must not reach. */
    const publishes = new Map()

    before(async () => {
      pg = await startPostgres()
      const db = await pg.createDatabase('herald_beams')
      fakes = await startFakes()
      const env = (id) => ({
        ...fakes.heraldEnv(),
        HERALD_INSTANCE_ID: INSTANCE_ID,
        HERALD_INSTANCE_SECRET_KEY: SECRET_KEY,
        HERALD_ADMIN_TOKEN: ADMIN_TOKEN,
        HERALD_NODE_ID: id
      })
      // One after the other: node A migrates the empty database, node B finds it migrated.
      a = await startHerald({ db, env: env('node-a') })
      b = await startHerald({ db, env: env('node-b') })
      assert.equal(a.db, b.db)
      beamsB = sdk(b, SECRET_KEY)
      // The web fake checks that the VAPID header carries the instance's key:
      // one key, whichever node sends.
      const vapidA = await deviceCall(a, 'GET', '/web-vapid-public-key')
      const vapidB = await deviceCall(b, 'GET', '/web-vapid-public-key')
      assert.deepEqual(vapidB, vapidA, 'node B has another VAPID key than node A: not the same instance')
      await fakes.control('POST', '/web/vapid', { publicKey: vapidA.vapidPublicKey })
    })

    after(async () => {
      // Everything is stopped even when something fails to stop; the first failure is reported.
      const results = []
      for (const stop of [() => a?.stop(), () => b?.stop(), () => fakes?.stop(), () => pg?.stop()]) {
        results.push(await Promise.allSettled([stop()]).then(([r]) => r))
      }
      const failed = results.find((r) => r.status === 'rejected')
      if (failed) throw failed.reason
    })

    /** A Beams server SDK client of node for the instance, with secretKey. */
    function sdk (node, secretKey) {
      return new PushNotifications({ instanceId: INSTANCE_ID, secretKey, endpoint: node.host, port: node.port })
    }

    function base (node) {
      return `http://${node.host}:${node.port}`
    }

    /** A Device API call to node that must answer 200; resolves with its JSON. */
    async function deviceCall (node, method, path, { body, headers = {}, status = 200 } = {}) {
      const init = { method, headers: { ...headers } }
      if (body !== undefined) {
        init.body = JSON.stringify(body)
        init.headers['Content-Type'] = 'application/json'
      }
      const res = await fetch(`${base(node)}/device_api/v1/instances/${INSTANCE_ID}${path}`, init)
      const text = await res.text()
      assert.equal(res.status, status, `${method} ${path} on port ${node.port}: ${res.status} ${text}`)
      return text ? JSON.parse(text) : undefined
    }

    /**
     * Registers one device per platform through node, as the client SDKs do;
     * resolves with [{platform, id, token}] where token is what the fake
     * files its messages under.
     */
    async function registerAll (node, tag) {
      const apnsToken = Buffer.from(`apns-${tag}-${Date.now()}`).toString('hex')
      const apns = await deviceCall(node, 'POST', '/devices/apns', { body: { token: apnsToken, bundleIdentifier: BUNDLE, metadata: { sdkVersion: '4.0.0' } } })
      const fcmToken = `fcm-${tag}:${Date.now()}`
      const fcm = await deviceCall(node, 'POST', '/devices/fcm', { body: { token: fcmToken, knownPreviousClientIds: [] } })
      const sub = await fakes.control('POST', '/web/subscribe')
      const web = await deviceCall(node, 'POST', '/devices/web', { body: { token: sub.token, metadata: { sdkVersion: '2.1.0' } } })
      return [
        { platform: 'apns', id: apns.id, token: apnsToken, label: `${tag}'s apns device` },
        { platform: 'fcm', id: fcm.id, token: fcmToken, label: `${tag}'s fcm device` },
        { platform: 'web', id: web.id, token: sub.id, label: `${tag}'s web device` }
      ]
    }

    /** The Publish API's status of a publish, asked through node with secretKey. */
    async function publishStatus (node, publishId, secretKey = SECRET_KEY) {
      const res = await fetch(`${base(node)}/publish_api/v1/instances/${INSTANCE_ID}/publishes/${publishId}`,
        { headers: { Authorization: `Bearer ${secretKey}` } })
      const text = await res.text()
      assert.equal(res.status, 200, `publish ${publishId} on port ${node.port}: ${text}`)
      return JSON.parse(text)
    }

    /** An admin API call to node that must answer 200; resolves with its JSON. */
    async function admin (node, method, path) {
      const res = await fetch(`${base(node)}/admin/v1${path}`, { method, headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })
      const text = await res.text()
      assert.equal(res.status, 200, `${method} /admin/v1${path} on port ${node.port}: ${text}`)
      return JSON.parse(text)
    }

    /**
     * Waits until the publish is done (asked through node B), checks that
     * node A reports the very same status, and that each of `reached` got
     * exactly one message of it with the publish's metadata and none of
     * `missed` got any; resolves with the status. The publish is recorded
     * for the final check of duplicates.
     */
    async function checkPublish (publishId, reached, missed, { userId, secretKey = SECRET_KEY } = {}) {
      publishes.set(publishId, { reached, missed })
      const status = await eventually(async () => {
        const s = await publishStatus(b, publishId, secretKey)
        assert.equal(s.state, 'done', `publish ${publishId} through node B: ${JSON.stringify(s)}`)
        return s
      }, PUBLISH_MS)
      assert.deepEqual(await publishStatus(a, publishId, secretKey), status, `node A reports publish ${publishId} otherwise than node B`)
      const messages = (await fakes.control('GET', '/messages')).filter((m) => publishIdOf(m) === publishId)
      for (const d of reached) {
        const got = messages.filter((m) => m.platform === d.platform && m.token === d.token)
        assert.equal(got.length, 1, `${d.label} got ${got.length} notifications of publish ${publishId}`)
        const want = { instanceId: INSTANCE_ID, publishId, hasDisplayableContent: true, hasData: true }
        if (userId) want.userId = userId
        assert.deepEqual(metadataOf(got[0]), want, `${d.label}: metadata`)
      }
      for (const d of missed) {
        const got = messages.filter((m) => m.platform === d.platform && m.token === d.token)
        assert.equal(got.length, 0, `${d.label} got publish ${publishId}`)
      }
      assert.equal(messages.length, reached.length, `publish ${publishId} reached other devices: ${JSON.stringify(messages).slice(0, 2000)}`)
      assert.deepEqual(await fakes.control('GET', '/problems'), [])
      return status
    }

    let fans, strangers

    it('node B sees the devices and interests registered through node A', async () => {
      fans = await registerAll(a, 'fan')
      for (const d of fans) {
        await deviceCall(a, 'PUT', `/devices/${d.platform}/${d.id}/interests`, { body: { interests: ['donuts', 'news'] } })
      }
      strangers = await registerAll(a, 'stranger')
      for (const d of [...fans, ...strangers]) {
        assert.deepEqual(await deviceCall(b, 'GET', `/devices/${d.platform}/${d.id}`),
          await deviceCall(a, 'GET', `/devices/${d.platform}/${d.id}`), `${d.label} as node B and node A show it`)
      }
      for (const d of fans) {
        const { interests } = await deviceCall(b, 'GET', `/devices/${d.platform}/${d.id}/interests`)
        assert.deepEqual(interests, ['donuts', 'news'], `${d.label}'s interests through node B`)
      }
    })

    it('publishToInterests through node B reaches each device registered through node A once', async () => {
      // Subscribed to both interests of the publish: still one notification.
      const res = await beamsB.publishToInterests(['donuts', 'news'], request)
      assert.deepEqual(Object.keys(res), ['publishId'])
      const status = await checkPublish(res.publishId, fans, strangers)
      assert.equal(status.targeted, 3, JSON.stringify(status))
      assert.equal(status.sent, 3, JSON.stringify(status))
      assert.equal(status.failed, 0, JSON.stringify(status))
    })

    it('publishToUsers through node B reaches the devices bound to the user through node A once', async () => {
      const alice = await registerAll(a, 'alice')
      const bob = await registerAll(a, 'bob')
      // The user JWTs come from the SDK (generateToken), signed with the instance's secret key.
      const bind = async (devices, user) => {
        const { token } = beamsB.generateToken(user)
        for (const d of devices) {
          await deviceCall(a, 'PUT', `/devices/${d.platform}/${d.id}/user`, { headers: { Authorization: `Bearer ${token}` } })
        }
      }
      await bind(alice, 'alice@example.com')
      await bind(bob, 'bob')
      for (const d of alice) {
        const device = await deviceCall(b, 'GET', `/devices/${d.platform}/${d.id}`)
        assert.equal(device.userId, 'alice@example.com', `${d.label} through node B: ${JSON.stringify(device)}`)
      }
      const res = await beamsB.publishToUsers(['alice@example.com'], request)
      assert.deepEqual(Object.keys(res), ['publishId'])
      const status = await checkPublish(res.publishId, alice, [...bob, ...fans, ...strangers], { userId: 'alice@example.com' })
      assert.equal(status.targeted, 3, JSON.stringify(status))
      assert.equal(status.sent, 3, JSON.stringify(status))
      assert.equal(status.failed, 0, JSON.stringify(status))

      // The admin API's recent publishes: the same list with the same counts through either node.
      const listA = await admin(a, 'GET', `/instances/${INSTANCE_ID}/publishes`)
      const listB = await admin(b, 'GET', `/instances/${INSTANCE_ID}/publishes`)
      assert.deepEqual(listB, listA, 'the recent publishes differ between node B and node A')
      const ids = JSON.stringify(listA)
      for (const id of publishes.keys()) assert.ok(ids.includes(id), `publish ${id} is not in the recent publishes: ${ids.slice(0, 2000)}`)
    })

    it('a secret key rotated through node A is refused by node B within seconds, and the new one works there', async (t) => {
      const rotated = await admin(a, 'POST', `/instances/${INSTANCE_ID}/rotate-secret`)
      const rotatedAt = Date.now()
      const newKey = rotated.secretKey
      assert.ok(typeof newKey === 'string' && newKey.length > 0 && newKey !== SECRET_KEY, `rotate-secret answered ${JSON.stringify(rotated)}`)

      // Probes publish to an interest nobody has: one accepted before node B reloads reaches no device.
      const old = sdk(b, SECRET_KEY)
      await eventually(() => assert.rejects(old.publishToInterests(['rotation-probe'], request), /^Error: 401 incorrect_api_key - /,
        'node B still accepts the rotated-out secret key'), ROTATION_MS)
      t.diagnostic(`node B refused the old secret key ${Date.now() - rotatedAt} ms after node A rotated it`)
      await assert.rejects(sdk(a, SECRET_KEY).publishToInterests(['rotation-probe'], request), /^Error: 401 incorrect_api_key - /,
        'node A accepts the rotated-out secret key')

      // The new key, through node B, reaches the same devices as before, once.
      const res = await sdk(b, newKey).publishToInterests(['donuts'], request)
      assert.deepEqual(Object.keys(res), ['publishId'])
      const status = await checkPublish(res.publishId, fans, strangers, { secretKey: newKey })
      assert.equal(status.targeted, 3, JSON.stringify(status))
      assert.equal(status.sent, 3, JSON.stringify(status))
    })

    it('no device got any publish twice, and neither node sent a duplicate', async (t) => {
      // Asked last, so a duplicate sent late by the node that did not read a publish would show.
      const messages = await fakes.control('GET', '/messages')
      for (const [publishId, { reached, missed }] of publishes) {
        for (const d of reached) {
          const n = messages.filter((m) => publishIdOf(m) === publishId && m.platform === d.platform && m.token === d.token).length
          assert.equal(n, 1, `${d.label} got ${n} notifications of publish ${publishId}`)
        }
        for (const d of missed) {
          assert.ok(!messages.some((m) => publishIdOf(m) === publishId && m.platform === d.platform && m.token === d.token), `${d.label} got publish ${publishId}`)
        }
      }
      const sent = new Map()
      for (const node of [a, b]) {
        const text = await (await fetch(`${base(node)}/metrics`)).text()
        let delivered = 0
        for (const line of text.split('\n')) {
          if (line.startsWith('herald_push_deliveries_total{') && line.includes('outcome="delivered"')) delivered += Number(line.slice(line.lastIndexOf(' ') + 1))
          if (line.startsWith('herald_push_duplicates_total')) assert.equal(Number(line.slice(line.lastIndexOf(' ') + 1)), 0, `port ${node.port}: ${line}`)
        }
        sent.set(node, delivered)
      }
      t.diagnostic(`deliveries sent by node A: ${sent.get(a)}, by node B: ${sent.get(b)}`)
      const expected = [...publishes.values()].reduce((n, p) => n + p.reached.length, 0)
      assert.equal(sent.get(a) + sent.get(b), expected, 'the nodes counted more or fewer deliveries than the devices got')
      assert.equal(messages.filter((m) => publishes.has(publishIdOf(m))).length, expected)
    })
  })
}
