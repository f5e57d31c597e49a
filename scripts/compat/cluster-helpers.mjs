// What the cluster suite needs beyond helpers.mjs: a real redis-server on a
// free 127.0.0.1 port (in a temporary directory, without persistence, killed
// by its PID), and herald nodes joined to it.
//
//   const redis = await startRedis()          // null: redis-server is missing (see redisServerBin)
//   const nodes = await startNodes(redis, 3, { HERALD_APP_WEBHOOK_URL: url })
//   const nodes = await startNodes(redis, 3, {}, { apps: [['--id', '2', '--key', 'k2', '--secret', 's2', '--max-connections', '3']] })
//   await redis.restart()                     // a new, empty redis-server on the same port
//   const replica = await startRedis({ args: ['--replicaof', '127.0.0.1', String(redis.port)] })
//   const sentinel = await startSentinel('herald', redis.port)   // then startNodes({ url: 'redis-sentinel://…' }, 3)
//   const shards = await startRedisShards(3)  // or startRedisCluster(3); startNodes(shards, 3)
//
// Like server/internal/testredis (the Go tests' helper): where redis-server
// is not installed the suite is skipped with one line, except under CI=true,
// where that is a failure (CI must never pass by skipping).

import { execFile, spawn } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { delimiter, dirname, join } from 'node:path'
import { promisify } from 'node:util'

import { freePort, freshDB, heraldCli, killOnExit, startHerald, tempDir } from './herald.mjs'
import { sleep } from './helpers.mjs'

// Only against a hung redis-server: a start is decided by its answer (generous for a busy machine).
const REDIS_START_TIMEOUT_MS = 120_000

/**
 * The redis-server binary: $REDIS_SERVER_BIN when set (undefined if it does
 * not exist), else the first on PATH, else /usr/bin or /usr/local/bin;
 * undefined when there is none.
 */
export function redisServerBin () {
  const chosen = process.env.REDIS_SERVER_BIN
  if (chosen) return existsSync(chosen) ? chosen : undefined
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin']
  return dirs.map((d) => join(d, 'redis-server')).find((p) => existsSync(p))
}

/** Resolves true when a Redis on 127.0.0.1:port answers PING with PONG within timeout ms. */
export function redisPing (port, timeout = 1000) {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port })
    let reply = ''
    const done = (ok) => {
      clearTimeout(timer)
      socket.destroy()
      resolve(ok)
    }
    const timer = setTimeout(() => done(false), timeout)
    socket.setEncoding('utf8')
    socket.on('connect', () => socket.write('PING\r\n'))
    socket.on('data', (s) => {
      reply += s
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'))
    })
    socket.on('error', () => done(false))
  })
}

/**
 * Starts redis-server on port in dir and resolves with the child once it
 * answers PING; rejects (after killing it) when it exits or stays silent.
 */
async function spawnRedis (bin, port, dir, { args = [], sentinel } = {}) {
  const logfile = join(dir, 'redis.log')
  const common = ['--bind', '127.0.0.1', '--port', String(port), '--dir', dir,
    '--protected-mode', 'no', '--daemonize', 'no', '--loglevel', 'warning', '--logfile', logfile]
  let argv = [...common, '--save', '', '--appendonly', 'no', ...args]
  if (sentinel) {
    // A Sentinel runs from a configuration file it may rewrite.
    const conf = join(dir, 'sentinel.conf')
    writeFileSync(conf, sentinel)
    argv = [conf, '--sentinel', ...common]
  }
  const child = spawn(bin, argv, { stdio: 'ignore' })
  let exited = null
  const exit = killOnExit(child).then((e) => (exited = e))
  child.once('error', () => { /* seen as the exit */ })
  const log = () => { try { return readFileSync(logfile, 'utf8') } catch { return '' } }
  const deadline = Date.now() + REDIS_START_TIMEOUT_MS
  for (;;) {
    if (exited) throw new Error(`redis-server on port ${port} exited (${JSON.stringify(exited)}):\n${log()}`)
    if (await redisPing(port, 500)) return { child, exit }
    if (Date.now() > deadline) {
      try { process.kill(child.pid, 'SIGKILL') } catch { /* gone */ }
      await exit
      throw new Error(`redis-server did not answer on 127.0.0.1:${port} within ${REDIS_START_TIMEOUT_MS} ms:\n${log()}`)
    }
    await sleep(20)
  }
}

/**
 * Starts a real redis-server on a free 127.0.0.1 port in a temporary
 * directory, with `--save "" --appendonly no` (nothing survives a restart),
 * and the more arguments of mode.args (`['--replicaof', '127.0.0.1', port]`),
 * or as a Sentinel of the configuration mode.sentinel (see startSentinel).
 *
 * @returns {Promise<{port: number, url: string, pid: () => number,
 *   kill: () => Promise<void>, start: () => Promise<void>, restart: () => Promise<void>,
 *   stop: () => Promise<void>}>}
 *   kill: SIGKILL by PID, resolved once it has exited; start: a new, empty
 *   server on the same port (after kill); restart: kill then start; stop:
 *   kill, for after hooks.
 */
