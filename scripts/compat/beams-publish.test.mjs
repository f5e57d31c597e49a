// The Push Publish API of the real herald binary, driven by the real Beams
// Node server SDK, @pusher/push-notifications-server (publishToInterests,
// publishToUsers, deleteUser), with real deliveries: herald is configured
// with the fake gateways of server/push/pushtest (APNs over TLS + HTTP/2 with
// a checked provider token, FCM HTTP v1 behind an OAuth2 token endpoint, Web
// Push decrypted with keys the fake owns), run as a separate program
// (server/push/pushtest/cmd/fakegateways) whose control API shows what each
// gateway received.
//
// Run: make test-compat, or
//   go build -o bin/fakegateways ./server/push/pushtest/cmd/fakegateways
//   cd scripts/compat && HERALD_BIN=$PWD/herald FAKEGW_BIN=$PWD/../../bin/fakegateways node --test beams-publish.test.mjs
// Without FAKEGW_BIN the test builds the fakes with `go build` itself.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import PushNotifications from '@pusher/push-notifications-server'

import { startFakes, metadataOf, publishIdOf } from './fakegateways.mjs'
import { startHerald } from './herald.mjs'
import { callOK } from './helpers.mjs'

const INSTANCE_ID = '7a2d1b0c-4e3f-4a5b-8c7d-2e1f0a9b8c7d'
const SECRET_KEY = 'PUBLISH0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF01234567'
const BUNDLE = 'com.example.compat'

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

