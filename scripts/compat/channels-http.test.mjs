// The Channels HTTP API of the real herald binary, driven by the official
// `pusher` Node server SDK the way a new user would drive it, plus hand-signed
// requests for what the SDK cannot send (bad timestamps, tampered bodies,
// parameters in the query string).
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1
//
// No WebSocket clients are connected here, so every channel is unoccupied and
// every count is 0; the WebSocket side has its own suite.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, createHmac } from 'node:crypto'
import Pusher from 'pusher'

import { APP, startHerald, heraldCli, freshDB } from './herald.mjs'

// ---------------------------------------------------------------------------
// Helpers

/** A pusher SDK client for a running herald, with the default app's credentials unless overridden. */
function sdk (herald, creds = {}) {
  return new Pusher({
    appId: APP.appId,
    key: APP.key,
    secret: APP.secret,
    ...creds,
    host: '127.0.0.1',
    port: String(herald.port),
    useTLS: false
  })
}

/** Awaits an SDK response, asserts 200 and a JSON content type, and returns the parsed body. */
async function ok (promise) {
  const res = await promise
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type'), /^application\/json\b/)
  return res.json()
}

/**
 * Asserts that body (text) is exactly the error body
 * {"error": <non-empty string>, "description": <non-empty string>} and returns it parsed.
 */
function assertErrorBody (text) {
  let body
  assert.doesNotThrow(() => { body = JSON.parse(text) }, `error body is not JSON: ${text}`)
  assert.deepEqual(Object.keys(body).sort(), ['description', 'error'], `error body: ${text}`)
  assert.equal(typeof body.error, 'string')
  assert.equal(typeof body.description, 'string')
  assert.ok(body.error.length > 0 && body.description.length > 0, `error body: ${text}`)
  return body
}

/**
 * Asserts that an SDK call rejects with a RequestError of the given status and
 * the error body; returns the parsed body.
 */
async function rejects (promise, status) {
  const err = await promise.then(
    (res) => assert.fail(`expected status ${status}, got ${res.status}`),
    (e) => e)
  assert.ok(err instanceof Pusher.RequestError, `expected a RequestError, got ${err}`)
  assert.equal(err.status, status, `status of ${err.url}; body: ${err.body}`)
  return assertErrorBody(err.body)
}

/** Asserts a hand-made fetch response's status and error body; returns the parsed body. */
async function failsWith (res, status) {
  const text = await res.text()
  assert.equal(res.status, status, `body: ${text}`)
  return assertErrorBody(text)
}

/** hex HMAC-SHA256 of the string to sign: METHOD\nPATH\nk=v&… (keys lower-cased and sorted, values unescaped). */
function signature (secret, method, path, params) {
  const sorted = params
    .map(([k, v]) => [k.toLowerCase(), String(v)])
    .filter(([k]) => k !== 'auth_signature')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) // stable: repeated channels[] keep their order
  const query = sorted.map(([k, v]) => `${k}=${v}`).join('&')
  return createHmac('sha256', secret).update(`${method.toUpperCase()}\n${path}\n${query}`).digest('hex')
}

const md5 = (s) => createHash('md5').update(s).digest('hex')
const nowSeconds = () => Math.floor(Date.now() / 1000)

/**
 * Sends a request signed by hand.
 *
 * @param herald a running server
 * @param {object} r
 * @param {string} [r.method] default POST
 * @param {string} r.path under /apps/<app_id>, e.g. '/events'
 * @param {Array<[string,string]>} [r.query] extra query parameters, repeatable
 * @param {string} [r.body] exact body bytes; none when undefined
 * @param {string} [r.signedBody] the body the signature's body_md5 is computed over (default: body)
 * @param {string} [r.contentType] default application/json when there is a body
 * @param {number} [r.timestamp] auth_timestamp, default now
 */
function signedFetch (herald, { method = 'POST', path, query = [], body, signedBody = body, contentType = 'application/json', timestamp = nowSeconds(), appId = APP.appId, key = APP.key, secret = APP.secret }) {
  const fullPath = `/apps/${appId}${path}`
  const params = [...query, ['auth_key', key], ['auth_timestamp', String(timestamp)], ['auth_version', '1.0']]
  if (signedBody) params.push(['body_md5', md5(signedBody)])
  params.push(['auth_signature', signature(secret, method, fullPath, params)])
  const qs = params.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')
  const headers = body === undefined ? {} : { 'content-type': contentType }
  return fetch(`http://127.0.0.1:${herald.port}${fullPath}?${qs}`, { method, headers, body })
}

