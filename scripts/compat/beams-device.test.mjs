// The Push Device and Reporting APIs of the real herald binary, driven the way
// the Beams client SDKs drive them (fetch with their headers and bodies), with
// user tokens minted by the real Beams Node server SDK,
// @pusher/push-notifications-server.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test beams-device.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import PushNotifications from '@pusher/push-notifications-server'

import { startHerald } from './herald.mjs'

const INSTANCE_ID = '6f1c0a8e-3b2d-4c5e-9f7a-1b2c3d4e5f60'
const SECRET_KEY = 'C0FFEE0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789'

/** Asserts that text is exactly the error body {"error", "description"}; returns it parsed. */
function assertErrorBody (text) {
  const body = JSON.parse(text)
  assert.deepEqual(Object.keys(body).sort(), ['description', 'error'], `error body: ${text}`)
  assert.ok(body.error.length > 0 && body.description.length > 0, `error body: ${text}`)
  return body
}

describe('Beams Device API', () => {
  let herald, root, beams

  before(async () => {
    herald = await startHerald({ env: { HERALD_INSTANCE_ID: INSTANCE_ID, HERALD_INSTANCE_SECRET_KEY: SECRET_KEY } })
    root = `http://${herald.host}:${herald.port}/device_api/v1/instances/${INSTANCE_ID}`
    beams = new PushNotifications({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, endpoint: herald.host, port: herald.port })
  })
  after(() => herald?.stop())

  /** Sends a request like the Android / Web SDKs: JSON only when there is a body. */
  async function call (method, path, { body, headers = {} } = {}) {
    const init = { method, headers: { ...headers } }
    if (body !== undefined) {
      init.body = JSON.stringify(body)
      init.headers['Content-Type'] = 'application/json'
    }
    const res = await fetch(root + path, init)
    return { status: res.status, text: await res.text(), headers: res.headers }
  }

  async function register (token) {
    const res = await call('POST', '/devices/fcm', { body: { token, knownPreviousClientIds: [], metadata: { sdkVersion: '1.9.2', androidVersion: '14' } } })
    assert.equal(res.status, 200, res.text)
    const body = JSON.parse(res.text)
    assert.deepEqual(body.initialInterestSet, [])
    assert.match(body.id, /^fcm-/)
    return body.id
  }

  it('binds a device to the user of a token from generateToken', async () => {
    const id = await register('fcm:node-sdk-1')
    const { token } = beams.generateToken('user-42')
    const res = await call('PUT', `/devices/fcm/${id}/user`, { headers: { Authorization: `Bearer ${token}` } })
    assert.equal(res.status, 200, res.text)
    assert.deepEqual(JSON.parse(res.text), {})
    const device = await call('GET', `/devices/fcm/${id}`)
    assert.equal(device.status, 200, device.text)
    assert.equal(JSON.parse(device.text).userId, 'user-42')

    // The same user again is fine; another user's token is refused.
    const again = await call('PUT', `/devices/fcm/${id}/user`, { headers: { Authorization: `Bearer ${token}` } })
    assert.equal(again.status, 200, again.text)
    const other = await call('PUT', `/devices/fcm/${id}/user`, { headers: { Authorization: `Bearer ${beams.generateToken('user-43').token}` } })
    assert.equal(other.status, 400, other.text)
    assert.equal(assertErrorBody(other.text).error, 'user_already_set')
  })

  it('refuses tokens of another instance secret, tampered ones and alg none', async () => {
    const id = await register('fcm:node-sdk-2')
    const stranger = new PushNotifications({ instanceId: INSTANCE_ID, secretKey: 'not-the-secret', endpoint: herald.host, port: herald.port })
    const good = beams.generateToken('user-7').token
    const [header, payload] = good.split('.')
    const claims = JSON.parse(Buffer.from(payload, 'base64url'))
    const forged = Buffer.from(JSON.stringify({ ...claims, sub: 'admin' })).toString('base64url')
    const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')
    for (const [name, token, status] of [
      ['other secret', stranger.generateToken('user-7').token, 401],
      ['tampered', `${header}.${forged}.${good.split('.')[2]}`, 401],
      ['alg none', `${none}.${payload}.`, 401],
      ['other instance issuer', new PushNotifications({ instanceId: '00000000-0000-4000-8000-000000000000', secretKey: SECRET_KEY }).generateToken('user-7').token, 403]
    ]) {
      const res = await call('PUT', `/devices/fcm/${id}/user`, { headers: { Authorization: `Bearer ${token}` } })
      assert.equal(res.status, status, `${name}: ${res.text}`)
      assertErrorBody(res.text)
    }
    const missing = await call('PUT', `/devices/fcm/${id}/user`)
    assert.equal(missing.status, 401, missing.text)
    assertErrorBody(missing.text)
  })

  it('manages interests the way the SDKs do', async () => {
    const id = await register('fcm:node-sdk-3')
    assert.equal((await call('POST', `/devices/fcm/${id}/interests/${encodeURIComponent('hello@world')}`)).status, 200)
    assert.equal((await call('PUT', `/devices/fcm/${id}/interests`, { body: { interests: ['a', 'b', 'hello@world'] } })).status, 200)
    assert.equal((await call('DELETE', `/devices/fcm/${id}/interests/a`)).status, 200)
    const list = await call('GET', `/devices/fcm/${id}/interests`)
    assert.equal(list.status, 200, list.text)
    assert.deepEqual(JSON.parse(list.text), { interests: ['b', 'hello@world'], responseMetadata: {} })
    const bad = await call('POST', `/devices/fcm/${id}/interests/${encodeURIComponent('no spaces')}`)
    assert.equal(bad.status, 400)
    assertErrorBody(bad.text)
    // Deleting is idempotent.
    assert.equal((await call('DELETE', `/devices/fcm/${id}`)).status, 200)
    assert.equal((await call('DELETE', `/devices/fcm/${id}`)).status, 200)
  })

  it('serves the web routes with CORS', async () => {
    const key = await call('GET', '/web-vapid-public-key')
    assert.equal(key.status, 200, key.text)
    assert.match(JSON.parse(key.text).vapidPublicKey, /^[A-Za-z0-9_-]{80,}$/)
    assert.equal(key.headers.get('access-control-allow-origin'), '*')
    const subscription = { endpoint: 'https://push.example.com/send/abc', keys: { p256dh: 'BNc', auth: 'x' } }
    const web = await call('POST', '/devices/web', { body: { token: Buffer.from(JSON.stringify(subscription)).toString('base64'), metadata: { sdkVersion: '2.1.0' } } })
    assert.equal(web.status, 200, web.text)
    const preflight = await fetch(`${root}/devices/web/${JSON.parse(web.text).id}/user`, {
      method: 'OPTIONS',
      headers: { Origin: 'https://shop.example.com', 'Access-Control-Request-Method': 'PUT', 'Access-Control-Request-Headers': 'authorization' }
    })
    assert.ok(preflight.ok, `preflight: ${preflight.status}`)
    assert.equal(preflight.headers.get('access-control-allow-origin'), '*')
    assert.match(preflight.headers.get('access-control-allow-headers'), /Authorization/)
  })

  it('accepts delivery and open reports', async () => {
    const url = `http://${herald.host}:${herald.port}/reporting_api/v2/instances/${INSTANCE_ID}/events`
    for (const event of ['Delivery', 'open']) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ event, publishId: 'pub-1', deviceId: 'fcm-x', timestampSecs: Math.floor(Date.now() / 1000), appInBackground: true })
      })
      assert.equal(res.status, 200, await res.text())
    }
    const bad = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"event":"delivery"}' })
    assert.equal(bad.status, 400)
    assertErrorBody(await bad.text())
  })
})