export async function startRedis (mode = {}) {
  const bin = redisServerBin()
  if (!bin) throw new Error('redis-server is not installed (Debian package redis-server)')
  const dir = tempDir()
  let port, current
  for (let attempt = 0; ; attempt++) {
    port = await freePort()
    try {
      current = await spawnRedis(bin, port, dir, mode)
      break
    } catch (err) {
      if (attempt === 4) throw err // the port was taken meanwhile, five times over
    }
  }
  const redis = {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    pid: () => current?.child.pid,
    async kill () {
      if (!current) return
      const { child, exit } = current
      current = undefined
      try { process.kill(child.pid, 'SIGKILL') } catch { /* already gone */ }
      await exit
    },
    async start () {
      if (current) throw new Error('redis-server is running already')
      // The port is free again at once (SO_REUSEADDR); retry in case it is not.
      let last
      for (let attempt = 0; attempt < 50; attempt++) {
        try {
          current = await spawnRedis(bin, port, dir, mode)
          return
        } catch (err) {
          last = err
          await sleep(100)
        }
      }
      throw last
    },
    async restart () {
      await redis.kill()
      await redis.start()
    },
    stop: () => redis.kill()
  }
  return redis
}

/**
 * Starts a Sentinel (redis-server --sentinel) on a free port that watches
 * the primary on 127.0.0.1:primaryPort as master, with a quorum of one,
 * taking it for down after a second without an answer and promoting a
 * replica at once; the same object as startRedis.
 */
export function startSentinel (master, primaryPort) {
  return startRedis({
    sentinel: `sentinel monitor ${master} 127.0.0.1 ${primaryPort} 1\n` +
      `sentinel down-after-milliseconds ${master} 1000\n` +
      `sentinel failover-timeout ${master} 5000\n` +
      `sentinel parallel-syncs ${master} 1\n`
  })
}

/**
 * Starts n redis-servers as startRedis does: the shards of one
 * HERALD_REDIS_URL (url, their URLs comma-separated); stop stops them all.
 */
export async function startRedisShards (n) {
  const servers = []
  for (let i = 0; i < n; i++) servers.push(await startRedis())
  return { servers, url: servers.map((s) => s.url).join(','), stop: () => Promise.all(servers.map((s) => s.stop())) }
}

/**
 * Starts n redis-servers in cluster mode (each with a free bus port) and
 * makes them one Redis Cluster with redis-cli --cluster create (an equal run
 * of slots each, no replicas); resolves once every one says the cluster is
 * ok, with the same object as startRedisShards, url being the
 * redis-cluster:// URL with every node a seed.
 */
export async function startRedisCluster (n) {
  const servers = []
  for (let i = 0; i < n; i++) {
    servers.push(await startRedis({
      args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(await freePort()), '--cluster-node-timeout', '2000']
    }))
  }
  const addrs = servers.map((s) => `127.0.0.1:${s.port}`)
  await redisCli(servers[0].port, '--cluster', 'create', ...addrs, '--cluster-replicas', '0', '--cluster-yes')
  for (const s of servers) {
    const deadline = Date.now() + REDIS_START_TIMEOUT_MS
    while (!/^cluster_state:ok/m.test(await redisCli(s.port, 'CLUSTER', 'INFO'))) {
      if (Date.now() > deadline) throw new Error(`Redis Cluster node 127.0.0.1:${s.port}: the cluster is not ok after ${REDIS_START_TIMEOUT_MS} ms`)
      await sleep(50)
    }
  }
  return { servers, url: `redis-cluster://${addrs.join(',')}`, stop: () => Promise.all(servers.map((s) => s.stop())) }
}

/** The answer of redis-cli to args asked of the server on 127.0.0.1:port (redis-cli beside redis-server). */
export async function redisCli (port, ...args) {
  const cli = join(dirname(redisServerBin()), 'redis-cli')
  const { stdout } = await promisify(execFile)(existsSync(cli) ? cli : 'redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args])
  return stdout
}

/**
 * Starts n herald nodes (node-a, node-b, ...) of one cluster on redis, each
 * on a database of its own, with the default app and env (the same for
 * every node, as the cluster requires), and the apps of `apps` (the options
 * of one `herald apps create` each, created in every node's database before
 * it starts). Resolves with the nodes in order; each carries its id.
 */
export async function startNodes (redis, n, env = {}, { apps = [] } = {}) {
  const nodes = []
  try {
    for (let i = 0; i < n; i++) {
      const id = `node-${String.fromCharCode(97 + i)}`
      const db = freshDB()
      for (const args of apps) await heraldCli('apps', 'create', '--db', db, ...args)
      const node = await startHerald({ db, env: { HERALD_REDIS_URL: redis.url, HERALD_NODE_ID: id, ...env } })
      nodes.push({ ...node, id })
    }
  } catch (err) {
    // The caller gets no nodes to stop: the ones started go now, or their
    // processes would keep the test process alive after the suite.
    await Promise.allSettled(nodes.map((node) => node.kill('SIGKILL')))
    throw err
  }
  return nodes
}