/** Retries fn (every 100 ms, up to timeoutMs) until it stops throwing; rethrows the last failure. */
async function eventually (fn, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      return await fn()
    } catch (err) {
      if (Date.now() > deadline) throw err
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
}

/**
 * Starts a herald for the enclosing describe block (on a fresh database, after
 * `prepare(dbFile)` when given) and stops it after the block. Returns an object
 * whose `herald` and `pusher` (an SDK client for the default app) are set once
 * the block's tests run.
 */
function serverForBlock ({ prepare } = {}) {
  const ctx = {}
  before(async () => {
    const db = freshDB()
    await prepare?.(db)
    ctx.herald = await startHerald({ db })
    ctx.pusher = sdk(ctx.herald)
  })
  after(() => ctx.herald?.stop())
  return ctx
}

// ---------------------------------------------------------------------------

describe('hand-made request signing (used by the tests below)', () => {
  it('reproduces the published test vector', () => {
    const params = [
      ['auth_key', '278d425bdf160c739803'],
      ['auth_timestamp', '1353088179'],
      ['auth_version', '1.0'],
      ['body_md5', 'ec365a775a4cd0599faeb73354201b6f']
    ]
    assert.equal(signature('7ad3773142a6692b25b8', 'POST', '/apps/3/events', params),
      'da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c')
  })

  it('is accepted by the server (GET /channels)', async () => {
    const herald = await startHerald()
    try {
      assert.equal(herald.host, '127.0.0.1') // test servers listen on loopback only
      const res = await signedFetch(herald, { method: 'GET', path: '/channels' })
      assert.equal(res.status, 200, await res.clone().text())
      assert.deepEqual(await res.json(), { channels: {} })
    } finally {
      await herald.stop()
    }
  })
})

describe('trigger', () => {
  const s = serverForBlock()

  it('to one channel answers {}', async () => {
    assert.deepEqual(await ok(s.pusher.trigger('my-channel', 'my-event', { message: 'hello world' })), {})
  })

  it('to several channels answers {}', async () => {
    assert.deepEqual(await ok(s.pusher.trigger(['a', 'b', 'private-c', 'presence-d'], 'my-event', 'plain text')), {})
  })

  it('to 100 channels answers {}', async () => {
    const channels = Array.from({ length: 100 }, (_, i) => `ch-${i}`)
    assert.deepEqual(await ok(s.pusher.trigger(channels, 'my-event', {})), {})
  })

  it('accepts data of exactly 10 KB, a 200-character channel name and a socket_id', async () => {
    const body = await ok(s.pusher.trigger('x'.repeat(200), 'my-event', 'd'.repeat(10 * 1024), { socket_id: '123.456' }))
    assert.deepEqual(body, {})
  })

  it('accepts the channel name punctuation _ - = @ , . ;', async () => {
    assert.deepEqual(await ok(s.pusher.trigger('private-A_z-0=9@a,b.c;d', 'my-event', {})), {})
  })

  it('with info=subscription_count returns a count per public channel', async () => {
    const body = await ok(s.pusher.trigger(['news', 'sports'], 'my-event', {}, { info: 'subscription_count' }))
    assert.deepEqual(body, { channels: { news: { subscription_count: 0 }, sports: { subscription_count: 0 } } })
  })

  it('with info=user_count returns the user count of a presence channel', async () => {
    const body = await ok(s.pusher.trigger('presence-room', 'my-event', {}, { info: 'user_count' }))
    assert.deepEqual(body, { channels: { 'presence-room': { user_count: 0 } } })
  })

  it('with both attributes returns only those that apply to each channel kind', async () => {
    const body = await ok(s.pusher.trigger(['news', 'private-inbox', 'presence-room'], 'my-event', {},
      { info: 'user_count,subscription_count' }))
    assert.deepEqual(body, {
      channels: {
        news: { subscription_count: 0 },
        'private-inbox': { subscription_count: 0 },
        'presence-room': { user_count: 0 }
      }
    })
  })

  it('with info that applies to none of the channels maps each channel to {}', async () => {
    const body = await ok(s.pusher.trigger(['news', 'sports'], 'my-event', {}, { info: 'user_count' }))
    assert.deepEqual(body, { channels: { news: {}, sports: {} } })
  })

  it('with info names each unique channel once', async () => {
    const body = await ok(s.pusher.trigger(['news', 'news'], 'my-event', {}, { info: 'subscription_count' }))
    assert.deepEqual(body, { channels: { news: { subscription_count: 0 } } })
  })

  it('with the single-channel form `channel` answers {}', async () => {
    const body = await ok(s.pusher.post({ path: '/events', body: { name: 'my-event', data: '{}', channel: 'my-channel' } }))
    assert.deepEqual(body, {})
  })

  it('to an end-to-end encrypted channel (the SDK encrypts, the server relays) answers {}', async () => {
    const encrypting = sdk(s.herald, { encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString('base64') })
    assert.deepEqual(await ok(encrypting.trigger('private-encrypted-vault', 'my-event', { secret: 'x' })), {})
  })

  it('signed by hand with a charset on the JSON content type answers {}', async () => {
    const body = JSON.stringify({ name: 'ev', data: '{}', channel: 'news' })
    const res = await signedFetch(s.herald, { path: '/events', body, contentType: 'application/json; charset=utf-8' })
    assert.equal(res.status, 200, await res.clone().text())
    assert.deepEqual(await res.json(), {})
  })

  it('sendToUser triggers on #server-to-user-<id> and answers {}', async () => {
    assert.deepEqual(await ok(s.pusher.sendToUser('user-1', 'my-event', { message: 'hi' })), {})
  })
})

