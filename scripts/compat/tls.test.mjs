// Built-in TLS (HERALD_TLS_CERT_FILE / HERALD_TLS_KEY_FILE) with the real
// clients: pusher-js connects over wss and receives an event the `pusher`
// server SDK triggers over https.
//
// The certificate is self-signed for 127.0.0.1, made by the Go distribution's
// crypto/tls/generate_cert.go (Node can make keys but not certificates).
// pusher-js in Node opens its WebSocket with the default CA store and no
// option to add one, so, as a user trusting a private CA would, its client
// runs in a child process started with NODE_EXTRA_CA_CERTS (which Node reads
// only at start). The server SDK takes an https.Agent with the CA.
//
// Run: cd scripts/compat && HERALD_BIN=$PWD/herald node --test --test-concurrency=1 tls.test.mjs

import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { Agent } from 'node:https'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import PusherServer from 'pusher'

import { APP, startHerald, tempDir } from './herald.mjs'
import { Log, eventually } from './helpers.mjs'

const run = promisify(execFile)
const compatDir = fileURLToPath(new URL('.', import.meta.url))

/** Writes cert.pem and key.pem for 127.0.0.1 into dir, self-signed (its own CA). */
async function selfSignedCert (dir) {
  const { stdout: goroot } = await run('go', ['env', 'GOROOT'])
  const generator = join(goroot.trim(), 'src', 'crypto', 'tls', 'generate_cert.go')
  await run('go', ['run', generator, '--host', '127.0.0.1', '--ca', '--ecdsa-curve', 'P256', '--duration', '1h'],
    { cwd: dir, timeout: 120_000 })
  return { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') }
}

// The pusher-js client of the child process: prints what it sees as JSON
// lines, subscribes to `news`, and exits once it has received `greeting`.
const CLIENT = `
import Pusher from 'pusher-js'
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n')
const pusher = new Pusher(process.env.KEY, {
  cluster: 'mt1', wsHost: '127.0.0.1', wssPort: Number(process.env.PORT), forceTLS: true, enabledTransports: ['ws']
})
pusher.connection.bind('state_change', ({ current }) => say({ state: current }))
pusher.connection.bind('error', (e) => say({ error: e?.error?.type ?? e?.type ?? String(e) }))
const channel = pusher.subscribe('news')
channel.bind('pusher:subscription_succeeded', () => say({ subscribed: 'news' }))
channel.bind('greeting', (data) => {
  say({ event: 'greeting', data, encrypted: pusher.connection.isUsingTLS() })
  pusher.disconnect()
  process.exit(0)
})
`

/** Starts the pusher-js client with env; its JSON lines go to a Log. */
function client (env) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', CLIENT], {
    cwd: compatDir, // resolves pusher-js from node_modules
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const log = new Log('pusher-js over wss')
  const stderr = []
  child.stderr.setEncoding('utf8').on('data', (s) => stderr.push(s))
  createInterface({ input: child.stdout }).on('line', (line) => {
    try { log.push(JSON.parse(line)) } catch { log.push({ output: line }) }
  })
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)))
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGKILL')
    await exited
  }
  return { log, exited, stop, stderr: () => stderr.join('') }
}

describe('built-in TLS', () => {
  let herald, files, ca

  before(async () => {
    files = await selfSignedCert(tempDir())
    ca = readFileSync(files.cert)
    herald = await startHerald({ env: { HERALD_TLS_CERT_FILE: files.cert, HERALD_TLS_KEY_FILE: files.key } })
    assert.equal(herald.tls, true, 'herald logs that it listens with TLS')
  })

  after(async () => { await herald?.stop() })

  it('pusher-js connects over wss and receives an event triggered over https', async () => {
    const c = client({ NODE_EXTRA_CA_CERTS: files.cert, KEY: APP.key, PORT: String(herald.port) })
    try {
      await c.log.waitFor((e) => e.subscribed === 'news', { label: 'the subscription to news' })
      const server = new PusherServer({
        ...APP, host: '127.0.0.1', port: String(herald.port), useTLS: true, agent: new Agent({ ca })
      })
      const res = await server.trigger('news', 'greeting', { hello: 'wss' })
      assert.equal(res.status, 200)
      const got = await c.log.waitFor((e) => e.event === 'greeting', { label: 'the greeting' })
      assert.deepEqual(got, { event: 'greeting', data: { hello: 'wss' }, encrypted: true })
      assert.equal(await c.exited, 0, c.stderr())
    } finally {
      await c.stop()
    }
  })

  it('pusher-js without the CA does not connect: the certificate is checked', async () => {
    const from = herald.logs().length
    const c = client({ NODE_EXTRA_CA_CERTS: '', KEY: APP.key, PORT: String(herald.port) })
    try {
      // pusher-js reports no error, it retries (and calls itself unavailable
      // after 10 s); the server sees the handshakes it refused.
      await eventually(() => assert.match(herald.logs().slice(from), /TLS handshake error from 127\.0\.0\.1/))
      assert.ok(!c.log.items.some((e) => e.state === 'connected' || e.subscribed), 'connected without trusting the certificate')
    } finally {
      await c.stop()
    }
  })
})
