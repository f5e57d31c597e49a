package cluster

import (
	"github.com/redis/go-redis/v9"
)

// The cluster state changes in Lua scripts, each one atomic in Redis, so a
// change and what it means (the first subscriber anywhere, a member's last
// connection leaving) are decided once for the whole cluster, by whichever
// node runs the script. A script publishes the events every node must
// deliver (member_added, member_removed, subscription_count, a user online)
// in the same step, and returns the webhook events to the node that ran it
// as a flat list of kind, value pairs.
//
// Keys (P is the prefix, "herald:" by default):
//
//	P ns:<node>              set    the node's subscriptions: app \31 channel \31 socket \31 user
//	P nu:<node>              set    the node's signed-in connections: app \31 socket \31 user
//	P nc:<node>              hash   the node's connections per app
//	P node:<node>            string the node's heartbeat (expires)
//	P msgs                   stream terminations, watchlist changes, sign-in answers: every node reads it
//	                                (each stream's entries are also published on the channel P <stream>@<db>)
//	P msgs:<slot>            stream the messages of the channels of a slot (interest.go)
//	P in:<node>@<db>         channel wakes the node's reader when it starts reading a slot (no key)
//	P nodes                  set    the nodes that have state
//	P gen                    string the state's generation: gone when Redis lost its data
//	P ch:<app>               hash   channel → subscriptions in the cluster
//	P pm:<app>:<channel>     hash   presence user → connections in the cluster
//	P pi:<app>:<channel>     hash   presence user → user_info
//	P us:<app>               hash   user → signed-in connections in the cluster
//	P cache:<app>:<channel>  string a cache channel's last event (expires)
//	P cnt:<app>:<channel>    string when the last subscription_count went out (ms)
//	P lock:<node>            string a node's record is being rebuilt or reaped
//	P held                   zset   channel_vacated / member_removed webhooks held back, by due time (ms)
//
// The webhook hold is kept here rather than on each node, so that a member
// leaving on one node and coming back on another within it cancels out as
// on one node: a leave script adds the vacated or member_removed to P held,
// a join script that finds its opposite there takes it out and reports
// neither, and every node releases, with releaseScript, those whose time
// has come (a node that died holding none).
//
// Every script takes as ARGV[1] the prefix, the command that publishes on
// a channel (PUBLISH; SPUBLISH on a Redis Cluster, whose shard channels
// stay on the node of their hash slot) and the suffix of a stream's
// channel (member.scriptCtx), NUL-separated, and, as ARGV[2], the stream
// it publishes to (after the prefix: msgs:<slot> for a channel's, msgs for
// the cluster-wide one; see interest.go); their own arguments follow.
// Streams keep StreamHistory of messages (XADD MINID ~, by Redis's clock).
// An entry has one field, f: the entry's own fields and values, each
// written as by ns (m the message, o its origin, s the number of its first
// message, p the positions of its events), so that publishing the entry on
// its stream's channel, with its id first, from which the nodes read it
// (receive.go), is one concatenation, not one per field.
const prelude = `
local P, PUB, AT = string.match(ARGV[1], '^(.-)%z(%u+)%z(.*)$')
local COUNT_ABOVE, COUNT_EVERY_MS = {{count_above}}, {{count_every_ms}}
local function ns(s) s = tostring(s); return #s .. ':' .. s end
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local minid
-- xadd appends an entry to stream, its fields and values written as by ns,
-- and publishes it on the stream's channel after its id.
local function xadd(stream, fields)
  if not minid then minid = nowms() - {{history_ms}} end
  local id = redis.call('XADD', stream, 'MINID', '~', minid, '*', 'f', fields)
  redis.call(PUB, stream .. AT, ns(id) .. fields)
end
local function publish(msg) xadd(P .. ARGV[2], '1:m' .. ns(msg)) end
local function event(app, channel, name, data, exclude)
  return 'E' .. ns(app) .. ns(channel) .. ns(name) .. ns(data) .. ns('') .. ns(exclude) .. ns('')
end
-- held names a held-back webhook: v (channel_vacated) or m (member_removed),
-- then the app, channel and user.
local function held(kind, app, channel, user)
  return kind .. ns(app) .. ns(channel) .. ns(user)
end
-- unheld takes a held-back webhook out: true when it was there, and so the
-- change that would have reported its opposite cancels it instead.
local function unheld(kind, app, channel, user)
  return redis.call('ZREM', P .. 'held', held(kind, app, channel, user)) == 1
end
-- count applies the subscription_count rule to a channel now holding n
-- subscriptions: sent at once up to COUNT_ABOVE subscribers, at most every
-- COUNT_EVERY_MS above (hub.CountThrottleAbove, hub.CountThrottleEvery).
-- The event goes to the stream, or into later when given (for the caller
-- to publish after its answer to a subscribe, so that the new subscriber,
-- complete by then, gets it too).
local function count(out, app, channel, n, later)
  local key = P .. 'cnt:' .. app .. ':' .. channel
  local now = nowms()
  local last = tonumber(redis.call('GET', key) or '0')
  if n > COUNT_ABOVE and now - last < COUNT_EVERY_MS then
    out[#out+1] = 'defer'; out[#out+1] = tostring(last + COUNT_EVERY_MS - now)
    return
  end
  redis.call('SET', key, now, 'PX', 10000)
  if n > 0 then
    local msg = event(app, channel, 'pusher_internal:subscription_count', '{"subscription_count":' .. n .. '}', '')
    if later then later[#later+1] = msg else publish(msg) end
  end
  out[#out+1] = 'count'; out[#out+1] = tostring(n)
end
`

