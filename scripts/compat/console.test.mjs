// The debug console in a real browser: headless Chromium (Debian's chromium,
// driven by playwright-core) opens /console on the real herald binary, logs in
// with the admin token, and must show what a pusher-js client and the `pusher`
// server SDK do: the connection in the live count and a triggered event in the
// live stream. /metrics must report the same counts, and an app created with
// the CLI must be listed. A publish made with the Beams server SDK must show in
// the instance's recent publishes with its counts. The admin token must never
// be in a URL the page requests: the event stream opens with a single-use
// ticket.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1
// Needs /usr/bin/chromium (.ci/run installs it); skipped when it is missing.

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import Pusher from 'pusher-js'
import PusherServer from 'pusher'
import PushNotifications from '@pusher/push-notifications-server'

import { APP, startHerald, heraldCli, freshDB } from './herald.mjs'
import { CHROMIUM, launchChromium } from './helpers.mjs'

const TOKEN = 'console-test-token-0123456789'
/** How long any single expected change may take to show. */
const WAIT_MS = 10_000

/** The value of the series of metric name with the labels, from the text format. */
async function metric (herald, name, labels) {
  const res = await fetch(`http://${herald.host}:${herald.port}/metrics`)
  assert.equal(res.status, 200)
  const text = await res.text()
  const want = labels ? `${name}{${labels}}` : name
  for (const line of text.split('\n')) {
    const i = line.lastIndexOf(' ')
    if (line.slice(0, i) === want) return Number(line.slice(i + 1))
  }
  return undefined
}

/** Waits until the page keeps (shown or not) an event of the channel with the name. */
async function keeps (page, channel, name) {
  await page.waitForFunction(([c, n]) => events.some((e) => e.channel === c && e.event === n), [channel, name], { timeout: WAIT_MS })
}

