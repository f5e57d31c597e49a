// pusher-js's browser build in headless Chromium (Debian's chromium, driven by
// playwright-core) on a page without WebSocket: pusher-js falls back by itself
// to xhr_streaming (and, forced, to xhr_polling) against the real herald
// binary, from another origin, so the CORS preflight is real too. The page
// authorizes channels and signs in through functions the test exposes, which
// sign with the `pusher` server SDK; the SDK triggers, sends to the user and
// terminates its connections; a pusher-js client in Node over a WebSocket is
// the other end of client events.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1 browser-xhr.test.mjs
// Needs /usr/bin/chromium (.ci/run installs it): skipped when it is missing,
// failed when CI=true.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { createRequire } from 'node:module'
import PusherServer from 'pusher'

import { APP, startHerald, freshDB, freePort } from './herald.mjs'
import { Clients, browserMissing, connected, launchChromium, servePage, subscribe, once } from './helpers.mjs'

const WAIT_MS = 10_000
const MASTER_KEY = randomBytes(32).toString('base64')
// The build with encryption: the plain one refuses private-encrypted- channels.
const PUSHER_JS = readFileSync(createRequire(import.meta.url).resolve('pusher-js/dist/web/pusher-with-encryption.min.js'), 'utf8')

const missing = browserMissing()

function sdk (herald) {
  return new PusherServer({ ...APP, host: '127.0.0.1', port: String(herald.port), useTLS: false, encryptionMasterKeyBase64: MASTER_KEY })
}

