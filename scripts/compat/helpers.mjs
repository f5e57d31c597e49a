// Shared helpers for the compatibility suites that drive the real herald
// binary with pusher-js and the `pusher` server SDK: waiting with timeouts,
// a waitable log, pusher-js clients that record what they see, and a webhook
// receiver that checks every request's signature.
//
// The patterns are those of channels-ws.test.mjs (which keeps its own copies):
// nothing sleeps for a fixed time; every wait has a timeout whose message says
// what was awaited and what was seen instead.

import assert from 'node:assert/strict'
import { createHmac, timingSafeEqual } from 'node:crypto'
import { existsSync } from 'node:fs'
import { createServer } from 'node:http'
import { chromium } from 'playwright-core'
import Pusher from 'pusher-js'
import PusherServer from 'pusher'

import { APP } from './herald.mjs'

/** How long any single expected event may take. */
export const WAIT_MS = 5000

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Returns p, marked as handled: a wait that a failing test left behind rejects
 * later without an unhandledRejection; awaiting p still throws.
 */
export function handled (p) {
  p.catch(() => {})
  return p
}

/** Rejects after ms with a message naming what was awaited. */
export function withTimeout (promise, ms, label) {
  let timer
  const timeout = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${label}`)), ms)
  })
  return handled(Promise.race([promise, timeout]).finally(() => clearTimeout(timer)))
}

/**
 * Resolves with the arguments (an array) of the next `event` on emitter that
 * passes filter: a pusher-js dispatcher (bind/unbind) or a Node EventEmitter
 * (on/off). Rejects after timeout with a message naming label.
 */
export function once (emitter, event, { timeout = WAIT_MS, filter = () => true, label = event } = {}) {
  const pusherStyle = typeof emitter.bind === 'function' && typeof emitter.unbind === 'function'
  return handled(new Promise((resolve, reject) => {
    const listener = (...args) => {
      if (!filter(...args)) return
      cleanup()
      resolve(args)
    }
    const cleanup = () => {
      clearTimeout(timer)
      if (pusherStyle) emitter.unbind(event, listener)
      else emitter.off(event, listener)
    }
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`timed out after ${timeout} ms waiting for ${label}`))
    }, timeout)
    if (pusherStyle) emitter.bind(event, listener)
    else emitter.on(event, listener)
  }))
}

/** An append-only record that can be waited on. */
export class Log {
  constructor (label) {
    this.label = label
    this.items = []
    this.waiters = new Set()
  }

  push (item) {
    this.items.push(item)
    for (const check of [...this.waiters]) check()
  }

  get length () { return this.items.length }

  /** Resolves with the first item at index >= from that passes pred. */
  waitFor (pred, { from = 0, timeout = WAIT_MS, label = 'a matching entry' } = {}) {
    return handled(new Promise((resolve, reject) => {
      let i = from
      const done = () => {
        clearTimeout(timer)
        this.waiters.delete(check)
      }
      const check = () => {
        for (; i < this.items.length; i++) {
          if (pred(this.items[i])) {
            done()
            resolve(this.items[i])
            return
          }
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`${this.label}: timed out after ${timeout} ms waiting for ${label}; ` +
          `recorded since: ${JSON.stringify(this.items.slice(from)).slice(0, 3000)}`))
      }, timeout)
      this.waiters.add(check)
      check()
    }))
  }

  /**
   * Resolves with the items (from index from) once test(items) is true,
   * re-checked on every push; rejects after timeout showing the items.
   */
  waitUntil (test, { from = 0, timeout = WAIT_MS, label = 'the expected entries' } = {}) {
    return handled(new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer)
        this.waiters.delete(check)
      }
      const check = () => {
        const items = this.items.slice(from)
        if (test(items)) {
          done()
          resolve(items)
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`${this.label}: timed out after ${timeout} ms waiting for ${label}; ` +
          `recorded since: ${JSON.stringify(this.items.slice(from)).slice(0, 3000)}`))
      }, timeout)
      this.waiters.add(check)
      check()
    }))
  }
}

/** Waits until fn stops throwing (every 50 ms, up to timeoutMs); rethrows its last failure. */
export async function eventually (fn, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      return await fn()
    } catch (err) {
      if (Date.now() > deadline) throw err
      await sleep(50)
    }
  }
}

/** A `pusher` server SDK client for a running herald (default app unless overridden). */
export function sdk (herald, creds = {}) {
  return new PusherServer({
    appId: APP.appId,
    key: APP.key,
    secret: APP.secret,
    ...creds,
    host: '127.0.0.1',
    port: String(herald.port),
    useTLS: false
  })
}

/** The pusher-js options for a local herald. */
export function clientOptions (herald) {
  return { cluster: 'mt1', wsHost: herald.host, wsPort: herald.port, forceTLS: false, enabledTransports: ['ws'] }
}

/** The customHandler of channelAuthorization: authorizes through the server SDK; presence as user. */
export function sdkAuthorizer (server, user) {
  return (params, callback) => {
    const presence = params.channelName.startsWith('presence-')
    callback(null, server.authorizeChannel(params.socketId, params.channelName, presence ? user : undefined))
  }
}

/** The customHandler of userAuthentication: signs userData for the socket through the server SDK. */
export function sdkAuthenticator (server, userData) {
  return (params, callback) => callback(null, server.authenticateUser(params.socketId, userData))
}

/** The close code a pusher-js connection error carries (several shapes, see pusher-js Protocol/ConnectionManager). */
export function errorCode (e) {
  return e?.data?.code ?? e?.error?.data?.code
}

/**
 * The pusher-js clients of a suite: connect opens one that records what it
 * sees; closeAll (for after/afterEach hooks) disconnects every one.
 */
export class Clients {
  constructor () {
    this.open = new Set()
  }

  /**
   * Opens a pusher-js client. It records every frame it receives (decoded, as
   * pusher-js sees them, in frames), every connection error (errors) and every
   * state it changes to (states).
   *
   * @param herald a running server
   * @param {object} [o]
   * @param {string} [o.key] app key, default the default app's
   * @param {object} [o.user] presence channel_data ({user_id, user_info})
   * @param {object} [o.userData] user_data to sign in with (signin() is not called)
   * @param {Function} [o.authorize] channelAuthorization customHandler, default sdkAuthorizer
   * @param {Function} [o.authenticate] userAuthentication customHandler, default sdkAuthenticator(userData)
   * @param {string} [o.label] name in failure messages
   * @param {object} [o.options] more pusher-js options
   */
  connect (herald, { key = APP.key, user, userData, authorize, authenticate, label, options = {}, server = sdk(herald) } = {}) {
    const pusher = new Pusher(key, {
      ...clientOptions(herald),
      channelAuthorization: { customHandler: authorize ?? sdkAuthorizer(server, user) },
      ...(authenticate || userData
        ? { userAuthentication: { customHandler: authenticate ?? sdkAuthenticator(server, userData) } }
        : {}),
      ...options
    })
    this.open.add(pusher)
    label ??= `pusher-js client${userData ? ` of ${userData.id}` : user ? ` of ${user.user_id}` : ''}`
    const c = {
      pusher,
      server,
      label,
      frames: new Log(`${label}: frames`),
      errors: new Log(`${label}: connection errors`),
      states: new Log(`${label}: states`)
    }
    pusher.connection.bind('message', (m) => c.frames.push(m))
    pusher.connection.bind('error', (e) => c.errors.push(e))
    pusher.connection.bind('state_change', ({ current }) => c.states.push(current))
    return c
  }

  closeAll () {
    for (const p of this.open) p.disconnect()
    this.open.clear()
  }
}

/**
 * Sends a request to url as the Android and Web SDKs do (JSON, with its
 * Content-Type, only when there is a body), asserts that it is answered
 * with 200, and resolves with the parsed body (undefined when empty).
 */
export async function callOK (method, url, { body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } }
  if (body !== undefined) {
    init.body = JSON.stringify(body)
    init.headers['Content-Type'] = 'application/json'
  }
  const res = await fetch(url, init)
  const text = await res.text()
  assert.equal(res.status, 200, `${method} ${url}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : undefined
}

