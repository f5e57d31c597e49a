// Starts the real herald binary for a test and stops it again.
//
//   const herald = await startHerald({ env: { HERALD_LOG_LEVEL: 'debug' } })
//   ... new Pusher({ appId: herald.appId, key: herald.key, secret: herald.secret,
//                    host: herald.host, port: String(herald.port), useTLS: false })
//   await herald.stop()
//
// The binary is process.env.HERALD_BIN (the Makefile builds it to
// scripts/compat/herald). Each server gets a fresh temporary directory for its
// database, listens on 127.0.0.1 on a port of its own choosing (HERALD_ADDR=
// 127.0.0.1:0; the port is read from the "listening" log line) and is killed if
// the test process goes away without stopping it.

import { spawn, execFile } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/** Credentials of the default app every test server is started with. */
export const APP = Object.freeze({ appId: '1', key: 'compat-key', secret: 'compat-secret' })

// A start or stop is decided by the process (it logs "listening", exits, or
// is done with its shutdown); these bounds only keep a hung one from
// holding the suite for good, and are far above what a busy machine needs
// (a node joining three Redis shards took over 10 s at a load average of 17).
const START_TIMEOUT_MS = 120_000
const STOP_TIMEOUT_MS = 120_000
const CLI_TIMEOUT_MS = 120_000

/** Absolute path of the herald binary under test. */
export function heraldBin () {
  const bin = process.env.HERALD_BIN || fileURLToPath(new URL('./herald', import.meta.url))
  if (!existsSync(bin)) {
    throw new Error(`herald binary not found at ${bin}: build it with ` +
      '`go build -o scripts/compat/herald ./server` and set HERALD_BIN to its absolute path')
  }
  return bin
}

// Every child still running, killed when this process exits or is signalled.
const children = new Set()
const dirs = new Set()

function killAll () {
  for (const child of children) {
    try { child.kill('SIGKILL') } catch { /* already gone */ }
  }
  children.clear()
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  dirs.clear()
}

process.on('exit', killAll)
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killAll()
    process.kill(process.pid, signal) // re-raise with the default action
  })
}

/**
 * Kills child (SIGKILL) if this process exits or is signalled while it
 * runs, as every server a suite starts must be. Returns a promise of its
 * exit, {code, signal}.
 */
export function killOnExit (child) {
  children.add(child)
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      children.delete(child)
      resolve({ code, signal })
    })
  })
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort () {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

/** A fresh temporary directory, removed when the test process exits. */
export function tempDir () {
  const dir = mkdtempSync(join(tmpdir(), 'herald-compat-'))
  dirs.add(dir)
  return dir
}

/** A path for a fresh database file in its own temporary directory. */
export function freshDB () {
  return join(tempDir(), 'herald.db')
}

// The environment of a child: ours without any HERALD_* variable, so a
// developer's shell settings cannot leak into a test, plus extra.
function childEnv (extra) {
  const env = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('HERALD_')) env[k] = v
  }
  return { ...env, ...extra }
}

/**
 * Runs `herald <args...>` (a management command such as
 * `apps create --id 2 --key k2 --secret s2 --db FILE`) to completion and
 * resolves with its stdout; rejects with stdout and stderr when it fails.
 */
export function heraldCli (...args) {
  return new Promise((resolve, reject) => {
    execFile(heraldBin(), args, { env: childEnv({}), timeout: CLI_TIMEOUT_MS }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`herald ${args.join(' ')} failed (${err.code ?? err.signal}):\n${stdout}${stderr}`))
        return
      }
      resolve(stdout)
    })
  })
}

/**
 * Starts `herald` (serve) with the default app APP on a fresh database (or on
 * `db`, e.g. one prepared with heraldCli) and resolves once it listens.
 *
 * @param {object} [options]
 * @param {Record<string,string>} [options.env] extra environment (wins over the defaults)
 * @param {string} [options.db] database file; default a fresh one in a temporary directory
 * @returns {Promise<{host: string, port: number, tls: boolean, db: string, appId: string, key: string,
 *   secret: string, logs: () => string, stop: () => Promise<void>,
 *   kill: (signal?: string) => Promise<{code: number|null, signal: string|null}>}>}
 */
export function startHerald ({ env = {}, db = freshDB() } = {}) {
  const child = spawn(heraldBin(), [], {
    env: childEnv({
      HERALD_ADDR: '127.0.0.1:0',
      HERALD_DB: db,
      HERALD_LOG_FORMAT: 'json',
      HERALD_APP_ID: APP.appId,
      HERALD_APP_KEY: APP.key,
      HERALD_APP_SECRET: APP.secret,
      // The fake push gateways listen on loopback: allowed as an operator would.
      HERALD_WEBPUSH_ALLOWED_HOSTS: '127.0.0.1,localhost',
      // Every SDK in these suites talks from 127.0.0.1: one address, many devices.
      HERALD_ANON_RATE_LIMIT: '0',
      ...env
    }),
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const exited = killOnExit(child)

  // Everything the server says, kept for failure messages.
  const output = []
  const logs = () => output.join('\n')
  child.stdout.setEncoding('utf8').on('data', (s) => output.push(s.trimEnd()))

  const listening = new Promise((resolve, reject) => {
    let settled = false
    const settle = (fn, value) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      fn(value)
    }
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      settle(reject, new Error(`herald did not log "listening" within ${START_TIMEOUT_MS} ms; its output:\n${logs()}`))
    }, START_TIMEOUT_MS)

    child.once('error', (err) => settle(reject, new Error(`starting ${heraldBin()}: ${err.message}`)))
    exited.then(({ code, signal }) =>
      settle(reject, new Error(`herald exited before listening (code ${code}, signal ${signal}); its output:\n${logs()}`)))

    createInterface({ input: child.stderr, crlfDelay: Infinity }).on('line', (line) => {
      output.push(line)
      let entry
      try { entry = JSON.parse(line) } catch { return }
      if (entry.msg !== 'listening' || typeof entry.addr !== 'string') return
      const i = entry.addr.lastIndexOf(':')
      settle(resolve, { host: entry.addr.slice(0, i), port: Number(entry.addr.slice(i + 1)), tls: entry.tls === true })
    })
  })

  return listening.then(({ host, port, tls }) => {
    let stopping
    const stop = () => {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
        let timer
        const timeout = new Promise((resolve) => { timer = setTimeout(resolve, STOP_TIMEOUT_MS, 'timeout') })
        const result = await Promise.race([exited, timeout])
        clearTimeout(timer)
        if (result === 'timeout') {
          child.kill('SIGKILL')
          await exited
          throw new Error(`herald did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM; its output:\n${logs()}`)
        }
        if (result.code !== 0) {
          throw new Error(`herald exited with code ${result.code} (signal ${result.signal}) on SIGTERM; its output:\n${logs()}`)
        }
      })()
      return stopping
    }
    // Sends signal (default SIGKILL) and resolves with how the process ended,
    // e.g. to simulate a crash; stop() is not needed afterwards.
    const kill = async (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal)
      return exited
    }
    return { host, port, tls, db, ...APP, logs, stop, kill }
  })
}