describe('triggerBatch', () => {
  const s = serverForBlock()

  it('of several events answers {}', async () => {
    const body = await ok(s.pusher.triggerBatch([
      { channel: 'news', name: 'a', data: { n: 1 } },
      { channel: 'private-inbox', name: 'b', data: 'text' },
      { channel: 'presence-room', name: 'c', data: {}, socket_id: '1.2' }
    ]))
    assert.deepEqual(body, {})
  })

  it('of 10 events answers {}', async () => {
    const batch = Array.from({ length: 10 }, (_, i) => ({ channel: `ch-${i}`, name: 'ev', data: { i } }))
    assert.deepEqual(await ok(s.pusher.triggerBatch(batch)), {})
  })

  it('with info returns one element per event, in order', async () => {
    const body = await ok(s.pusher.triggerBatch([
      { channel: 'news', name: 'a', data: {}, info: 'subscription_count' },
      { channel: 'presence-room', name: 'b', data: {}, info: 'user_count' },
      { channel: 'sports', name: 'c', data: {} },
      { channel: 'presence-room', name: 'd', data: {}, info: 'user_count,subscription_count' },
      { channel: 'news', name: 'e', data: {}, info: 'user_count' }
    ]))
    assert.deepEqual(body, {
      batch: [{ subscription_count: 0 }, { user_count: 0 }, {}, { user_count: 0 }, {}]
    })
  })
})