describe('debug console', { skip: !existsSync(CHROMIUM) && `${CHROMIUM} is not installed` }, () => {
  let herald, browser, page, client
  const db = freshDB()
  /** Every URL the page requested. */
  const urls = []

  before(async () => {
    // A second app, managed from the CLI on the same database file.
    await heraldCli('apps', 'create', '--db', db, '--id', 'second', '--key', 'second-key', '--secret', 'second-secret')
    herald = await startHerald({ db, env: { HERALD_ADMIN_TOKEN: TOKEN, HERALD_APP_HISTORY_EVENTS: '50' } })
    browser = await launchChromium()
    page = await browser.newPage()
    page.on('request', (req) => urls.push(req.url()))
  })

  after(async () => {
    client?.disconnect()
    await browser?.close()
    await herald?.stop()
  })

  it('refuses a wrong token', async () => {
    await page.goto(`http://${herald.host}:${herald.port}/console`)
    await page.fill('#token', 'wrong-token-wrong-token')
    await page.click('#login button[type=submit]')
    await page.locator('#login-error').filter({ hasText: 'Wrong token' }).waitFor({ timeout: WAIT_MS })
    assert.equal(await page.locator('#main').isHidden(), true)
  })

  it('logs in and lists the apps, the one created with the CLI included', async () => {
    await page.fill('#token', TOKEN)
    await page.click('#login button[type=submit]')
    await page.locator('#main').waitFor({ state: 'visible', timeout: WAIT_MS })
    const apps = await page.locator('#app option').evaluateAll((opts) => opts.map((o) => o.value))
    assert.deepEqual(apps.sort(), [APP.appId, 'second'].sort())
    await page.selectOption('#app', APP.appId)
    await page.locator('#status').filter({ hasText: 'live' }).waitFor({ timeout: WAIT_MS })
  })

  it('shows a pusher-js connection and its channel, as /metrics does', async () => {
    client = new Pusher(APP.key, {
      cluster: 'mt1', wsHost: herald.host, wsPort: herald.port, forceTLS: false, enabledTransports: ['ws']
    })
    const channel = client.subscribe('news')
    await new Promise((resolve, reject) => {
      channel.bind('pusher:subscription_succeeded', resolve)
      channel.bind('pusher:subscription_error', reject)
    })
    await page.locator('#connections').filter({ hasText: /^1$/ }).waitFor({ timeout: WAIT_MS })
    await page.locator('#channels tr[data-channel="news"]').waitFor({ timeout: WAIT_MS })
    assert.equal(await page.locator('#channels tr[data-channel="news"] td').nth(1).textContent(), '1')

    assert.equal(await metric(herald, 'herald_connections', `app_id="${APP.appId}"`), 1)
    assert.equal(await metric(herald, 'herald_channels', `app_id="${APP.appId}"`), 1)
    assert.equal(await metric(herald, 'herald_subscriptions', `app_id="${APP.appId}"`), 1)
  })

  it('streams an event triggered through the HTTP API as it happens', async () => {
    const received = new Promise((resolve) => client.channel('news').bind('breaking', resolve))
    const server = new PusherServer({ appId: APP.appId, key: APP.key, secret: APP.secret, host: herald.host, port: String(herald.port), useTLS: false })
    await server.trigger('news', 'breaking', { headline: 'console sees this' })
    assert.deepEqual(await received, { headline: 'console sees this' })

    const entry = page.locator('#events li[data-kind="trigger"]').filter({ hasText: 'breaking' })
    await entry.waitFor({ timeout: WAIT_MS })
    const text = await entry.textContent()
    assert.match(text, /news/)
    assert.match(text, /console sees this/)
    // The channel_occupied of the subscription is in the stream too.
    await page.locator('#events li[data-kind="channel_occupied"]').filter({ hasText: 'news' }).waitFor({ timeout: WAIT_MS })

    assert.equal(await metric(herald, 'herald_events_triggered_total', `app_id="${APP.appId}"`), 1)
  })

  it('shows a channel\'s history when its row is clicked', async () => {
    await page.click('#channels tr[data-channel="news"] td')
    const row = page.locator('#history-events tbody tr').filter({ hasText: 'console sees this' })
    await row.waitFor({ timeout: WAIT_MS })
    assert.equal(await row.locator('td').nth(2).textContent(), 'breaking')
    assert.match(await row.locator('td').nth(1).textContent(), /^\d+-\d+$/)
    await page.locator('#history-result').filter({ hasText: '1 event of news.' }).waitFor({ timeout: WAIT_MS })
    // A channel nothing was triggered on has none; a bad name says why.
    await page.fill('#history-channel', 'quiet')
    await page.click('#channel-history button[type=submit]')
    await page.locator('#history-result').filter({ hasText: '0 events of quiet.' }).waitFor({ timeout: WAIT_MS })
    await page.fill('#history-channel', 'no spaces')
    await page.click('#channel-history button[type=submit]')
    await page.locator('#history-result.error').filter({ hasText: 'invalid_channel_name' }).waitFor({ timeout: WAIT_MS })
  })

  it('charts the triggers: the messages chart shows a non-zero series', async () => {
    // The history takes a point every 5 s; the page reads it as often.
    const triggered = page.locator('#chart-messages .legend-item[data-series="triggered"]')
    await page.waitForFunction(() => {
      const item = document.querySelector('#chart-messages .legend-item[data-series="triggered"]')
      return item && Number(item.dataset.peak) > 0
    }, null, { timeout: 3 * WAIT_MS })
    assert.match(await triggered.textContent(), /triggered .*\/s \(peak [0-9.]+\/s\)/)
    // The line has a point above the baseline.
    const ys = await page.locator('#chart-messages polyline[data-series="triggered"]').evaluate((l) =>
      l.getAttribute('points').split(' ').map((p) => Number(p.split(',')[1])))
    assert.ok(Math.min(...ys) < 100, `the triggered line stays flat: ${ys.slice(-5)}`)
    await page.locator('#chart-connections .legend-item[data-series="connections"][data-last="1"]').waitFor({ timeout: 3 * WAIT_MS })
  })

  it('sends an event from the event creator to a pusher-js client', async () => {
    const received = new Promise((resolve) => client.channel('news').bind('from-console', resolve))
    await page.fill('#creator-channels', 'news')
    await page.fill('#creator-event', 'from-console')
    await page.fill('#creator-data', '{"sent":"by the console"}')
    await page.click('#creator button[type=submit]')
    assert.deepEqual(await received, { sent: 'by the console' })
    await page.locator('#creator-result').filter({ hasText: 'Sent to news' }).waitFor({ timeout: WAIT_MS })
    // It shows in the live list like any trigger.
    await page.locator('#events li[data-kind="trigger"]').filter({ hasText: 'from-console' }).waitFor({ timeout: WAIT_MS })

    // The Channels API's limits answer, and the form shows their error.
    await page.fill('#creator-event', 'pusher:reserved')
    await page.click('#creator button[type=submit]')
    await page.locator('#creator-result.error').filter({ hasText: 'invalid_event_name' }).waitFor({ timeout: WAIT_MS })
    await page.fill('#creator-event', 'from-console')
    await page.fill('#creator-data', '{not json')
    await page.click('#creator button[type=submit]')
    await page.locator('#creator-result.error').filter({ hasText: 'not JSON' }).waitFor({ timeout: WAIT_MS })
  })

  it('filters the live list by channel prefix, event name and kind, and pauses it', async () => {
    const server = new PusherServer({ appId: APP.appId, key: APP.key, secret: APP.secret, host: herald.host, port: String(herald.port), useTLS: false })
    await page.fill('#filter-channel', 'sports')
    await server.trigger('sports-1', 'goal', { score: 1 })
    await server.trigger('news', 'goal', { score: 2 })
    await page.locator('#events li[data-channel="sports-1"]').filter({ hasText: 'goal' }).waitFor({ timeout: WAIT_MS })
    // Once the news event is among those the page keeps, the filter must
    // have kept it out of view.
    await keeps(page, 'news', 'goal')
    const channels = await page.locator('#events li').evaluateAll((lis) => lis.map((li) => li.dataset.channel))
    assert.deepEqual([...new Set(channels)], ['sports-1'])
    // Cleared, the filter shows the news event again.
    await page.fill('#filter-channel', '')
    await page.locator('#events li[data-channel="news"]').filter({ hasText: 'score":2' }).waitFor({ timeout: WAIT_MS })

    // By kind: subscribe events only.
    await page.selectOption('#filter-kind', 'subscribe')
    const kinds = await page.locator('#events li').evaluateAll((lis) => lis.map((li) => li.dataset.kind))
    assert.ok(kinds.length > 0 && kinds.every((k) => ['channel_occupied', 'channel_vacated', 'member_added', 'member_removed', 'subscription_count'].includes(k)), `kinds ${kinds}`)
    await page.selectOption('#filter-kind', '')
    // By event name.
    await page.fill('#filter-event', 'goal')
    const names = await page.locator('#events li').allTextContents()
    assert.ok(names.length === 2 && names.every((t) => t.includes('goal')), `rows ${names}`)
    await page.fill('#filter-event', '')

    // Paused, new events are kept but not shown until resumed; the count
    // says how many of them the filter lets through.
    await page.fill('#filter-event', 'while-paused')
    await page.click('#pause')
    await server.trigger('news', 'while-paused', {})
    await keeps(page, 'news', 'while-paused')
    await page.locator('#events-count').filter({ hasText: /^1 of \d+ kept, paused$/ }).waitFor({ timeout: WAIT_MS })
    assert.equal(await page.locator('#events li').filter({ hasText: 'while-paused' }).count(), 0)
    await page.click('#pause')
    await page.locator('#events li').filter({ hasText: 'while-paused' }).waitFor({ timeout: WAIT_MS })
    await page.fill('#filter-event', '')

    // The cap on rows kept.
    await page.fill('#max-rows', '10')
    await page.waitForFunction(() => document.querySelectorAll('#events li').length <= 10, null, { timeout: WAIT_MS })
    await page.fill('#max-rows', '500')
  })

  it('opens the stream with a ticket, never with the token in a URL', async () => {
    const streams = urls.filter((u) => new URL(u).pathname === '/console/events')
    assert.ok(streams.length > 0, 'the page opened no event stream')
    for (const u of streams) assert.match(new URL(u).searchParams.get('ticket') ?? '', /^[A-Za-z0-9_-]{43}$/)
    for (const u of urls) {
      assert.ok(!u.includes(TOKEN) && !u.includes(encodeURIComponent(TOKEN)), `the token is in ${u}`)
    }

    const base = `http://${herald.host}:${herald.port}`
    const old = await fetch(`${base}/console/events?app=${APP.appId}&token=${TOKEN}`)
    assert.equal(old.status, 401)
    const res = await fetch(`${base}/console/tickets`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}` } })
    assert.equal(res.status, 200)
    const { ticket } = await res.json()
    const ac = new AbortController()
    const first = await fetch(`${base}/console/events?app=${APP.appId}&ticket=${ticket}`, { signal: ac.signal })
    assert.equal(first.status, 200)
    ac.abort()
    const again = await fetch(`${base}/console/events?app=${APP.appId}&ticket=${ticket}`)
    assert.equal(again.status, 401)
  })

  it('lists the default Push instance', async () => {
    await page.locator('#instances tbody tr').first().waitFor({ timeout: WAIT_MS })
  })

  it('shows a publish made with the Beams server SDK, with its counts', async () => {
    const base = `http://${herald.host}:${herald.port}`
    const res = await fetch(`${base}/admin/v1/instances`, { headers: { Authorization: `Bearer ${TOKEN}` } })
    assert.equal(res.status, 200)
    const [instance] = (await res.json()).instances
    // One FCM device on the interest; the default instance has no FCM
    // credentials, so its notification fails.
    const devices = `${base}/device_api/v1/instances/${instance.id}/devices/fcm`
    const reg = await fetch(devices, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: 'console-fcm-token' }) })
    assert.equal(reg.status, 200)
    const { id: deviceId } = await reg.json()
    const put = await fetch(`${devices}/${deviceId}/interests`, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ interests: ['console'] }) })
    assert.equal(put.status, 200)

    const beams = new PushNotifications({ instanceId: instance.id, secretKey: instance.secretKey, endpoint: herald.host, port: herald.port })
    const { publishId } = await beams.publishToInterests(['console'], { fcm: { notification: { title: 'Hello', body: 'console' } } })
    assert.match(publishId, /^pubid-/)
    // The device reports it delivered.
    const report = await fetch(`${base}/reporting_api/v2/instances/${instance.id}/events`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ event: 'delivery', publishId, deviceId, timestampSecs: Math.floor(Date.now() / 1000) })
    })
    assert.equal(report.status, 200)

    await page.selectOption('#instance', instance.id)
    const row = page.locator(`#publishes tr[data-publish="${publishId}"][data-state="done"]`)
    await row.waitFor({ timeout: WAIT_MS })
    const cells = await row.locator('td').allTextContents()
    // Publish, targets, state, targeted, sent, failed, delivered, opened, created, sent by.
    assert.deepEqual(cells.slice(0, 8), [publishId, '1 interests', 'done', '1', '0', '1', '1', '0'])
    // One node alone on its SQLite file, named "local", sent its one page.
    assert.equal(cells[9], 'local 100 % (1 page)')

    // The instance's deliveries chart shows the failed one.
    await page.waitForFunction(() => {
      const item = document.querySelector('#chart-push .legend-item[data-series="failed"]')
      return item && Number(item.dataset.peak) > 0
    }, null, { timeout: 3 * WAIT_MS })

    assert.equal(await metric(herald, 'herald_push_publishes_total'), 1)
    assert.equal(await metric(herald, 'herald_push_deliveries_total', 'gateway="fcm",outcome="failed"'), 1)
    assert.equal(await metric(herald, 'herald_push_dispatch_queue_depth'), 0)
  })
})
