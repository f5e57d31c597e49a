// Recovery in a browser: pusher-js's browser build and Herald's plugin
// (gen/typescript's dist/recovery.js) loaded by a page as one ES module,
// without a bundler, in headless Chromium (Debian's chromium, driven by
// playwright-core). The page subscribes to a public, a private and a
// presence channel, authorized through an endpoint of the page's own origin
// that signs with the `pusher` server SDK, and reaches Herald through the
// test's TCP proxy, which cuts the network without the browser knowing.
// Across a 5 s cut under a steady trigger stream the page gets every event
// once and in order and pusher:recovered on each channel, while the same
// page without enableRecovery loses events; with a window shorter than the
// cut it gets pusher:recovery_failed (expired) instead, and no replay.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test recovery-browser.test.mjs
// Needs /usr/bin/chromium (.ci/run installs it): skipped when it is missing,
// failed when CI=true.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

import { APP } from './herald.mjs'
import { browserMissing, eventually, launchChromium, sdk, servePage, sleep } from './helpers.mjs'
import { CHANNELS, RECOVERY_JS, assertLost, assertRecovered, cutDuringStream, heraldBehindProxy } from './recovery-helpers.mjs'

const PUSHER_JS = readFileSync(createRequire(import.meta.url).resolve('pusher-js/dist/web/pusher.min.js'), 'utf8')

// One module: pusher-js's browser build (a UMD file, which sets self.Pusher)
// and the plugin, imported from the page's origin as any site serves them.
// The query string says where Herald is, who the user is and whether to
// enable recovery; window.got records each channel as channelRecord does.
const PAGE = `<!doctype html><title>recovery</title>
<script type="module">
import '/pusher.js'
import { enableRecovery } from '/recovery.js'
const q = new URLSearchParams(location.search)
const pusher = new Pusher(q.get('key'), {
  cluster: 'mt1', wsHost: q.get('host'), wsPort: Number(q.get('port')), forceTLS: false,
  enabledTransports: ['ws'], enableStats: false,
  // A dead network is noticed within about two seconds.
  activityTimeout: 1000, pongTimeout: 1000,
  channelAuthorization: { endpoint: '/auth', transport: 'ajax', params: { user: q.get('user') } }
})
if (q.get('plugin') === '1') enableRecovery(pusher)
window.pusher = pusher
window.got = {}
window.subscribed = {}
for (const name of q.get('channels').split(',')) {
  const g = window.got[name] = { ticks: [], recovered: [], failed: [] }
  window.subscribed[name] = 0
  const channel = pusher.subscribe(name)
  channel.bind('pusher:subscription_succeeded', () => window.subscribed[name]++)
  channel.bind('tick', (d) => g.ticks.push(d.i))
  channel.bind('pusher:recovered', (d) => g.recovered.push(d))
  channel.bind('pusher:recovery_failed', (d) => g.failed.push(d))
}
</script>`

const missing = browserMissing()

describe('recovery in Chromium: pusher-js\'s browser build and the plugin as one ES module', { skip: missing }, () => {
  let browser, pages
  let current // the running suite's {herald, proxy}, which the authorization endpoint signs for
  before(async () => {
    pages = await servePage(PAGE,
      (path) => ({ '/pusher.js': PUSHER_JS, '/recovery.js': RECOVERY_JS })[path],
      (path, body) => {
        if (path !== '/auth') return undefined
        const p = new URLSearchParams(body)
        const channel = p.get('channel_name')
        return sdk(current.herald).authorizeChannel(p.get('socket_id'), channel,
          channel.startsWith('presence-') ? { user_id: p.get('user'), user_info: {} } : undefined)
      })
    browser = await launchChromium()
  })
  after(async () => {
    await browser?.close()
    await pages?.close()
  })

  /**
   * Opens the page (in a browser context of its own) as user, through
   * proxy, with the plugin when plugin; waits until it is subscribed to
   * every channel. Returns {page, socket, got()}.
   */
  async function openPage (proxy, user, plugin) {
    const page = await browser.newPage()
    const problems = []
    page.on('pageerror', (e) => problems.push(e.message))
    const q = new URLSearchParams({ key: APP.key, host: proxy.host, port: proxy.port, user, plugin: plugin ? '1' : '0', channels: CHANNELS.join(',') })
    await page.goto(`${pages.url}?${q}`)
    try {
      await page.waitForFunction((n) => Object.values(window.subscribed ?? {}).filter((k) => k > 0).length === n, CHANNELS.length, { timeout: 10_000 })
    } catch (err) {
      throw new Error(`${user}: not subscribed: ${err.message}; page errors: ${problems.join('; ')}`)
    }
    return {
      page,
      label: user,
      socket: await page.evaluate(() => window.pusher.connection.socket_id),
      got: () => page.evaluate(() => window.got)
    }
  }

  /** Waits until p's page is connected again on a new connection. */
  async function reconnected (p) {
    await eventually(async () => {
      const { state, socket } = await p.page.evaluate(() => ({ state: window.pusher.connection.state, socket: window.pusher.connection.socket_id }))
      assert.notEqual(socket, p.socket, `${p.label}: still on the old connection (${state})`)
      assert.equal(state, 'connected', p.label)
      p.socket = socket
    }, 20_000)
  }

  describe('within the window', () => {
    const s = heraldBehindProxy({ HERALD_APP_HISTORY_EVENTS: '1000', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '2m' })
    before(() => { current = s })

    it('delivers every event once and in order across a 5 s cut, then pusher:recovered on each channel; the page without the plugin loses events', async () => {
      const withPlugin = await openPage(s.proxy, 'with-plugin', true)
      const without = await openPage(s.proxy, 'without-plugin', false)
      const sent = await cutDuringStream(s.herald, s.proxy, 5000, async () => {
        await reconnected(withPlugin)
        await reconnected(without)
      })
      await assertRecovered(withPlugin.got, sent, 'the page with the plugin')
      assertLost(await without.got(), sent, 'the page without the plugin')
      await withPlugin.page.close()
      await without.page.close()
    })
  })

  describe('past the window (HERALD_APP_RECOVERY_WINDOW=3s)', () => {
    const s = heraldBehindProxy({ HERALD_APP_HISTORY_EVENTS: '1000', HERALD_APP_HISTORY_TTL: '10m', HERALD_APP_RECOVERY_WINDOW: '3s' })
    before(() => { current = s })

    it('a 5 s cut gives pusher:recovery_failed (expired) on each channel and replays nothing; new events arrive', async () => {
      const p = await openPage(s.proxy, 'expired', true)
      s.proxy.cut()
      await sdk(s.herald).trigger(CHANNELS, 'tick', { i: 0 })
      await sleep(5000)
      s.proxy.restore()
      await reconnected(p)
      const g = await eventually(async () => {
        const g = await p.got()
        for (const name of CHANNELS) assert.equal(g[name].failed.length, 1, `${name}: ${JSON.stringify(g[name])}`)
        return g
      }, 10_000)
      for (const name of CHANNELS) {
        assert.deepEqual(g[name].failed[0], { reason: 'expired' }, name)
        assert.deepEqual(g[name].ticks, [], `${name}: a replay past the window`)
        assert.deepEqual(g[name].recovered, [], name)
      }
      await sdk(s.herald).trigger(CHANNELS, 'tick', { i: 1 })
      await eventually(async () => {
        const g = await p.got()
        for (const name of CHANNELS) assert.deepEqual(g[name].ticks, [1], name)
      })
      await p.page.close()
    })
  })
})