describe('channel queries', () => {
  const s = serverForBlock()

  before(async () => {
    // Triggering does not occupy a channel: only subscribers do.
    await ok(s.pusher.trigger(['news', 'presence-room', 'cache-quotes'], 'my-event', {}))
  })

  describe('GET /channels', () => {
    it('lists no channel while nobody is subscribed', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels' })), { channels: {} })
    })

    it('with filter_by_prefix', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels', params: { filter_by_prefix: 'presence-' } })), { channels: {} })
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels', params: { filter_by_prefix: 'news' } })), { channels: {} })
    })

    it('with info=user_count on the presence- prefix', async () => {
      const body = await ok(s.pusher.get({ path: '/channels', params: { filter_by_prefix: 'presence-', info: 'user_count' } }))
      assert.deepEqual(body, { channels: {} })
    })

    it('with info=user_count and no presence- prefix is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels', params: { info: 'user_count' } }), 400)
      await rejects(s.pusher.get({ path: '/channels', params: { filter_by_prefix: 'private-', info: 'user_count' } }), 400)
    })
  })

  describe('GET /channels/<name>', () => {
    it('without info answers {occupied:false}', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels/news' })), { occupied: false })
    })

    it('with info=subscription_count on a public channel', async () => {
      const body = await ok(s.pusher.get({ path: '/channels/news', params: { info: 'subscription_count' } }))
      assert.deepEqual(body, { occupied: false, subscription_count: 0 })
    })

    it('with info=subscription_count on a private channel', async () => {
      const body = await ok(s.pusher.get({ path: '/channels/private-inbox', params: { info: 'subscription_count' } }))
      assert.deepEqual(body, { occupied: false, subscription_count: 0 })
    })

    it('with info=user_count on a presence channel', async () => {
      const body = await ok(s.pusher.get({ path: '/channels/presence-room', params: { info: 'user_count' } }))
      assert.deepEqual(body, { occupied: false, user_count: 0 })
    })

    it('with a name holding the punctuation _ - = @ , . ;', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels/private-A_z-0=9@a,b.c;d' })), { occupied: false })
    })

    it('with info=cache after a trigger returns the cached data and its ttl', async () => {
      await ok(s.pusher.trigger('cache-prices', 'price', { symbol: 'ACME', price: 42 }))
      const body = await ok(s.pusher.get({ path: '/channels/cache-prices', params: { info: 'cache' } }))
      assert.deepEqual(Object.keys(body).sort(), ['cache', 'occupied'])
      assert.equal(body.occupied, false)
      assert.deepEqual(Object.keys(body.cache).sort(), ['data', 'ttl'])
      assert.equal(body.cache.data, JSON.stringify({ symbol: 'ACME', price: 42 }))
      assert.ok(Number.isInteger(body.cache.ttl) && body.cache.ttl <= 1800 && body.cache.ttl >= 1790,
        `ttl ${body.cache.ttl} should be close to 1800`)
    })

    it('with info=cache keeps the last triggered event only', async () => {
      await ok(s.pusher.trigger('cache-scores', 'score', 'first'))
      await ok(s.pusher.triggerBatch([{ channel: 'cache-scores', name: 'score', data: 'second' }]))
      const body = await ok(s.pusher.get({ path: '/channels/cache-scores', params: { info: 'cache' } }))
      assert.equal(body.cache.data, 'second')
    })

    it('with info=cache,user_count on a presence-cache channel', async () => {
      await ok(s.pusher.trigger('presence-cache-lobby', 'hello', 'data'))
      const body = await ok(s.pusher.get({ path: '/channels/presence-cache-lobby', params: { info: 'user_count,cache' } }))
      assert.equal(body.occupied, false)
      assert.equal(body.user_count, 0)
      assert.equal(body.cache.data, 'data')
      assert.deepEqual(Object.keys(body).sort(), ['cache', 'occupied', 'user_count'])
    })

    it('with info=cache on an empty cache channel returns cache: null', async () => {
      const body = await ok(s.pusher.get({ path: '/channels/cache-empty', params: { info: 'cache' } }))
      assert.deepEqual(body, { occupied: false, cache: null })
    })

    it('with info=user_count on a public channel is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels/news', params: { info: 'user_count' } }), 400)
    })

    it('with info=cache on a channel that is not a cache channel is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels/news', params: { info: 'cache' } }), 400)
      await rejects(s.pusher.get({ path: '/channels/presence-room', params: { info: 'cache' } }), 400)
    })

    it('with info=subscription_count on a presence channel is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels/presence-room', params: { info: 'subscription_count' } }), 400)
    })

    it('with an unknown info attribute is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels/news', params: { info: 'bogus' } }), 400)
    })
  })

  describe('GET /channels/<name>/users', () => {
    it('on a presence channel answers {users: []}', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels/presence-room/users' })), { users: [] })
    })

    it('on a presence channel nobody ever used answers {users: []}', async () => {
      assert.deepEqual(await ok(s.pusher.get({ path: '/channels/presence-nobody/users' })), { users: [] })
    })

    it('on a channel that is not a presence channel is 400', async () => {
      await rejects(s.pusher.get({ path: '/channels/news/users' }), 400)
      await rejects(s.pusher.get({ path: '/channels/private-inbox/users' }), 400)
    })
  })
})

describe('users', () => {
  const s = serverForBlock()

  it('terminateUserConnections answers {}', async () => {
    assert.deepEqual(await ok(s.pusher.terminateUserConnections('user-1')), {})
  })

  it('sendToUser answers 200', async () => {
    const res = await s.pusher.sendToUser('user-1', 'event', { message: 'hello' })
    assert.equal(res.status, 200)
    assert.deepEqual(await res.json(), {})
  })
})

