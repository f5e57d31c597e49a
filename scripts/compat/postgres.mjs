// A real PostgreSQL server for the compat suites, as storage/testpg gives the
// Go tests one: initdb in a temporary folder (as the postgres user when we
// run as root, which initdb and postgres refuse to be), then postgres on a
// free 127.0.0.1 port with its unix socket in that folder, tuned for tests
// (no fsync), stopped by its PID.
//
//   const pg = await startPostgres()        // throws when the binaries are missing (see postgresBinDir)
//   const url = await pg.createDatabase('herald_compat')   // postgres://herald@127.0.0.1:<port>/herald_compat
//   ... HERALD_DB=url ...
//   await pg.stop()                         // in an after hook
//
// Like testpg: where the PostgreSQL binaries are not installed a suite is
// skipped with one line, except under CI=true, where that is a failure (CI
// must never pass by skipping); the suite decides with postgresBinDir().

import { spawn, execFile, execFileSync } from 'node:child_process'
import { chownSync, closeSync, openSync, readFileSync, readdirSync, realpathSync, rmSync, statSync } from 'node:fs'
import { delimiter, dirname, join } from 'node:path'

import { freePort, killOnExit, tempDir } from './herald.mjs'
import { sleep } from './helpers.mjs'

/** The binaries a server needs, all from one folder: the server's and the client's of one version. */
const TOOLS = ['initdb', 'postgres', 'pg_isready', 'createdb']
/** The superuser initdb creates; connections from 127.0.0.1 are trusted. */
const SUPERUSER = 'herald'
const START_TIMEOUT_MS = 120_000 // against a hung initdb or server only: generous for a busy machine
const STOP_TIMEOUT_MS = 60_000

function isFile (p) {
  try { return statSync(p).isFile() } catch { return false }
}

/**
 * The folder of the PostgreSQL binaries (initdb, postgres, pg_isready,
 * createdb): $PG_BINDIR when set (undefined if it lacks one), else
 * `pg_config --bindir`, else the folder initdb on the PATH links to, else
 * /usr/lib/postgresql/<version>/bin, the newest first (where Debian puts
 * them); undefined when there is none.
 */
export function postgresBinDir () {
  const complete = (d) => d && TOOLS.every((t) => isFile(join(d, t)))
  if (process.env.PG_BINDIR) return complete(process.env.PG_BINDIR) ? process.env.PG_BINDIR : undefined
  const candidates = []
  try {
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim())
  } catch { /* no pg_config */ }
  for (const d of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    const initdb = join(d, 'initdb')
    if (isFile(initdb)) candidates.push(dirname(realpathSync(initdb)))
  }
  let versions = []
  try { versions = readdirSync('/usr/lib/postgresql') } catch { /* not Debian's layout */ }
  versions.sort((a, b) => Number(b) - Number(a))
  candidates.push(...versions.map((v) => `/usr/lib/postgresql/${v}/bin`))
  return candidates.find(complete)
}

/**
 * The user and group initdb and postgres run as when we are root: postgres,
 * else nobody (as testpg); undefined when we are not root.
 */