/** Waits until c is connected; returns its socket_id. */
export async function connected (c) {
  if (c.pusher.connection.state !== 'connected') {
    await c.states.waitFor((s) => s === 'connected', {
      label: `state connected (current: ${c.pusher.connection.state}, errors: ${JSON.stringify(c.errors.items)})`
    })
  }
  return c.pusher.connection.socket_id
}

/**
 * Waits until a client that called signin() is signed in as id and returns c:
 * signinDonePromise resolved, user_data's id, and the #server-to-user-<id>
 * subscription pusher-js makes then. The server handles one connection's
 * messages in order, so once that subscription succeeded the sign-in is
 * complete on the server too (watchers told, user indexed).
 */
export async function signedIn (c, id) {
  await connected(c)
  await withTimeout(c.pusher.user.signinDonePromise, WAIT_MS, `${c.label}: pusher.user.signinDonePromise`)
  assert.equal(c.pusher.user.user_data?.id, id,
    `${c.label}: not signed in as ${id}; errors ${JSON.stringify(c.errors.items)}, frames ${JSON.stringify(c.frames.items).slice(0, 1000)}`)
  await c.frames.waitFor((f) => f.event === 'pusher_internal:subscription_succeeded' && f.channel === `#server-to-user-${id}`,
    { label: `subscription_succeeded on #server-to-user-${id}` })
  return c
}