describe('errors', () => {
  // Besides the default app 1, the database holds app 2 (enabled) and app 3
  // (disabled), made with the management CLI before the server starts.
  const s = serverForBlock({
    prepare: async (db) => {
      await heraldCli('apps', 'create', '--db', db, '--id', '2', '--key', 'k2', '--secret', 's2')
      await heraldCli('apps', 'create', '--db', db, '--id', '3', '--key', 'k3', '--secret', 's3')
      await heraldCli('apps', 'update', '3', '--enabled=false', '--db', db)
    }
  })

  describe('authentication (401)', () => {
    it('wrong secret', async () => {
      await rejects(sdk(s.herald, { secret: 'not-the-secret' }).trigger('news', 'ev', {}), 401)
      await rejects(sdk(s.herald, { secret: 'not-the-secret' }).get({ path: '/channels' }), 401)
    })

    it('unknown key', async () => {
      await rejects(sdk(s.herald, { key: 'no-such-key' }).trigger('news', 'ev', {}), 401)
    })

    it("another app's key and secret on this app's path", async () => {
      // App 2's own credentials work on its own path...
      assert.deepEqual(await ok(sdk(s.herald, { appId: '2', key: 'k2', secret: 's2' }).trigger('news', 'ev', {})), {})
      // ...but not on app 1's.
      await rejects(sdk(s.herald, { appId: APP.appId, key: 'k2', secret: 's2' }).trigger('news', 'ev', {}), 401)
    })

    it('timestamp more than 600 s in the past or future', async () => {
      const body = JSON.stringify({ name: 'ev', data: '{}', channel: 'news' })
      await failsWith(await signedFetch(s.herald, { path: '/events', body, timestamp: nowSeconds() - 605 }), 401)
      await failsWith(await signedFetch(s.herald, { path: '/events', body, timestamp: nowSeconds() + 605 }), 401)
      await failsWith(await signedFetch(s.herald, { method: 'GET', path: '/channels', timestamp: nowSeconds() - 3600 }), 401)
      // Inside the window it is accepted.
      const res = await signedFetch(s.herald, { path: '/events', body, timestamp: nowSeconds() - 590 })
      assert.equal(res.status, 200, await res.text())
    })

    it('tampered body (body_md5 does not match)', async () => {
      const signedBody = JSON.stringify({ name: 'ev', data: 'original', channel: 'news' })
      const body = JSON.stringify({ name: 'ev', data: 'tampered', channel: 'news' })
      await failsWith(await signedFetch(s.herald, { path: '/events', body, signedBody }), 401)
    })

    it('a body without body_md5', async () => {
      const body = JSON.stringify({ name: 'ev', data: '{}', channel: 'news' })
      await failsWith(await signedFetch(s.herald, { path: '/events', body, signedBody: '' }), 401)
    })

    it('no signature at all', async () => {
      await failsWith(await fetch(`http://127.0.0.1:${s.herald.port}/apps/${APP.appId}/channels`), 401)
    })
  })

  it('disabled app is 403', async () => {
    const disabled = sdk(s.herald, { appId: '3', key: 'k3', secret: 's3' })
    await rejects(disabled.trigger('news', 'ev', {}), 403)
    await rejects(disabled.get({ path: '/channels' }), 403)
  })

  describe('limits', () => {
    it('data over 10 KB is 413', async () => {
      await rejects(s.pusher.trigger('news', 'ev', 'd'.repeat(10 * 1024 + 1)), 413)
    })

    it('data over 10 KB in a batch is 413', async () => {
      await rejects(s.pusher.triggerBatch([
        { channel: 'news', name: 'ev', data: 'small' },
        { channel: 'news', name: 'ev', data: 'd'.repeat(10 * 1024 + 1) }
      ]), 413)
    })

    it('101 channels is 400', async () => {
      const channels = Array.from({ length: 101 }, (_, i) => `ch-${i}`)
      // The SDK refuses this itself...
      assert.throws(() => s.pusher.trigger(channels, 'ev', {}), /more than 100 channels/)
      // ...so send it through the SDK's generic signed POST.
      await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', data: '{}', channels } }), 400)
    })

    it('11 batch events is 400', async () => {
      const batch = Array.from({ length: 11 }, (_, i) => ({ channel: `ch-${i}`, name: 'ev', data: {} }))
      await rejects(s.pusher.triggerBatch(batch), 400)
    })
  })

  describe('invalid requests (400)', () => {
    it('invalid channel names', async () => {
      for (const name of ['has space', 'x'.repeat(201), 'new\nline', 'ümlaut', '']) {
        assert.throws(() => s.pusher.trigger(name, 'ev', {}), /Invalid channel name|Channel name too long/)
        await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', data: '{}', channels: [name] } }), 400)
      }
      await rejects(s.pusher.triggerBatch([{ channel: 'has space', name: 'ev', data: {} }]), 400)
    })

    it('bad socket_id', async () => {
      assert.throws(() => s.pusher.trigger('news', 'ev', {}, { socket_id: 'abc' }), /Invalid socket id/)
      for (const socketId of ['abc', '1.', '.1', '1.2.3', '12']) {
        await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', data: '{}', channels: ['news'], socket_id: socketId } }), 400)
      }
      await rejects(s.pusher.triggerBatch([{ channel: 'news', name: 'ev', data: {}, socket_id: 'abc' }]), 400)
    })

    it('missing event name, data or channels', async () => {
      await rejects(s.pusher.post({ path: '/events', body: { data: '{}', channels: ['news'] } }), 400)
      await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', channels: ['news'] } }), 400)
      await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', data: '{}' } }), 400)
      await rejects(s.pusher.post({ path: '/events', body: { name: 'ev', data: '{}', channels: [] } }), 400)
    })

    it('event name longer than 200 characters', async () => {
      assert.throws(() => s.pusher.trigger('news', 'e'.repeat(201), {}), /Too long event name/)
      await rejects(s.pusher.post({ path: '/events', body: { name: 'e'.repeat(201), data: '{}', channels: ['news'] } }), 400)
    })

    it('malformed JSON', async () => {
      const res = await signedFetch(s.herald, { path: '/events', body: '{"name": "ev", "data": ' })
      await failsWith(res, 400)
      await failsWith(await signedFetch(s.herald, { path: '/batch_events', body: '{"batch": [' }), 400)
    })

    it('wrong content type', async () => {
      const body = JSON.stringify({ name: 'ev', data: '{}', channel: 'news' })
      await failsWith(await signedFetch(s.herald, { path: '/events', body, contentType: 'text/plain' }), 400)
    })

    it('an empty batch', async () => {
      await rejects(s.pusher.triggerBatch([]), 400)
    })
  })

  it('unknown endpoint is 404 with the error body', async () => {
    await rejects(s.pusher.get({ path: '/no-such-endpoint' }), 404)
  })
})

