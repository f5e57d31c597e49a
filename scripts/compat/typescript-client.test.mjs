// The TypeScript client package (gen/typescript, @heraldrt/client) against the
// real herald binary: every request below goes through one of its six exports,
// as a team using the package would call them. A trigger and a batch reach a
// pusher-js subscriber, the channel queries answer, a request signed with a
// wrong secret or changed after signing is refused; a device registers,
// subscribes to an interest and receives a publish (through the fake gateways),
// binds itself to a user with a token from beamsUserToken; the admin client
// lists the apps and reads the publish's counts. Then the same package in
// headless Chromium (Debian's chromium, driven by playwright-core; skipped
// when it is missing, a failure under CI=true): it signs a trigger and mints
// a user token with the browser's Web Crypto, and registers and binds a device
// cross-origin; Herald accepts the trigger replayed as the page signed it.
//
// Run: make test-compat (which builds the package with make build-ts), or
//   (cd gen/typescript && npm ci && npm run build)
//   cd scripts/compat && HERALD_BIN=$PWD/herald FAKEGW_BIN=$PWD/../../bin/fakegateways node --test typescript-client.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Pusher from 'pusher-js'

import { startFakes } from './fakegateways.mjs'
import { startHerald } from './herald.mjs'
import { browserMissing, clientOptions, eventually, launchChromium, once, servePage, WAIT_MS } from './helpers.mjs'

const dist = new URL('../../gen/typescript/dist/index.js', import.meta.url)
if (!existsSync(dist)) {
  throw new Error('gen/typescript is not built: run `make build-ts` (npm ci && npm run build in gen/typescript)')
}
const { adminClient, beamsUserToken, channelsClient, deviceClient, publishClient, reportingClient } = await import(dist)

const INSTANCE_ID = '3c4b5a69-7d8e-4f10-9a2b-3c4d5e6f7a8b'
const SECRET_KEY = 'TSCLIENT0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF012345'
const ADMIN_TOKEN = 'ts-client-admin-token-0123456789'