// newScript is a script of the cluster state: the prelude, then parts.
func newScript(parts ...string) *redis.Script {
	return luaScript(append([]string{prelude}, parts...)...)
}

// joinScript: ARGV node app channel socket user info max_members flags token, with
// flags letters: p presence, c cache channel, n subscription counts on,
// s silent (rebuilding after Redis lost its data: no events), r reply with
// a snapshot to the node, k a recoverable subscription, whose arguments
// follow: max_events floor_ms now_ms window_ms (the app's policy and
// window, the node's clock), then, to resume an old subscription, the
// position after which it missed events, its connection's socket and the
// mark its token carried (three empty strings to resume nothing). The snapshot's
// recovery field is then the channel's newest kept event (its position),
// the history's mark (histMark), and for a resume 'ok' with the missed
// events (id name data each) or why they cannot be had (histMissed, or
// 'refused' for a position the channel never reached).
var joinScript = newScript(histLib, `
local node, app, channel, socket, user, info = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local maxm, flags = tonumber(ARGV[9]), ARGV[10]
local function has(f) return string.find(flags, f, 1, true) ~= nil end
local presence, silent = has('p'), has('s')
local out, later = {}, {}
local status = 'ok'
local nskey = P .. 'ns:' .. node
local entry = app .. '\31' .. channel .. '\31' .. socket .. '\31' .. user
local pm = P .. 'pm:' .. app .. ':' .. channel
local pi = P .. 'pi:' .. app .. ':' .. channel
if redis.call('SISMEMBER', nskey, entry) == 0 then
  if presence and maxm > 0 and redis.call('HEXISTS', pm, user) == 0 and redis.call('HLEN', pm) >= maxm then
    status = 'full'
  else
    redis.call('SADD', nskey, entry)
    local n = redis.call('HINCRBY', P .. 'ch:' .. app, channel, 1)
    if n == 1 and not silent and not unheld('v', app, channel, '') then out[#out+1] = 'occupied'; out[#out+1] = '' end
    if presence then
      if redis.call('HINCRBY', pm, user, 1) == 1 then
        redis.call('HSET', pi, user, info)
        if not silent then
          local ui = info
          if ui == '' then ui = 'null' end
          publish(event(app, channel, 'pusher_internal:member_added', '{"user_id":' .. cjson.encode(user) .. ',"user_info":' .. ui .. '}', socket))
          if not unheld('m', app, channel, user) then out[#out+1] = 'member_added'; out[#out+1] = user end
        end
      end
    elseif has('n') and not silent then
      count(out, app, channel, n, later)
    end
  end
end
if has('r') then
  local parts = {'S', ns(node), ns(app), ns(channel), ns(socket), ns(ARGV[11]), ns(status)}
  local cached = false
  if has('c') then cached = redis.call('GET', P .. 'cache:' .. app .. ':' .. channel) end
  if cached then
    parts[#parts+1] = ns('1'); parts[#parts+1] = ns(cached)
  else
    parts[#parts+1] = ns(''); parts[#parts+1] = ns('')
  end
  local rec = ''
  if has('k') and status == 'ok' then
    local base = P .. 'hist:{' .. app .. '}'
    local top = redis.call('XREVRANGE', base .. ':c:' .. channel, '+', '-', 'COUNT', 1)[1]
    local pos = '0-0'
    if top then pos = top[1] end
    -- The state's generation and the history's (hgen: settleHistory).
    local gen = (redis.call('GET', P .. 'gen') or '') .. '.' .. (redis.call('GET', P .. 'hgen') or '')
    local r = {ns(pos), ns(histMark(base, gen, tonumber(ARGV[14])))}
    local after = ARGV[16]
    if after == '' then
      r[#r+1] = ns('')
    else
      local why, events = histMissed(base, channel, after, ARGV[18], gen, tonumber(ARGV[12]), tonumber(ARGV[13]),
        tonumber(ARGV[15]), tonumber(ARGV[14]), ARGV[17])
      if why == '' and idLess(pos, after) then
        -- A position past the channel's newest: one it never reached, or,
        -- its events gone, one that cannot be told from it.
        why = top and 'refused' or 'gap'
      end
      if why ~= '' then
        r[#r+1] = ns(why)
      else
        r[#r+1] = ns('ok')
        for _, e in ipairs(events) do
          r[#r+1] = ns(e[1]); r[#r+1] = ns(e[2]); r[#r+1] = ns(e[3])
        end
      end
    end
    rec = table.concat(r)
  end
  parts[#parts+1] = ns(rec)
  if presence and status == 'ok' then
    local h = redis.call('HGETALL', pi)
    for i = 1, #h do parts[#parts+1] = ns(h[i]) end
  end
  publish(table.concat(parts))
end
for i = 1, #later do publish(later[i]) end
return out
`)

