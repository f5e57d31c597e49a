// The SDK smoke of the container tests (server/container_test.go): the real
// SDKs against a herald that the Go test runs in a container, with the
// credentials it read from that herald's logs. Not a node:test suite; run
// as
//
//   node sdk-smoke.mjs channels '{"appId":…,"key":…,"secret":…,"receive":"127.0.0.1:8081","trigger":"127.0.0.1:8083"}'
//     pusher-js connects to receive and subscribes to a channel; the `pusher`
//     server SDK triggers an event on it through trigger (another node of a
//     cluster, or the same); prints {"received": <the event's data>}.
//   node sdk-smoke.mjs beams '{"instanceId":…,"secretKey":…,"addr":"127.0.0.1:8081","interest":"…"}'
//     @pusher/push-notifications-server publishes to the interest; prints
//     {"publishId": …}.
//
// Exits non-zero, with the reason on stderr, when anything fails or takes
// longer than WAIT_MS per step.

import Pusher from 'pusher-js'
import PushNotifications from '@pusher/push-notifications-server'

import { once, sdk, WAIT_MS } from './helpers.mjs'

const hostPort = (addr) => {
  const i = addr.lastIndexOf(':')
  return { host: addr.slice(0, i), port: Number(addr.slice(i + 1)) }
}

async function channels ({ appId, key, secret, receive, trigger }) {
  const at = hostPort(receive)
  const client = new Pusher(key, { cluster: 'mt1', wsHost: at.host, wsPort: at.port, forceTLS: false, enabledTransports: ['ws'] })
  try {
    const channel = client.subscribe('container-smoke')
    await once(channel, 'pusher:subscription_succeeded', { label: `the subscription on ${receive}` })
    const event = once(channel, 'smoke', { timeout: 2 * WAIT_MS, label: `the event triggered through ${trigger}` })
    const data = { sent: Date.now() }
    await sdk({ port: hostPort(trigger).port }, { appId, key, secret }).trigger('container-smoke', 'smoke', data)
    const [received] = await event
    return { received }
  } finally {
    client.disconnect()
  }
}

async function beams ({ instanceId, secretKey, addr, interest }) {
  const at = hostPort(addr)
  const client = new PushNotifications({ instanceId, secretKey, endpoint: at.host, port: at.port })
  const res = await client.publishToInterests([interest], {
    apns: { aps: { alert: { title: 'smoke', body: 'from the Beams SDK' } } },
    fcm: { notification: { title: 'smoke', body: 'from the Beams SDK' } },
    web: { notification: { title: 'smoke', body: 'from the Beams SDK' } }
  })
  return { publishId: res.publishId }
}

const [mode, json] = process.argv.slice(2)
const run = { channels, beams }[mode]
if (!run || !json) {
  console.error('usage: node sdk-smoke.mjs channels|beams JSON')
  process.exit(2)
}
try {
  console.log(JSON.stringify(await run(JSON.parse(json))))
  process.exit(0) // pusher-js may keep a timer
} catch (err) {
  console.error(err?.stack ?? err)
  process.exit(1)
}