/**
 * Opens a pusher-js client on a server (or a cluster's node, whose id names
 * it), signs it in with userData through the server SDK and waits until it is.
 */
export function signIn (clients, herald, userData, label = herald.id && `${userData.id} on ${herald.id}`) {
  const c = clients.connect(herald, { userData, label })
  c.pusher.signin()
  return signedIn(c, userData.id)
}

/** Records the events a pusher-js dispatcher (pusher.user, its watchlist) emits under names into a Log. */
export function record (dispatcher, names, label) {
  const log = new Log(label)
  for (const name of names) dispatcher.bind(name, (data) => log.push({ name, data }))
  return log
}

/** Subscribes c to name and waits for pusher:subscription_succeeded; returns the channel and the event's data. */
export function subscribe (c, name) {
  const channel = c.pusher.subscribe(name)
  return handled(new Promise((resolve, reject) => {
    const ok = (data) => { cleanup(); resolve({ channel, data }) }
    const fail = (err) => { cleanup(); reject(new Error(`${c.label}: subscription to ${name} failed: ${JSON.stringify(err)}`)) }
    const cleanup = () => {
      clearTimeout(timer)
      channel.unbind('pusher:subscription_succeeded', ok)
      channel.unbind('pusher:subscription_error', fail)
    }
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`${c.label}: no pusher:subscription_succeeded on ${name} within ${WAIT_MS} ms`))
    }, WAIT_MS)
    channel.bind('pusher:subscription_succeeded', ok)
    channel.bind('pusher:subscription_error', fail)
  }))
}

/** Sends pusher:ping and waits for the pong: every earlier message of c has been handled by then. */
export async function roundTrip (c) {
  const from = c.frames.length
  assert.ok(c.pusher.send_event('pusher:ping', {}), `${c.label}: not connected`)
  await c.frames.waitFor((f) => f.event === 'pusher:pong', { from, label: 'pusher:pong' })
}

/**
 * Starts a webhook receiver: an HTTP server on 127.0.0.1 on a port of its own.
 * Every request is recorded in requests (a Log) with its raw body and
 * headers, and checked three ways against the app's credentials: the
 * X-Pusher-Key header, the `pusher` SDK's webhook(request).isValid(), and
 * the HMAC-SHA256 of the exact body recomputed here. `respond(request)`
 * (settable at any time) chooses the status code; default 200.
 *
 * @returns {Promise<{url: string, requests: Log, respond: Function,
 *   accepted: () => object[], checkAll: () => void, close: () => Promise<void>}>}
 */
