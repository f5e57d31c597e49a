// The fake push gateways of server/push/pushtest, run as a separate program
// (server/push/pushtest/cmd/fakegateways): APNs over TLS + HTTP/2 with a
// checked provider token, FCM HTTP v1 behind an OAuth2 token endpoint, Web
// Push decrypted with keys the fake owns. Its control API shows what each
// gateway received.
//
//   const fakes = await startFakes()
//   await startHerald({ env: { ...fakes.heraldEnv(), HERALD_INSTANCE_ID: id, ... } })
//   const messages = await fakes.control('GET', '/messages')
//   await fakes.stop()

import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

import { tempDir } from './herald.mjs'

/** The fakegateways binary: FAKEGW_BIN, or built now with the Go toolchain. */
export function fakeGatewaysBin () {
  if (process.env.FAKEGW_BIN) {
    if (!existsSync(process.env.FAKEGW_BIN)) throw new Error(`FAKEGW_BIN=${process.env.FAKEGW_BIN} does not exist`)
    return process.env.FAKEGW_BIN
  }
  const bin = join(tempDir(), 'fakegateways')
  const root = fileURLToPath(new URL('../..', import.meta.url))
  execFileSync('go', ['build', '-o', bin, './server/push/pushtest/cmd/fakegateways'], { cwd: root, stdio: 'inherit' })
  return bin
}

/**
 * Starts the fake gateways. Resolves with their configuration (cfg, as the
 * program prints it), control(method, path, body) (a call of the control
 * API that must answer 200; resolves with its JSON), heraldEnv() (the
 * environment that points a herald's default instance at them) and stop().
 */
export async function startFakes () {
  const child = spawn(fakeGatewaysBin(), [], { stdio: ['pipe', 'pipe', 'inherit'] })
  process.on('exit', () => { try { child.kill('SIGKILL') } catch { /* gone */ } })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const cfg = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('fakegateways printed nothing within 10 s')), 10_000)
    child.once('error', reject)
    exited.then((code) => reject(new Error(`fakegateways exited with ${code}`)))
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer)
      resolve(JSON.parse(line))
    })
  })
  const control = async (method, path, body) => {
    const res = await fetch(cfg.control + path, { method, body: body && JSON.stringify(body) })
    assert.equal(res.status, 200, `${method} ${path}: ${await res.clone().text()}`)
    return res.json()
  }
  const heraldEnv = () => ({
    HERALD_APNS_KEY_FILE: cfg.apnsKeyFile,
    HERALD_APNS_KEY_ID: cfg.apnsKeyId,
    HERALD_APNS_TEAM_ID: cfg.apnsTeamId,
    HERALD_APNS_URL: cfg.apnsUrl,
    HERALD_APNS_CA_FILE: cfg.apnsCaFile,
    HERALD_FCM_SERVICE_ACCOUNT_FILE: cfg.fcmServiceAccountFile,
    HERALD_FCM_URL: cfg.fcmUrl,
    HERALD_VAPID_SUBJECT: 'mailto:compat@example.com',
    // FCM and Web Push trust the system's authorities; the fakes all
    // share the certificate of the APNs CA file.
    SSL_CERT_FILE: cfg.apnsCaFile
  })
  return {
    cfg,
    control,
    heraldEnv,
    stop: async () => { child.stdin.end(); await exited }
  }
}

/** The `pusher` metadata herald puts in a message the fakes received. */
export function metadataOf (m) {
  if (m.platform === 'fcm') return JSON.parse(m.body.data.pusher)
  return m.body.data.pusher
}

/** The publishId of a message the fakes received; undefined when it has none. */
export function publishIdOf (m) {
  try { return metadataOf(m).publishId } catch { return undefined }
}