describe('pusher-js in Chromium without WebSocket', { skip: missing }, () => {
  const clients = new Clients()
  let herald, browser, pages, addr
  const db = freshDB()

  before(async () => {
    addr = `127.0.0.1:${await freePort()}`
    herald = await startHerald({ db, env: { HERALD_ADDR: addr } })
    // The page and pusher-js, from an origin of their own.
    pages = await servePage('<!doctype html><title>fallback</title><script src="/pusher.js"></script>',
      (path) => path === '/pusher.js' ? PUSHER_JS : undefined)
    browser = await launchChromium()
  })
  after(async () => {
    clients.closeAll()
    await browser?.close()
    await pages?.close()
    await herald?.stop()
  })

  /**
   * Opens the page with WebSocket removed and a pusher-js client in it
   * (window.client) for user; transports: enabledTransports, or pusher-js's
   * defaults. window.seen records every event pusher-js hands out as
   * "channel|event|data", window.errors the connection errors' codes.
   */
  async function openPage (user, transports) {
    const page = await browser.newPage()
    await page.addInitScript(() => { delete window.WebSocket })
    await page.exposeFunction('authorizeChannel', (socketId, channel) =>
      sdk(herald).authorizeChannel(socketId, channel, channel.startsWith('presence-') ? { user_id: user.id } : undefined))
    await page.exposeFunction('authenticateUser', (socketId) => sdk(herald).authenticateUser(socketId, user))
    await page.goto(pages.url)
    assert.equal(await page.evaluate(() => typeof window.WebSocket), 'undefined')
    await page.evaluate(({ port, host, key, transports }) => {
      window.seen = []
      window.errors = []
      const client = new window.Pusher(key, {
        cluster: 'mt1',
        wsHost: host,
        wsPort: port,
        httpHost: host,
        httpPort: port,
        forceTLS: false,
        enableStats: false,
        ...(transports ? { enabledTransports: transports } : {}),
        channelAuthorization: {
          customHandler: (p, cb) => window.authorizeChannel(p.socketId, p.channelName).then((a) => cb(null, a), (e) => cb(e, null))
        },
        userAuthentication: {
          customHandler: (p, cb) => window.authenticateUser(p.socketId).then((a) => cb(null, a), (e) => cb(e, null))
        }
      })
      client.bind_global((event, data) => window.seen.push(`|${event}|${JSON.stringify(data)}`))
      client.user.bind_global((event, data) => window.seen.push(`user|${event}|${JSON.stringify(data)}`))
      client.connection.bind('error', (e) => window.errors.push(e?.data?.code ?? e?.error?.data?.code))
      window.client = client
    }, { port: herald.port, host: herald.host, key: APP.key, transports })
    return page
  }

  /** Waits until the page's client has seen an entry of window.seen that includes text. */
  function sawIn (page, text) {
    return until(page, (t) => window.seen.some((s) => s.includes(t)), text, `an event with ${text}`)
  }

  /** Waits until fn(arg) holds in the page; the failure shows what the page saw. */
  async function until (page, fn, arg, label, timeout = WAIT_MS) {
    try {
      await page.waitForFunction(fn, arg, { timeout })
    } catch (err) {
      const state = await page.evaluate(() => ({ state: window.client.connection.state, errors: window.errors, seen: window.seen.slice(-10) }))
      throw new Error(`${err.message}: waiting for ${label}; page: ${JSON.stringify(state)}`)
    }
  }

  /** Subscribes the page's client to channel, recording its events, and waits for subscription_succeeded. */
  async function subscribeIn (page, channel) {
    await page.evaluate((name) => {
      window.client.subscribe(name).bind_global((event, data) => window.seen.push(`${name}|${event}|${JSON.stringify(data)}`))
    }, channel)
    await sawIn(page, `${channel}|pusher:subscription_succeeded|`)
  }

  for (const [name, transports, want] of [['its own fallback', undefined, 'xhr_streaming'], ['xhr_polling', ['xhr_polling'], 'xhr_polling']]) {
    it(`${name}: every channel kind, client events both ways, sign-in and server-to-user, then 4009`, async () => {
      const id = `browser-${want}`
      const page = await openPage({ id, user_info: { via: want } }, transports)
      await until(page, () => window.client.connection.state === 'connected', null, 'state connected', 30_000)
      assert.equal(await page.evaluate(() => window.client.connection.connection.transport.name), want)
      const server = sdk(herald)

      await server.trigger(`cache-${want}`, 'last', { cached: true })
      for (const ch of [`public-${want}`, `private-${want}`, `private-encrypted-${want}`, `presence-${want}`, `cache-${want}`]) {
        await subscribeIn(page, ch)
      }
      await sawIn(page, `cache-${want}|last|{"cached":true}`)
      for (const ch of [`public-${want}`, `private-${want}`, `private-encrypted-${want}`, `presence-${want}`]) {
        await server.trigger(ch, 'hello', { to: ch, text: 'é ✓ "q"' })
        await sawIn(page, `${ch}|hello|{"to":"${ch}","text":"é ✓ \\"q\\""}`)
      }

      // Client events with a pusher-js client over a WebSocket, both ways.
      const ws = clients.connect(herald, { server, user: { user_id: 'node-ws' } })
      const { channel } = await subscribe(ws, `presence-${want}`)
      await sawIn(page, `presence-${want}|pusher:member_added|{"id":"node-ws"`)
      const fromBrowser = once(channel, 'client-ping')
      await page.evaluate((ch) => window.client.channel(ch).trigger('client-ping', { from: 'browser' }), `presence-${want}`)
      assert.deepEqual(await fromBrowser, [{ from: 'browser' }, { user_id: id }])
      channel.trigger('client-pong', { from: 'node' })
      await sawIn(page, `presence-${want}|client-pong|{"from":"node"}`)

      await page.evaluate(() => window.client.signin())
      await sawIn(page, '|pusher:signin_success|')
      await until(page, () => window.client.user.serverToUserChannel?.subscribed, null, 'the server-to-user channel')
      await server.sendToUser(id, 'note', { n: 1 })
      await sawIn(page, 'user|note|{"n":1}')

      await server.terminateUserConnections(id)
      await until(page, () => window.errors.includes(4009), null, 'an error with code 4009')
      await until(page, () => window.client.connection.state === 'disconnected', null, 'state disconnected')
      assert.equal(await connected(ws), ws.pusher.connection.socket_id, 'the WebSocket client stays')
      clients.closeAll()
      await page.close()
    })
  }

  it('reconnects by itself after the server restarts, over the fallback, and subscribes again', async () => {
    const page = await openPage({ id: 'restart' })
    await until(page, () => window.client.connection.state === 'connected', null, 'state connected', 30_000)
    await subscribeIn(page, 'public-restart')
    const first = await page.evaluate(() => window.client.connection.socket_id)
    await herald.stop()
    await until(page, () => window.errors.includes(4200), null, 'an error with code 4200')
    const before = await page.evaluate(() => window.seen.length)
    herald = await startHerald({ db, env: { HERALD_ADDR: addr } })
    await until(page, (from) => window.seen.slice(from).some((s) => s.startsWith('public-restart|pusher:subscription_succeeded')),
      before, 'subscribed again after the restart', 60_000)
    assert.notEqual(await page.evaluate(() => window.client.connection.socket_id), first)
    assert.match(await page.evaluate(() => window.client.connection.connection.transport.name), /^xhr_/)
    await sdk(herald).trigger('public-restart', 'back', { ok: true })
    await sawIn(page, 'public-restart|back|{"ok":true}')
    await page.close()
  })
})