describe('Beams Publish API with the Node server SDK', () => {
  let fakes, herald, root, beams

  before(async () => {
    fakes = await startFakes()
    herald = await startHerald({
      env: { ...fakes.heraldEnv(), HERALD_INSTANCE_ID: INSTANCE_ID, HERALD_INSTANCE_SECRET_KEY: SECRET_KEY }
    })
    root = `http://${herald.host}:${herald.port}`
    beams = new PushNotifications({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, endpoint: herald.host, port: herald.port })
    // The web fake checks that the VAPID header carries the instance's key.
    const vapid = await deviceCall('GET', '/web-vapid-public-key')
    await fakes.control('POST', '/web/vapid', { publicKey: vapid.vapidPublicKey })
  })
  after(async () => {
    await herald?.stop()
    await fakes?.stop()
  })

  function deviceCall (method, path, options) {
    return callOK(method, `${root}/device_api/v1/instances/${INSTANCE_ID}${path}`, options)
  }

  /**
   * Registers one device per platform; resolves with [{platform, id, token}]
   * where token is what the fake files its messages under.
   */
  async function registerAll (tag) {
    const apnsToken = Buffer.from(`apns-${tag}-${Date.now()}`).toString('hex')
    const apns = await deviceCall('POST', '/devices/apns', { body: { token: apnsToken, bundleIdentifier: BUNDLE, metadata: { sdkVersion: '4.0.0' } } })
    const fcmToken = `fcm-${tag}:${Date.now()}`
    const fcm = await deviceCall('POST', '/devices/fcm', { body: { token: fcmToken, knownPreviousClientIds: [] } })
    const sub = await fakes.control('POST', '/web/subscribe')
    const web = await deviceCall('POST', '/devices/web', { body: { token: sub.token, metadata: { sdkVersion: '2.1.0' } } })
    return [
      { platform: 'apns', id: apns.id, token: apnsToken },
      { platform: 'fcm', id: fcm.id, token: fcmToken },
      { platform: 'web', id: web.id, token: sub.id }
    ]
  }

  async function publishStatus (publishId) {
    const res = await fetch(`${root}/publish_api/v1/instances/${INSTANCE_ID}/publishes/${publishId}`, { headers: { Authorization: `Bearer ${SECRET_KEY}` } })
    assert.equal(res.status, 200)
    return res.json()
  }

  /** Waits for the publish to be done, then returns the messages each device got for it. */
  async function receivedFor (publishId, devices) {
    const deadline = Date.now() + 30_000
    let status
    for (;;) {
      status = await publishStatus(publishId)
      if (status.state === 'done') break
      assert.ok(Date.now() < deadline, `publish ${publishId} not done: ${JSON.stringify(status)}`)
      await sleep(50)
    }
    const all = await fakes.control('GET', '/messages')
    const out = new Map()
    for (const d of devices) {
      out.set(d, all.filter((m) => m.platform === d.platform && m.token === d.token && publishIdOf(m) === publishId))
    }
    assert.deepEqual(await fakes.control('GET', '/problems'), [])
    return { status, received: out }
  }

  const request = {
    apns: { aps: { alert: { title: 'Hello', body: 'from Node' } }, data: { kind: 'greeting' } },
    fcm: { notification: { title: 'Hello', body: 'from Node' }, data: { kind: 'greeting', count: 3 }, priority: 'high', time_to_live: 600 },
    web: { notification: { title: 'Hello', body: 'from Node', deep_link: 'https://example.com/x' }, data: { kind: 'greeting' }, time_to_live: 300 }
  }

  // userId is in the metadata of publishes to users only.
  function checkPayload (d, m, publishId, userId) {
    const want = { instanceId: INSTANCE_ID, publishId, hasDisplayableContent: true, hasData: true }
    if (userId) want.userId = userId
    assert.deepEqual(metadataOf(m), want)
    switch (d.platform) {
      case 'apns':
        assert.deepEqual(m.body.aps, request.apns.aps)
        assert.equal(m.body.data.kind, 'greeting')
        assert.equal(m.headers['apns-topic'], BUNDLE)
        assert.equal(m.headers['apns-push-type'], 'alert')
        assert.equal(m.headers['apns-priority'], '10')
        break
      case 'fcm':
        assert.equal(m.body.token, d.token)
        assert.deepEqual(m.body.data.kind, 'greeting')
        assert.deepEqual(m.body.data.count, '3') // FCM v1 data values are strings
        assert.deepEqual(m.body.android, { notification: { title: 'Hello', body: 'from Node' }, priority: 'HIGH', ttl: '600s' })
        break
      case 'web':
        assert.deepEqual(m.body.notification, request.web.notification)
        assert.equal(m.body.data.kind, 'greeting')
        assert.equal(m.headers.TTL, '300')
        break
    }
  }

  it('publishToInterests reaches every subscribed device exactly once', async () => {
    const devices = await registerAll('interests')
    for (const d of devices) {
      // Subscribed to both interests of the publish: still one notification.
      await deviceCall('PUT', `/devices/${d.platform}/${d.id}/interests`, { body: { interests: ['donuts', 'news'] } })
    }
    const other = await registerAll('unsubscribed')
    const res = await beams.publishToInterests(['donuts', 'news'], request)
    assert.deepEqual(Object.keys(res), ['publishId'])
    const { status, received } = await receivedFor(res.publishId, [...devices, ...other])
    for (const d of devices) {
      const got = received.get(d)
      assert.equal(got.length, 1, `${d.platform} device got ${got.length} notifications`)
      checkPayload(d, got[0], res.publishId)
    }
    for (const d of other) assert.equal(received.get(d).length, 0, `unsubscribed ${d.platform} device was notified`)
    assert.equal(status.targeted, 3)
    assert.equal(status.sent, 3)
    assert.equal(status.failed, 0)
  })

  it('publishToUsers reaches every device of the users, and deleteUser removes them', async () => {
    const alice = await registerAll('alice')
    const bob = await registerAll('bob')
    const bind = async (devices, user) => {
      const { token } = beams.generateToken(user)
      for (const d of devices) {
        await deviceCall('PUT', `/devices/${d.platform}/${d.id}/user`, { headers: { Authorization: `Bearer ${token}` } })
      }
    }
    await bind(alice, 'alice@example.com')
    await bind(bob, 'bob/ü')
    const res = await beams.publishToUsers(['alice@example.com', 'alice@example.com', 'carol'], request)
    assert.deepEqual(Object.keys(res), ['publishId'])
    const { status, received } = await receivedFor(res.publishId, [...alice, ...bob])
    for (const d of alice) {
      const got = received.get(d)
      assert.equal(got.length, 1, `alice's ${d.platform} device got ${got.length} notifications`)
      checkPayload(d, got[0], res.publishId, 'alice@example.com')
    }
    for (const d of bob) assert.equal(received.get(d).length, 0, `bob's ${d.platform} device was notified`)
    assert.equal(status.targeted, 3)
    assert.equal(status.sent, 3)

    // deleteUser (the /user_api path, with an escaped id) removes the user's devices only.
    assert.deepEqual(await beams.deleteUser('bob/ü'), {})
    for (const d of bob) {
      const r = await fetch(`${root}/device_api/v1/instances/${INSTANCE_ID}/devices/${d.platform}/${d.id}`)
      assert.equal(r.status, 404, `bob's ${d.platform} device still exists`)
    }
    for (const d of alice) await deviceCall('GET', `/devices/${d.platform}/${d.id}`)
    assert.deepEqual(await beams.deleteUser('alice@example.com'), {})
    assert.deepEqual(await beams.deleteUser('nobody'), {})

    // A publish to the deleted users reaches nobody.
    const again = await beams.publishToUsers(['alice@example.com', 'bob/ü'], request)
    const after = await receivedFor(again.publishId, [...alice, ...bob])
    assert.equal(after.status.targeted, 0)
    for (const d of [...alice, ...bob]) assert.equal(after.received.get(d).length, 0)
  })

  it('dead tokens disappear after a publish', async () => {
    const devices = await registerAll('dead')
    for (const d of devices) {
      await deviceCall('PUT', `/devices/${d.platform}/${d.id}/interests`, { body: { interests: ['dead-tokens'] } })
      await fakes.control('POST', '/dead', { platform: d.platform, token: d.token })
    }
    const res = await beams.publishToInterests(['dead-tokens'], request)
    const { status } = await receivedFor(res.publishId, devices)
    assert.equal(status.targeted, 3)
    assert.equal(status.sent, 0)
    for (const d of devices) {
      const r = await fetch(`${root}/device_api/v1/instances/${INSTANCE_ID}/devices/${d.platform}/${d.id}`)
      assert.equal(r.status, 404, `${d.platform} device with a dead token still exists`)
    }
  })

  it('rejects what the Publish API refuses with the SDK error message', async () => {
    const stranger = new PushNotifications({ instanceId: INSTANCE_ID, secretKey: 'wrong', endpoint: herald.host, port: herald.port })
    await assert.rejects(stranger.publishToInterests(['a'], request), /^Error: 401 incorrect_api_key - /)
    await assert.rejects(beams.publishToInterests(['a'], {}), /^Error: 422 missing_payload - /)
    await assert.rejects(beams.publishToUsers(['x'.repeat(100), 'é'.repeat(100)], request), /^Error: 422 /)
  })
})