export async function startReceiver ({ key = APP.key, secret = APP.secret, respond = () => 200, label = 'webhook receiver' } = {}) {
  const verifier = new PusherServer({ appId: APP.appId, key, secret })
  const requests = new Log(`${label}: requests`)
  let n = 0
  const receiver = {
    requests,
    respond,
    /** The events of every request answered with 2xx, in arrival order. */
    accepted () {
      return requests.items.filter((r) => r.status >= 200 && r.status < 300).flatMap((r) => r.body?.events ?? [])
    },
    /** Asserts that every request so far was a signed POST of a well-formed body. */
    checkAll () {
      for (const r of requests.items) {
        const what = `${label}: request ${r.n} (${r.rawBody.slice(0, 300)})`
        assert.equal(r.method, 'POST', what)
        assert.equal(r.headers['content-type'], 'application/json', what)
        assert.equal(r.headers['x-pusher-key'], key, `${what}: X-Pusher-Key`)
        assert.match(r.headers['x-pusher-signature'] ?? '', /^[0-9a-f]{64}$/, `${what}: X-Pusher-Signature is lower-case hex`)
        assert.equal(r.hmacValid, true, `${what}: X-Pusher-Signature is not HMAC-SHA256(secret, body)`)
        assert.equal(r.sdkValid, true, `${what}: the pusher SDK's webhook().isValid() says no`)
        assert.equal(typeof r.body?.time_ms, 'number', `${what}: time_ms`)
        assert.ok(Array.isArray(r.body.events) && r.body.events.length > 0, `${what}: events`)
        assert.deepEqual(Object.keys(r.body).sort(), ['events', 'time_ms'], what)
      }
    }
  }
  const server = createServer((req, res) => {
    const chunks = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => {
      const raw = Buffer.concat(chunks)
      const rawBody = raw.toString('utf8')
      const signature = String(req.headers['x-pusher-signature'] ?? '')
      const expected = createHmac('sha256', secret).update(raw).digest('hex')
      let body
      try { body = JSON.parse(rawBody) } catch { /* recorded as undefined */ }
      const r = {
        n: ++n,
        at: Date.now(),
        method: req.method,
        url: req.url,
        headers: req.headers,
        rawBody,
        body,
        hmacValid: signature.length === expected.length && timingSafeEqual(Buffer.from(signature), Buffer.from(expected)),
        sdkValid: verifier.webhook({ headers: req.headers, rawBody }).isValid()
      }
      r.status = receiver.respond(r) ?? 200
      res.writeHead(r.status, { 'content-type': 'text/plain' })
      res.end(r.status < 300 ? 'ok' : 'failing on purpose')
      requests.push(r)
    })
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  receiver.url = `http://127.0.0.1:${server.address().port}/hook`
  receiver.close = () => new Promise((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  })
  return receiver
}

/** Debian's chromium, which the browser suites drive with playwright-core (.ci/run installs it). */
export const CHROMIUM = '/usr/bin/chromium'

/**
 * Why a browser suite skips: a message when CHROMIUM is missing, else false.
 * Under CI=true a missing browser throws instead.
 */
export function browserMissing () {
  const missing = !existsSync(CHROMIUM) && `${CHROMIUM} is not installed`
  if (missing && process.env.CI === 'true') throw new Error(`CI=true: ${missing}`)
  return missing
}

/** Headless CHROMIUM as the browser suites run it. */
export function launchChromium () {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync']
  })
}

/**
 * Serves a page from an origin of its own on 127.0.0.1: html at /, and the
 * JavaScript that script(path) returns (a string or bytes) at any other
 * path; 404 where it returns undefined. A POST is answered with the JSON of
 * what post(path, body) returns (body: the request's, as text; 404 where
 * it returns undefined), e.g. a channel authorization endpoint. Resolves
 * with {url, close}.
 */
export async function servePage (html, script = () => undefined, post = () => undefined) {
  const srv = createServer(async (req, res) => {
    const path = new URL(req.url, 'http://page').pathname
    if (req.method === 'POST') {
      const chunks = []
      for await (const chunk of req) chunks.push(chunk)
      const answer = post(path, Buffer.concat(chunks).toString('utf8'))
      if (answer === undefined) res.writeHead(404).end()
      else res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer))
      return
    }
    if (path === '/') {
      res.writeHead(200, { 'Content-Type': 'text/html' })
      res.end(html)
      return
    }
    const body = script(path)
    if (body === undefined) {
      res.writeHead(404).end()
      return
    }
    res.writeHead(200, { 'Content-Type': 'text/javascript' })
    res.end(body)
  })
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${srv.address().port}/`, close: () => new Promise((resolve) => srv.close(resolve)) }
}