describe('TypeScript client package (@heraldrt/client)', () => {
  let fakes, herald, baseUrl, channels, pusher

  before(async () => {
    fakes = await startFakes()
    herald = await startHerald({
      env: { ...fakes.heraldEnv(), HERALD_INSTANCE_ID: INSTANCE_ID, HERALD_INSTANCE_SECRET_KEY: SECRET_KEY, HERALD_ADMIN_TOKEN: ADMIN_TOKEN }
    })
    baseUrl = `http://${herald.host}:${herald.port}`
    channels = channelsClient({ baseUrl, appId: herald.appId, key: herald.key, secret: herald.secret })
  })
  after(async () => {
    pusher?.disconnect()
    await herald?.stop()
    await fakes?.stop()
  })

  /** A pusher-js client subscribed to channel; resolves once the subscription succeeded. */
  async function subscriber (channel) {
    pusher ??= new Pusher(herald.key, clientOptions(herald))
    const sub = pusher.subscribe(channel)
    await once(sub, 'pusher:subscription_succeeded', { label: `subscription to ${channel}` })
    return sub
  }

  it('triggers through channelsClient reach a pusher-js subscriber, one event and a batch', async () => {
    // Every character a channel name may have, so the signed path is escaped.
    const channel = 'ts-client_a-b=c@d,e.f;g'
    const sub = await subscriber(channel)

    const got = once(sub, 'greeting', { label: 'the triggered event' })
    const triggered = await channels.POST('/apps/{app_id}/events', {
      body: { name: 'greeting', channel, data: JSON.stringify({ hello: 'world' }), info: 'subscription_count' }
    })
    assert.equal(triggered.response.status, 200, JSON.stringify(triggered.error))
    assert.deepEqual(triggered.data, { channels: { [channel]: { subscription_count: 1 } } })
    assert.deepEqual((await got)[0], { hello: 'world' })

    const first = once(sub, 'batch-1', { label: 'the first batch event' })
    const second = once(sub, 'batch-2', { label: 'the second batch event' })
    const batch = await channels.POST('/apps/{app_id}/batch_events', {
      body: { batch: [{ name: 'batch-1', channel, data: '"one"' }, { name: 'batch-2', channel, data: '"two"' }] }
    })
    assert.equal(batch.response.status, 200, JSON.stringify(batch.error))
    assert.deepEqual([(await first)[0], (await second)[0]], ['one', 'two'])
  })

  it('channel queries answer through channelsClient', async () => {
    const channel = 'ts-query;occupied@1'
    await subscriber(channel)
    await eventually(async () => {
      const list = await channels.GET('/apps/{app_id}/channels', { params: { query: { filter_by_prefix: 'ts-query;' } } })
      assert.equal(list.response.status, 200, JSON.stringify(list.error))
      assert.deepEqual(list.data, { channels: { [channel]: {} } })
    })
    const info = await channels.GET('/apps/{app_id}/channels/{channel_name}', {
      params: { path: { channel_name: channel }, query: { info: 'subscription_count' } }
    })
    assert.equal(info.response.status, 200, JSON.stringify(info.error))
    assert.deepEqual(info.data, { occupied: true, subscription_count: 1 })
    const empty = await channels.GET('/apps/{app_id}/channels/{channel_name}', { params: { path: { channel_name: 'ts-query-nobody' } } })
    assert.deepEqual(empty.data, { occupied: false })
  })

  it('the server refuses a request signed with a wrong secret, or changed after signing', async () => {
    const wrong = channelsClient({ baseUrl, appId: herald.appId, key: herald.key, secret: 'not-the-secret' })
    const refused = await wrong.POST('/apps/{app_id}/events', { body: { name: 'e', channel: 'ts-refused', data: '{}' } })
    assert.equal(refused.response.status, 401)
    assert.equal(refused.error.error, 'invalid_signature')
    const listing = await wrong.GET('/apps/{app_id}/channels')
    assert.equal(listing.response.status, 401)

    // A middleware after the signer's changes the body, then the query: the
    // signature covers both, so the client signs what it sends.
    const tampered = channelsClient({ baseUrl, appId: herald.appId, key: herald.key, secret: herald.secret })
    tampered.use({ onRequest: ({ request }) => new Request(request, { body: '{"name":"e","channel":"ts-other","data":"{}"}', duplex: 'half' }) })
    const body = await tampered.POST('/apps/{app_id}/events', { body: { name: 'e', channel: 'ts-refused', data: '{}' } })
    assert.equal(body.response.status, 401)
    assert.equal(body.error.error, 'invalid_body_md5')
    const query = channelsClient({ baseUrl, appId: herald.appId, key: herald.key, secret: herald.secret })
    query.use({
      onRequest: ({ request }) => {
        const url = new URL(request.url)
        url.searchParams.set('filter_by_prefix', 'other-')
        return new Request(url, request)
      }
    })
    const changed = await query.GET('/apps/{app_id}/channels', { params: { query: { filter_by_prefix: 'ts-' } } })
    assert.equal(changed.response.status, 401)
    assert.equal(changed.error.error, 'invalid_signature')
  })

  it('a device registers, subscribes to an interest, gets a publish and binds to a user; the admin client sees it all', async () => {
    const devices = deviceClient({ baseUrl, instanceId: INSTANCE_ID })
    const token = `fcm-ts-client:${Date.now()}`
    const registered = await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: { token } })
    assert.equal(registered.response.status, 200, JSON.stringify(registered.error))
    const id = registered.data.id
    assert.match(id, /^fcm-/)
    const device = { path: { platform: 'fcm', device_id: id } }

    const interest = await devices.POST('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/interests/{interest_name}', {
      params: { path: { ...device.path, interest_name: 'ts-news' } }
    })
    assert.equal(interest.response.status, 200, JSON.stringify(interest.error))
    const interests = await devices.GET('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/interests', { params: device })
    assert.deepEqual(interests.data.interests, ['ts-news'])

    // A user token from beamsUserToken binds the device; one signed with another secret is refused.
    const forged = await beamsUserToken({ instanceId: INSTANCE_ID, secretKey: 'not-the-secret-key', userId: 'ts-alice' })
    const refused = await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', {
      params: device, headers: { Authorization: `Bearer ${forged.token}` }
    })
    assert.equal(refused.response.status, 401, JSON.stringify(refused.data ?? refused.error))
    const { token: userToken } = await beamsUserToken({ instanceId: INSTANCE_ID, secretKey: SECRET_KEY, userId: 'ts-alice' })
    const bound = await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', {
      params: device, headers: { Authorization: `Bearer ${userToken}` }
    })
    assert.equal(bound.response.status, 200, JSON.stringify(bound.error))
    const read = await devices.GET('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}', { params: device })
    assert.equal(read.data.userId, 'ts-alice')

    // A publish to the interest, followed through publishClient until done.
    const publish = publishClient({ baseUrl, instanceId: INSTANCE_ID, secretKey: SECRET_KEY })
    const published = await publish.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', {
      body: { interests: ['ts-news'], fcm: { notification: { title: 'Hello', body: 'from @heraldrt/client' } } }
    })
    assert.equal(published.response.status, 200, JSON.stringify(published.error))
    const publishId = published.data.publishId
    const status = await eventually(async () => {
      const s = await publish.GET('/publish_api/v1/instances/{instance_id}/publishes/{publish_id}', { params: { path: { publish_id: publishId } } })
      assert.equal(s.response.status, 200, JSON.stringify(s.error))
      assert.equal(s.data.state, 'done', JSON.stringify(s.data))
      return s.data
    }, 30_000)
    assert.deepEqual([status.targeted, status.sent, status.failed], [1, 1, 0], JSON.stringify(status))
    const messages = (await fakes.control('GET', '/messages')).filter((m) => m.platform === 'fcm' && m.token === token)
    assert.equal(messages.length, 1, JSON.stringify(messages))
    assert.deepEqual(messages[0].body.android.notification, { title: 'Hello', body: 'from @heraldrt/client' })

    // The secret key is what the Publish API takes.
    const stranger = publishClient({ baseUrl, instanceId: INSTANCE_ID, secretKey: 'not-the-secret-key' })
    const denied = await stranger.POST('/publish_api/v1/instances/{instance_id}/publishes/interests', { body: { interests: ['ts-news'], fcm: { data: { a: '1' } } } })
    assert.equal(denied.response.status, 401, JSON.stringify(denied.error))

    // The device reports it opened; the counts show it.
    const reporting = reportingClient({ baseUrl, instanceId: INSTANCE_ID })
    const reported = await reporting.POST('/reporting_api/v2/instances/{instance_id}/events', {
      body: { event: 'Open', publishId, deviceId: id, timestampSecs: Math.floor(Date.now() / 1000) }
    })
    assert.equal(reported.response.status, 200, JSON.stringify(reported.error))

    // The admin client lists the apps and reads the publish's counts.
    const admin = adminClient({ baseUrl, token: ADMIN_TOKEN })
    const apps = await admin.GET('/admin/v1/apps')
    assert.equal(apps.response.status, 200, JSON.stringify(apps.error))
    assert.deepEqual(apps.data.apps.map((a) => [a.id, a.key]), [[herald.appId, herald.key]])
    await eventually(async () => {
      const list = await admin.GET('/admin/v1/instances/{instance_id}/publishes', { params: { path: { instance_id: INSTANCE_ID }, query: { limit: 10 } } })
      assert.equal(list.response.status, 200, JSON.stringify(list.error))
      const summary = list.data.publishes.find((p) => p.publishId === publishId)
      assert.ok(summary, `publish ${publishId} not listed: ${JSON.stringify(list.data)}`)
      assert.deepEqual([summary.state, summary.targetKind, summary.targeted, summary.sent, summary.failed, summary.opened], ['done', 'interests', 1, 1, 0, 1], JSON.stringify(summary))
    }, WAIT_MS)
    const wrongAdmin = adminClient({ baseUrl, token: 'not-the-admin-token-0123456789' })
    assert.equal((await wrongAdmin.GET('/admin/v1/apps')).response.status, 401)
  })
})