// leaveScript: ARGV node app channel socket user flags (p presence, n
// subscription counts on) hold_ms. The member_removed and channel_vacated
// webhooks it causes are held back in P held, not returned.
var leaveScript = newScript(`
local node, app, channel, socket, user, flags = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local due = nowms() + tonumber(ARGV[9])
local function has(f) return string.find(flags, f, 1, true) ~= nil end
local out = {}
local entry = app .. '\31' .. channel .. '\31' .. socket .. '\31' .. user
if redis.call('SREM', P .. 'ns:' .. node, entry) == 1 then
  local n = redis.call('HINCRBY', P .. 'ch:' .. app, channel, -1)
  if has('p') then
    local pm = P .. 'pm:' .. app .. ':' .. channel
    if redis.call('HINCRBY', pm, user, -1) <= 0 then
      redis.call('HDEL', pm, user)
      redis.call('HDEL', P .. 'pi:' .. app .. ':' .. channel, user)
      publish(event(app, channel, 'pusher_internal:member_removed', '{"user_id":' .. cjson.encode(user) .. '}', ''))
      redis.call('ZADD', P .. 'held', due, held('m', app, channel, user))
    end
  elseif has('n') then
    count(out, app, channel, n)
  end
  if n <= 0 then
    redis.call('HDEL', P .. 'ch:' .. app, channel)
    redis.call('ZADD', P .. 'held', due, held('v', app, channel, ''))
  end
end
return out
`)

// beatScript renews a node's heartbeat and its connection counts: ARGV
// node epoch ttl_ms, then app and count pairs. It answers the heartbeat's
// previous value, empty when it had expired.
var beatScript = newScript(`
local node = ARGV[2]
local prev = redis.call('SET', P .. 'node:' .. node, ARGV[3], 'PX', ARGV[4], 'GET')
redis.call('SADD', P .. 'nodes', node)
local nc = P .. 'nc:' .. node
redis.call('DEL', nc)
for i = 5, #ARGV, 2 do
  redis.call('HSET', nc, ARGV[i], ARGV[i + 1])
end
return prev or ''
`)

// releaseScript takes the held-back webhooks that are due (all of them
// with flag a) out of P held and returns them, for the node that ran it to
// report, after the milliseconds until the earliest one left is due (-1:
// none is left). ARGV max flags.
var releaseScript = newScript(`
local now = nowms()
local upto = now
if ARGV[4] == 'a' then upto = '+inf' end
local due = redis.call('ZRANGEBYSCORE', P .. 'held', '-inf', upto, 'LIMIT', 0, tonumber(ARGV[3]))
if #due > 0 then redis.call('ZREM', P .. 'held', unpack(due)) end
local wait = -1
local first = redis.call('ZRANGE', P .. 'held', 0, 0, 'WITHSCORES')
if #first > 0 then wait = math.max(0, tonumber(first[2]) - now) end
table.insert(due, 1, tostring(wait))
return due
`)

// flushCountScript sends a subscription count that was held back, unless one
// went out since (which counted the change already). ARGV app channel.
var flushCountScript = newScript(`
local app, channel = ARGV[3], ARGV[4]
local out = {}
local last = tonumber(redis.call('GET', P .. 'cnt:' .. app .. ':' .. channel) or '0')
if nowms() - last >= COUNT_EVERY_MS then
  count(out, app, channel, tonumber(redis.call('HGET', P .. 'ch:' .. app, channel) or '0'))
end
return out
`)

