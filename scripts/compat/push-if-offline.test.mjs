// "Realtime, or a push if offline" on the real herald binary: the app is
// linked to the Push instance (HERALD_APP_PUSH_INSTANCE); the real `pusher`
// server SDK triggers to #server-to-user-alice with push_if_offline, through
// its signed post() (its trigger() refuses channel names with '#' and
// sendToUser() takes no parameters); the real pusher-js signs alice in
// through the SDK's authenticateUser; her devices are registered through
// the Device API and bound to her with a token of the Beams Node SDK's
// generateToken; deliveries reach the fake gateways of
// server/push/pushtest, run as their own program.
//
// Run: make test-compat, or
//   go build -o bin/fakegateways ./server/push/pushtest/cmd/fakegateways
//   cd scripts/compat && HERALD_BIN=$PWD/herald FAKEGW_BIN=$PWD/../../bin/fakegateways node --test push-if-offline.test.mjs
//
// Waiting: every wait has a timeout. That no push went out while alice was
// online is read from the instance's publishes (the admin API), which the
// trigger creates before it answers; that alice is offline, from the
// watchlist of another signed-in user, which the server updates in the
// same step as its record of signed-in users.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import Pusher from 'pusher'
import PushNotifications from '@pusher/push-notifications-server'

import { startFakes, metadataOf, publishIdOf } from './fakegateways.mjs'
import { startHerald } from './herald.mjs'
import { Clients, sdk, signIn, record, sleep, callOK } from './helpers.mjs'

const INSTANCE_ID = '4c0f5e1d-8a2b-4c3d-9e8f-1a2b3c4d5e6f'
const SECRET_KEY = 'OFFLINE0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456'
const ADMIN_TOKEN = 'compat-admin-token-0123456789'
const BUNDLE = 'com.example.compat'

const pushIfOffline = (title) => ({
  apns: { aps: { alert: { title } } },
  fcm: { notification: { title } },
  web: { notification: { title } }
})