describe('app changes while the server runs', () => {
  const s = serverForBlock()

  it('a new app created with `herald apps create` is served, and refused once disabled', async () => {
    const app2 = sdk(s.herald, { appId: '2', key: 'k2', secret: 's2' })
    await rejects(app2.trigger('news', 'ev', {}), 401)

    await heraldCli('apps', 'create', '--db', s.herald.db, '--id', '2', '--key', 'k2', '--secret', 's2')
    await eventually(async () => assert.deepEqual(await ok(app2.trigger('news', 'ev', {})), {}))

    await heraldCli('apps', 'update', '2', '--enabled=false', '--db', s.herald.db)
    await eventually(() => rejects(app2.trigger('news', 'ev', {}), 403))
  })
})

describe('parameters in the query string of a POST', () => {
  const s = serverForBlock()

  it('name, data and channel in the query, no body', async () => {
    const res = await signedFetch(s.herald, {
      path: '/events',
      query: [['name', 'my-event'], ['data', '{"message":"hello world"}'], ['channel', 'my-channel']]
    })
    assert.equal(res.status, 200, await res.clone().text())
    assert.deepEqual(await res.json(), {})
  })

  it('channels[] repeated once per channel, with info', async () => {
    const res = await signedFetch(s.herald, {
      path: '/events',
      query: [['name', 'my-event'], ['data', 'x'], ['channels[]', 'one'], ['channels[]', 'presence-two'], ['info', 'subscription_count,user_count']]
    })
    assert.equal(res.status, 200, await res.clone().text())
    assert.deepEqual(await res.json(), { channels: { one: { subscription_count: 0 }, 'presence-two': { user_count: 0 } } })
  })

  it('invalid parameters in the query are refused as in a body', async () => {
    const res = await signedFetch(s.herald, {
      path: '/events',
      query: [['name', 'my-event'], ['data', 'x'], ['channel', 'has space']]
    })
    await failsWith(res, 400)
  })
})