function unprivileged () {
  if (process.getuid?.() !== 0) return undefined
  for (const name of ['postgres', 'nobody']) {
    try {
      const id = (flag) => Number(execFileSync('id', [flag, name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim())
      return { uid: id('-u'), gid: id('-g') }
    } catch { /* no such user */ }
  }
  throw new Error('running as root, and there is no postgres or nobody user to run PostgreSQL as')
}

/** Runs a binary to completion; resolves with its output, rejects with it. */
function run (bin, args, options) {
  return new Promise((resolve, reject) => {
    execFile(bin, args, { timeout: START_TIMEOUT_MS, ...options }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${bin} ${args.join(' ')} failed (${err.code ?? err.signal}):\n${stdout}${stderr}`))
      else resolve(stdout)
    })
  })
}

/**
 * Starts postgres on port and resolves with the child and its exit once it
 * accepts connections; rejects (after killing it) when it exits first or
 * stays silent for START_TIMEOUT_MS.
 */
async function spawnPostgres (bin, dir, port, user) {
  const logFile = join(dir, 'postgres.log')
  const fd = openSync(logFile, 'w')
  let child
  try {
    child = spawn(join(bin, 'postgres'), [
      '-D', join(dir, 'data'), '-h', '127.0.0.1', '-p', String(port), '-k', dir,
      '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=200'
    ], { cwd: dir, stdio: ['ignore', fd, fd], ...user })
  } finally {
    closeSync(fd)
  }
  let exited = null
  const exit = killOnExit(child).then((e) => (exited = e))
  child.once('error', () => { /* seen as the exit */ })
  const log = () => { try { return readFileSync(logFile, 'utf8') } catch { return '' } }
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (exited) throw new Error(`postgres on port ${port} exited (${JSON.stringify(exited)}):\n${log()}`)
    try {
      await run(join(bin, 'pg_isready'), ['-q', '-h', '127.0.0.1', '-p', String(port), '-U', SUPERUSER, '-d', 'postgres', '-t', '1'])
      return { child, exit }
    } catch { /* not yet */ }
    if (Date.now() > deadline) {
      try { process.kill(child.pid, 'SIGKILL') } catch { /* gone */ }
      await exit
      throw new Error(`postgres did not accept connections on 127.0.0.1:${port} within ${START_TIMEOUT_MS} ms:\n${log()}`)
    }
    await sleep(50)
  }
}

/**
 * Starts a real PostgreSQL server in a temporary folder (its data in
 * data/, its unix socket and log beside it) on a free 127.0.0.1 port; the
 * superuser `herald` is trusted without a password. The cluster has an ICU
 * English collation where ICU is available (as testpg: the schema must not
 * depend on the database's locale).
 *
 * @returns {Promise<{port: number, dir: string, pid: number,
 *   url: (db: string) => string, createDatabase: (name: string) => Promise<string>,
 *   logs: () => string, stop: () => Promise<void>}>}
 *   url: the URL of database db as the superuser; createDatabase: creates
 *   it (UTF8, from template0) and resolves with its URL; stop: a fast
 *   shutdown (SIGINT by PID, SIGKILL after 10 s), then the folder is
 *   removed; for after hooks (a second call does nothing).
 */
export async function startPostgres () {
  const bin = postgresBinDir()
  if (!bin) throw new Error('PostgreSQL is not installed (Debian package postgresql)')
  const dir = tempDir() // removed at exit, if stop has not
  try {
    const user = unprivileged()
    if (user) chownSync(dir, user.uid, user.gid)
    const data = join(dir, 'data')
    let last
    for (const locale of [['--locale-provider=icu', '--icu-locale=en-US'], []]) {
      rmSync(data, { recursive: true, force: true })
      try {
        await run(join(bin, 'initdb'), ['-D', data, '-U', SUPERUSER, '--auth=trust', '--encoding=UTF8',
          '--no-sync', '--no-instructions', ...locale], { cwd: dir, ...user })
        last = undefined
        break
      } catch (err) {
        last = err
      }
    }
    if (last) throw last

    let port, current
    for (let attempt = 0; ; attempt++) {
      port = await freePort()
      try {
        current = await spawnPostgres(bin, dir, port, user)
        break
      } catch (err) {
        if (attempt === 4) throw err // the port was taken meanwhile, five times over
      }
    }

    const url = (db) => `postgres://${SUPERUSER}@127.0.0.1:${port}/${db}?sslmode=disable`
    let stopping
    return {
      port,
      dir,
      pid: current.child.pid,
      url,
      async createDatabase (name) {
        await run(join(bin, 'createdb'), ['-h', '127.0.0.1', '-p', String(port), '-U', SUPERUSER,
          '-T', 'template0', '-E', 'UTF8', name])
        return url(name)
      },
      logs: () => { try { return readFileSync(join(dir, 'postgres.log'), 'utf8') } catch { return '' } },
      stop () {
        stopping ??= (async () => {
          const { child, exit } = current
          try { process.kill(child.pid, 'SIGINT') } catch { /* already gone */ }
          let timer
          const timeout = new Promise((resolve) => { timer = setTimeout(resolve, STOP_TIMEOUT_MS, 'timeout') })
          const result = await Promise.race([exit, timeout])
          clearTimeout(timer)
          if (result === 'timeout') {
            try { process.kill(child.pid, 'SIGKILL') } catch { /* gone */ }
            await exit
          }
          rmSync(dir, { recursive: true, force: true })
        })()
        return stopping
      }
    }
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
}