describe('push_if_offline with pusher-js, the pusher SDK and the fake gateways', () => {
  let fakes, herald, root, server, beams, devices
  const clients = new Clients()

  before(async () => {
    fakes = await startFakes()
    herald = await startHerald({
      env: {
        ...fakes.heraldEnv(),
        HERALD_INSTANCE_ID: INSTANCE_ID,
        HERALD_INSTANCE_SECRET_KEY: SECRET_KEY,
        HERALD_APP_PUSH_INSTANCE: INSTANCE_ID,
        HERALD_ADMIN_TOKEN: ADMIN_TOKEN
      }
    })
    root = `http://${herald.host}:${herald.port}`
    server = sdk(herald)
    beams = new PushNotifications({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, endpoint: herald.host, port: herald.port })
    const vapid = await call('GET', `/device_api/v1/instances/${INSTANCE_ID}/web-vapid-public-key`)
    await fakes.control('POST', '/web/vapid', { publicKey: vapid.vapidPublicKey })
    devices = await registerDevicesOf('alice')
  })
  after(async () => {
    clients.closeAll()
    await herald?.stop()
    await fakes?.stop()
  })

  const call = (method, path, options) => callOK(method, root + path, options)

  /** Registers one device per platform and binds each to user; resolves with [{platform, token}] as the fakes file them. */
  async function registerDevicesOf (user) {
    const root = `/device_api/v1/instances/${INSTANCE_ID}/devices`
    const apnsToken = Buffer.from(`apns-${user}`).toString('hex')
    const apns = await call('POST', `${root}/apns`, { body: { token: apnsToken, bundleIdentifier: BUNDLE } })
    const fcmToken = `fcm-${user}`
    const fcm = await call('POST', `${root}/fcm`, { body: { token: fcmToken } })
    const sub = await fakes.control('POST', '/web/subscribe')
    const web = await call('POST', `${root}/web`, { body: { token: sub.token } })
    const headers = { Authorization: `Bearer ${beams.generateToken(user).token}` }
    for (const [platform, d] of [['apns', apns], ['fcm', fcm], ['web', web]]) {
      await call('PUT', `${root}/${platform}/${d.id}/user`, { headers })
    }
    return [{ platform: 'apns', token: apnsToken }, { platform: 'fcm', token: fcmToken }, { platform: 'web', token: sub.id }]
  }

  /** Triggers event to user's channel with push_if_offline through the SDK; resolves with the answer's body. */
  async function trigger (user, event, title) {
    const res = await server.post({
      path: '/events',
      body: { name: event, data: JSON.stringify({ title }), channels: [`#server-to-user-${user}`], push_if_offline: pushIfOffline(title) }
    })
    assert.equal(res.status, 200)
    return res.json()
  }

  /** The instance's publishes, newest first (admin API). */
  function publishes () {
    return call('GET', `/admin/v1/instances/${INSTANCE_ID}/publishes?limit=100`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })
      .then((list) => list.publishes)
  }

  /** Polls the publish's status through the Publish API until it is done; returns it. */
  async function done (publishId) {
    const deadline = Date.now() + 60_000
    for (;;) {
      const status = await call('GET', `/publish_api/v1/instances/${INSTANCE_ID}/publishes/${publishId}`, { headers: { Authorization: `Bearer ${SECRET_KEY}` } })
      if (status.state === 'done') return status
      assert.ok(Date.now() < deadline, `publish ${publishId} not done: ${JSON.stringify(status)}`)
      await sleep(50)
    }
  }

  it('a signed-in user gets the event over the socket, and no push is published', async () => {
    const alice = await signIn(clients, herald, { id: 'alice' })
    const events = record(alice.pusher.user, ['message'], 'alice: user events')
    const answer = await trigger('alice', 'message', 'while online')
    assert.deepEqual(answer, { delivered_via: 'socket' })
    const got = await events.waitFor((e) => e.name === 'message', { label: 'message over the socket' })
    assert.deepEqual(got.data, { title: 'while online' })
    assert.deepEqual(await publishes(), [], 'a publish was made for a user who was online')
    alice.pusher.disconnect()
  })

  it('the same user disconnected gets it through the fake APNs, FCM and Web Push gateways, as a publish whose status is readable', async () => {
    // Another user watching alice learns when she is offline.
    const watcher = await signIn(clients, herald, { id: 'watcher', watchlist: ['alice'] })
    const watch = record(watcher.pusher.user.watchlist, ['online', 'offline'], 'watcher: watchlist events')
    const alice = await signIn(clients, herald, { id: 'alice' })
    await watch.waitFor((e) => e.name === 'online' && e.data.user_ids.includes('alice'), { label: 'alice online' })
    alice.pusher.disconnect()
    await watch.waitFor((e) => e.name === 'offline' && e.data.user_ids.includes('alice'), { label: 'alice offline' })

    const answer = await trigger('alice', 'message', 'while offline')
    assert.equal(answer.delivered_via, 'push')
    assert.match(answer.publish_id, /^pubid-/)
    const status = await done(answer.publish_id)
    assert.equal(status.targeted, 3)
    assert.equal(status.sent, 3)

    const all = await fakes.control('GET', '/messages')
    for (const d of devices) {
      const mine = all.filter((m) => m.platform === d.platform && m.token === d.token)
      assert.equal(mine.length, 1, `${d.platform} device of alice got ${mine.length} notifications, want the one`)
      assert.equal(publishIdOf(mine[0]), answer.publish_id)
      assert.equal(metadataOf(mine[0]).userId, 'alice')
    }
    assert.deepEqual(await fakes.control('GET', '/problems'), [])
    assert.deepEqual((await publishes()).map((p) => p.publishId), [answer.publish_id])
  })

  it('a trigger whose push_if_offline is not a publish, or names another channel, is refused with 400 and the error body', async () => {
    for (const [body, kind] of [
      [{ name: 'e', data: '{}', channels: ['#server-to-user-alice'], push_if_offline: {} }, 'missing_payload'],
      [{ name: 'e', data: '{}', channels: ['news'], push_if_offline: pushIfOffline('x') }, 'invalid_push_channel']
    ]) {
      const err = await server.post({ path: '/events', body }).then((res) => assert.fail(`expected 400, got ${res.status}`), (e) => e)
      assert.ok(err instanceof Pusher.RequestError, `expected a RequestError, got ${err}`)
      assert.equal(err.status, 400)
      const parsed = JSON.parse(err.body)
      assert.equal(parsed.error, kind)
      assert.ok(parsed.description)
    }
  })
})