// signInScript: ARGV node app socket user flags (s silent, r reply)
// watched-user...
var signInScript = newScript(`
local node, app, socket, user, flags = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local us = P .. 'us:' .. app
if redis.call('SADD', P .. 'nu:' .. node, app .. '\31' .. socket .. '\31' .. user) == 1 then
  if redis.call('HINCRBY', us, user, 1) == 1 and not string.find(flags, 's', 1, true) then
    publish('W' .. ns(app) .. ns(user) .. ns('1'))
  end
end
if string.find(flags, 'r', 1, true) then
  local parts = {'U', ns(node), ns(app), ns(socket)}
  for i = 8, #ARGV do
    if redis.call('HEXISTS', us, ARGV[i]) == 1 then parts[#parts+1] = ns(ARGV[i]) end
  end
  publish(table.concat(parts))
end
return {}
`)

// signOutScript: ARGV node app socket user.
var signOutScript = newScript(`
local node, app, socket, user = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local us = P .. 'us:' .. app
if redis.call('SREM', P .. 'nu:' .. node, app .. '\31' .. socket .. '\31' .. user) == 1 then
  if redis.call('HINCRBY', us, user, -1) <= 0 then
    redis.call('HDEL', us, user)
    publish('W' .. ns(app) .. ns(user) .. ns('0'))
  end
end
return {}
`)

// publishScript appends a node's messages to their streams, each entry
// with its origin (o) and the number of its first message (s) in the
// stream's numbering, keeps a cache channel's event as its last, and
// appends kept events to their channel's history (histLib) in the same
// step, the entry carrying their ids (p, one per message, space-separated,
// "-" for one not kept): so the ids of a channel's events follow the order
// of its stream, which is the order every node delivers them in
// (recovery's positions). All of it only while Redis still has the
// generation the node publishes under (see publish.go). ARGV[2] is the cluster-wide stream, which it does not
// write.
// ARGV gen origin token appends, then per append
//
//	app now_ms floor_ms max_events max_bytes max_channels ttl_ms n (channel name data exclude)×n
//
// and per entry, where fields are its fields but p, written as by ns (the
// message, origin and number: entryFields), and places are the
// space-separated places of its messages among the appends' events (from
// 1; "-" for one not kept; empty when none is), either
//
//	x stream fields places                            a plain entry
//	c stream fields places app channel value ttl_ms   a cache channel's event
//
// A call with appends has a token (else it is empty): the same token as
// the node's last call is the same call again (go-redis sends a pipeline
// again when its answers were lost on the way), which does nothing and
// answers "dup". Else it answers, per append, histAppend's numbers, or the
// error that kept its events out of the history (they are published all
// the same, without ids).
var publishScript = newScript(histLib, `
if redis.call('GET', P .. 'gen') ~= ARGV[3] then
  return redis.error_reply('HERALDGEN Redis lost the cluster state')
end
if ARGV[5] ~= '' then
  local tk = P .. 'ptok:' .. ARGV[4]
  if redis.call('GET', tk) == ARGV[5] then return 'dup' end
  redis.call('SET', tk, ARGV[5], 'PX', 60000)
end
local out, ids = {}, {}
local i = 7
for _ = 1, tonumber(ARGV[6]) do
  local app, n = ARGV[i], tonumber(ARGV[i+7])
  local entries = {}
  for j = 0, n - 1 do
    local at = i + 8 + 4 * j
    entries[#entries + 1] = {ARGV[at], ARGV[at+1], ARGV[at+2], ARGV[at+3]}
  end
  local ok, v, got = pcall(histAppend, P .. 'hist:{' .. app .. '}', ARGV[i+1], tonumber(ARGV[i+2]),
    tonumber(ARGV[i+3]), tonumber(ARGV[i+4]), tonumber(ARGV[i+5]), ARGV[i+6], entries)
  if ok then
    for _, id in ipairs(got) do ids[#ids+1] = id end
    out[#out+1] = v
  else
    for _ = 1, n do ids[#ids+1] = '-' end
    if type(v) == 'table' then v = v.err end
    out[#out+1] = tostring(v)
  end
  i = i + 8 + 4 * n
end
-- positions turns an entry's places into its messages' ids (nil: none).
local function positions(places)
  if places == '' then return nil end
  local p, some = {}, false
  for place in string.gmatch(places, '%S+') do
    local id = ids[tonumber(place) or 0] or '-'
    if id ~= '-' then some = true end
    p[#p+1] = id
  end
  if some then return table.concat(p, ' ') end
  return nil
end
local function add(stream, fields, places)
  local p = positions(places)
  if p then fields = fields .. '1:p' .. ns(p) end
  xadd(P .. stream, fields)
end
while i <= #ARGV do
  if ARGV[i] == 'c' then
    redis.call('SET', P .. 'cache:' .. ARGV[i+4] .. ':' .. ARGV[i+5], ARGV[i+6], 'PX', ARGV[i+7])
    add(ARGV[i+1], ARGV[i+2], ARGV[i+3])
    i = i + 8
  else
    add(ARGV[i+1], ARGV[i+2], ARGV[i+3])
    i = i + 4
  end
end
return out
`)
