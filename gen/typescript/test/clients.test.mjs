// The six exports' requests, seen by a stub fetch: which path parameter each
// client binds, which credential it sends, and that Channels requests are
// signed as they leave. The same calls against a live Herald are in
// scripts/compat/typescript-client.test.mjs.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'

import { adminClient, channelsClient, deviceClient, publishClient, reportingClient } from '../dist/index.js'

const BASE = 'http://herald.test:8080'
const INSTANCE_ID = '8f9a6e22-2483-49aa-8552-125f1a4c5781'

/** A fetch that records each Request and answers {"ok":true}. */
function recorder () {
  const requests = []
  const fetch = async (request) => {
    requests.push(request)
    return new Response('{"ok":true}', { status: 200, headers: { 'Content-Type': 'application/json' } })
  }
  return { requests, fetch }
}

describe('channelsClient', () => {
  it('binds app_id and signs every request with the key and secret', async () => {
    const { requests, fetch } = recorder()
    const channels = channelsClient({ baseUrl: BASE, appId: '42', key: 'the-key', secret: 'the-secret', fetch })
    const body = { name: 'greet', channel: 'news', data: '{"a":1}' }
    const { data } = await channels.POST('/apps/{app_id}/events', { body })
    assert.deepEqual(data, { ok: true })
    await channels.GET('/apps/{app_id}/channels/{channel_name}', { params: { path: { channel_name: 'presence-a@b' }, query: { info: 'user_count' } } })
    assert.equal(requests.length, 2)

    for (const request of requests) {
      const url = new URL(request.url)
      assert.equal(url.origin, BASE)
      const params = [...url.searchParams]
      const sig = url.searchParams.get('auth_signature')
      const signed = params.filter(([k]) => k !== 'auth_signature').map(([k, v]) => [k.toLowerCase(), v]).sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)
      const message = `${request.method}\n${url.pathname}\n${signed.map(([k, v]) => `${k}=${v}`).join('&')}`
      assert.equal(sig, createHmac('sha256', 'the-secret').update(message).digest('hex'), `${request.method} ${request.url}`)
      assert.equal(url.searchParams.get('auth_key'), 'the-key')
    }
    const [trigger, info] = requests
    assert.equal(new URL(trigger.url).pathname, '/apps/42/events')
    assert.deepEqual(await trigger.json(), body)
    assert.equal(trigger.headers.get('content-type'), 'application/json')
    assert.equal(new URL(info.url).pathname, '/apps/42/channels/presence-a%40b')
    assert.equal(new URL(info.url).searchParams.get('info'), 'user_count')
    assert.equal(new URL(info.url).searchParams.get('body_md5'), null)
  })

  it('refuses missing options', () => {
    for (const missing of ['baseUrl', 'appId', 'key', 'secret']) {
      const options = { baseUrl: BASE, appId: '1', key: 'k', secret: 's' }
      delete options[missing]
      assert.throws(() => channelsClient(options), new RegExp(`${missing} is required`))
    }
  })
})

describe('publishClient', () => {
  it('binds instance_id and sends the secret key as a bearer token, keeping other headers', async () => {
    const { requests, fetch } = recorder()
    const publish = publishClient({ baseUrl: BASE, instanceId: INSTANCE_ID, secretKey: 'SK', fetch, headers: { 'X-Team': 'web' } })
    await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', { body: { interests: ['news'], web: { notification: { title: 'hi' } } } })
    await publish.GET('/publish_api/v1/instances/{instance_id}/publishes/{publish_id}', { params: { path: { publish_id: 'pubid-1' } } })
    assert.deepEqual(requests.map((r) => new URL(r.url).pathname), [
      `/publish_api/v1/instances/${INSTANCE_ID}/publishes/interests`,
      `/publish_api/v1/instances/${INSTANCE_ID}/publishes/pubid-1`
    ])
    for (const r of requests) {
      assert.equal(r.headers.get('authorization'), 'Bearer SK')
      assert.equal(r.headers.get('x-team'), 'web')
    }
  })
})

describe('deviceClient and reportingClient', () => {
  it('bind instance_id and send no credential unless the call gives one', async () => {
    const { requests, fetch } = recorder()
    const devices = deviceClient({ baseUrl: BASE, instanceId: INSTANCE_ID, fetch })
    const reporting = reportingClient({ baseUrl: BASE, instanceId: INSTANCE_ID, fetch })
    await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: { token: 't' } })
    await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', {
      params: { path: { platform: 'fcm', device_id: 'fcm-1' } }, headers: { Authorization: 'Bearer user-jwt' }
    })
    await reporting.POST('/reporting_api/v2/instances/{instance_id}/events', { body: { event: 'open', publishId: 'p', deviceId: 'd', timestampSecs: 1 } })
    assert.deepEqual(requests.map((r) => `${r.method} ${new URL(r.url).pathname}`), [
      `POST /device_api/v1/instances/${INSTANCE_ID}/devices/fcm`,
      `PUT /device_api/v1/instances/${INSTANCE_ID}/devices/fcm/fcm-1/user`,
      `POST /reporting_api/v2/instances/${INSTANCE_ID}/events`
    ])
    assert.deepEqual(requests.map((r) => r.headers.get('authorization')), [null, 'Bearer user-jwt', null])
  })
})

describe('adminClient', () => {
  it('sends the admin token as a bearer token', async () => {
    const { requests, fetch } = recorder()
    const admin = adminClient({ baseUrl: BASE, token: 'admin-token-0123456789', fetch })
    await admin.GET('/admin/v1/apps')
    await admin.GET('/admin/v1/instances/{instance_id}/publishes', { params: { path: { instance_id: INSTANCE_ID }, query: { limit: 5 } } })
    assert.deepEqual(requests.map((r) => r.url), [`${BASE}/admin/v1/apps`, `${BASE}/admin/v1/instances/${INSTANCE_ID}/publishes?limit=5`])
    for (const r of requests) assert.equal(r.headers.get('authorization'), 'Bearer admin-token-0123456789')
    assert.throws(() => adminClient({ baseUrl: BASE }), /token is required/)
  })
})