const noBrowser = browserMissing()

/**
 * Serves a blank page whose import map resolves openapi-fetch, with the
 * package's built files under /pkg/ and openapi-fetch's ESM build, from an
 * origin of its own (so the page's calls to Herald are cross-origin, as a
 * web app's are).
 */
function servePackagePage () {
  const pkg = fileURLToPath(new URL('../../gen/typescript/', import.meta.url))
  const html = '<!doctype html><title>@heraldrt/client</title>' +
    '<script type="importmap">{"imports":{"openapi-fetch":"/openapi-fetch.mjs"}}</script>'
  return servePage(html, (path) => {
    let file
    if (path === '/openapi-fetch.mjs') file = join(pkg, 'node_modules/openapi-fetch/dist/index.mjs')
    else if (/^\/pkg\/[\w/.-]+\.js$/.test(path) && !path.includes('..')) file = join(pkg, 'dist', path.slice('/pkg/'.length))
    return file && existsSync(file) ? readFileSync(file) : undefined
  })
}

describe('TypeScript client package in Chromium', { skip: noBrowser }, () => {
  let herald, pages, browser

  before(async () => {
    herald = await startHerald({ env: { HERALD_INSTANCE_ID: INSTANCE_ID, HERALD_INSTANCE_SECRET_KEY: SECRET_KEY } })
    pages = await servePackagePage()
    browser = await launchChromium()
  })
  after(async () => {
    await browser?.close()
    await pages?.close()
    await herald?.stop()
  })

  it('signs with Web Crypto and the MD5 of its own, mints a user token and binds a device, as in Node', async () => {
    const page = await browser.newPage()
    await page.goto(pages.url)
    const baseUrl = `http://${herald.host}:${herald.port}`
    const out = await page.evaluate(async ({ baseUrl, app, instanceId, secretKey }) => {
      const m = await import('/pkg/index.js')
      // The signed trigger is recorded, not sent: the Channels API is for servers (no CORS).
      const recorded = []
      const channels = m.channelsClient({
        ...app,
        baseUrl,
        fetch: async (request) => {
          recorded.push({ url: request.url, method: request.method, contentType: request.headers.get('content-type'), body: await request.text() })
          return new Response('{}', { headers: { 'Content-Type': 'application/json' } })
        }
      })
      await channels.POST('/apps/{app_id}/events', { body: { name: 'from-browser', channel: 'ts-browser', data: '{"é":"ü 🎉"}' } })
      const devices = m.deviceClient({ baseUrl, instanceId })
      const registered = await devices.POST('/device_api/v1/instances/{instance_id}/devices/fcm', { body: { token: 'fcm-ts-browser:1' } })
      const path = { platform: 'fcm', device_id: registered.data.id }
      const { token } = await m.beamsUserToken({ instanceId, secretKey, userId: 'ts-browser-user' })
      const bound = await devices.PUT('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}/user', {
        params: { path }, headers: { Authorization: `Bearer ${token}` }
      })
      const device = await devices.GET('/device_api/v1/instances/{instance_id}/devices/{platform}/{device_id}', { params: { path } })
      return { recorded, boundStatus: bound.response.status, boundError: bound.error, userId: device.data?.userId, node: typeof process }
    }, { baseUrl, app: { appId: herald.appId, key: herald.key, secret: herald.secret }, instanceId: INSTANCE_ID, secretKey: SECRET_KEY })

    assert.equal(out.node, 'undefined', 'the page has a process object: not a browser environment')
    assert.equal(out.boundStatus, 200, JSON.stringify(out.boundError))
    assert.equal(out.userId, 'ts-browser-user')
    assert.equal(out.recorded.length, 1)
    const [trigger] = out.recorded
    assert.ok(new URL(trigger.url).searchParams.has('body_md5'), trigger.url)
    // Herald takes the trigger exactly as the page signed it.
    const res = await fetch(trigger.url, { method: trigger.method, headers: { 'Content-Type': trigger.contentType }, body: trigger.body })
    assert.equal(res.status, 200, await res.text())
    // And refuses it with one byte of the body changed.
    const changed = await fetch(trigger.url, { method: trigger.method, headers: { 'Content-Type': trigger.contentType }, body: trigger.body.replace('ü', 'u') })
    assert.equal(changed.status, 401)
  })
})
