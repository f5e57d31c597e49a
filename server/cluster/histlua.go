package cluster

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
)

// histLib is the channel history's Lua: the append, shared by
// histAppendScript (an append of its own) and publishScript (the append
// in the publish that carries the events, so that their IDs follow the
// order in which every node delivers them: recovery's positions), and the
// read of what a recovering subscription missed (joinScript). An app's
// keys begin with base (EventLogStore.key); besides the events and counts
// (eventlog.go), the history keeps what recovery needs to tell a complete
// log from one with a hole:
//
//	sizes s:<c>   the id of the first event of the channel's log (its incarnation)
//	sizes g:<c>   the id of the newest event dropped from it while it stayed
//	meta  drops   how many channels were dropped whole
//	base:drops    sorted set: the channels last dropped whole, by that count (the newest dropsKept)
const histLib = `
local function idParts(id)
  local d = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, d - 1)), tonumber(string.sub(id, d + 1))
end
-- idLess reports whether stream id a is below b.
local function idLess(a, b)
  local am, as = idParts(a)
  local bm, bs = idParts(b)
  return am < bm or (am == bm and as < bs)
end

-- histAppend appends entries ({channel, name, data, exclude}) to the
-- history whose keys begin with base, then drops what the bounds say
-- must go. It answers the events dropped by reason (events, age, bytes,
-- channels), the app's events and bytes, the work done one by one (the
-- events read to drop them, the channels dropped whole), then the id of
-- each entry.
local function histAppend(base, now, floor, maxEvents, maxBytes, maxChannels, ttl, entries)
  local meta, lru, sizes, prefix = base, base .. ':lru', base .. ':sizes', base .. ':c:'
  local n = #entries
  local dropped = {0, 0, 0, 0}
  -- What this call may still do one by one.
  local events, channels = {{budget}} + n, {{budget}}
  local function held() return tonumber(redis.call('HGET', meta, 'bytes') or '0') end
  -- gone records that the events of c up to id left its log. Events leave
  -- a log oldest first (the call's own, the newest, last), so id is
  -- always the newest gone.
  local function gone(c, id)
    redis.call('HSET', sizes, 'g:' .. c, id)
  end
  -- account: k events of c that cost b went for reason why, and c with them
  -- (its own cost too) when none is left. (0 - x, not -x: Lua writes -0 for
  -- a zero, which Redis takes for no integer.)
  local function account(c, k, b, why)
    dropped[why] = dropped[why] + k
    redis.call('HINCRBY', meta, 'events', 0 - k)
    local left = redis.call('HINCRBY', sizes, 'n:' .. c, 0 - k)
    local rest = redis.call('HINCRBY', sizes, 'b:' .. c, 0 - b)
    if left <= 0 then
      b = b + rest
      redis.call('UNLINK', prefix .. c)
      redis.call('ZREM', lru, c)
      redis.call('HDEL', sizes, 'n:' .. c, 'b:' .. c, 'l:' .. c, 's:' .. c, 'g:' .. c)
      redis.call('ZADD', base .. ':drops', redis.call('HINCRBY', meta, 'drops', 1), c)
      redis.call('ZREMRANGEBYRANK', base .. ':drops', 0, -{{drops_kept}} - 1)
      redis.call('PEXPIRE', base .. ':drops', ttl)
    end
    redis.call('HINCRBY', meta, 'bytes', 0 - b)
  end
  -- dropChannel drops c whole: its counts say what it held.
  local function dropChannel(c, why)
    channels = channels - 1
    account(c, tonumber(redis.call('HGET', sizes, 'n:' .. c) or '0'), 0, why)
  end
  -- dropOldest drops the oldest events of c up to the id upto, at most k of
  -- them, fewer once they free need bytes (need false: all k); it answers
  -- the bytes they freed (0: none was there).
  local function dropOldest(c, k, upto, need, why)
    k = math.min(k, events)
    if k <= 0 then return 0 end
    local es = redis.call('XRANGE', prefix .. c, '-', upto, 'COUNT', k)
    local b, m = 0, 0
    for _, e in ipairs(es) do
      m = m + 1
      b = b + #e[2][2] + #e[2][4] + #(e[2][6] or '') + {{event_overhead}}
      if need and b >= need then break end
    end
    if m == 0 then return 0 end
    events = events - m
    local last = es[m][1]
    local ms, seq = idParts(last)
    -- Trimmed from the front rather than deleted one by one: Redis frees
    -- the stream's nodes as they empty.
    redis.call('XTRIM', prefix .. c, 'MINID', string.format('%d-%d', ms, seq + 1))
    gone(c, last)
    account(c, m, b, why)
    return b
  end
  local before = held()
  -- Channels not written to for the TTL hold only expired events.
  for _ = 1, 100 do
    local front = redis.call('ZRANGE', lru, 0, 0)[1]
    if not front or channels <= 0 or tonumber(redis.call('HGET', sizes, 'l:' .. front) or '0') >= floor then break end
    dropChannel(front, 2)
  end
  local mine, ids = {}, {}
  for i = 1, n do
    local c, name, data, exclude = entries[i][1], entries[i][2], entries[i][3], entries[i][4]
    local key = prefix .. c
    local ms = now
    local last = redis.call('HGET', sizes, 'l:' .. c)
    if last and tonumber(last) > tonumber(now) then ms = last end
    if not last then
      -- A new channel: its own cost. A stream the counts do not know (they
      -- expired before it, under a shorter TTL) is counted nowhere, so it
      -- goes.
      redis.call('UNLINK', key)
      local cost = {{channel_overhead}} + {{name_copies}} * #c
      redis.call('HSET', sizes, 'b:' .. c, cost)
      redis.call('HINCRBY', meta, 'bytes', cost)
    end
    local id
    if exclude ~= '' then
      id = redis.call('XADD', key, ms .. '-*', 'e', name, 'd', data, 'x', exclude)
    else
      id = redis.call('XADD', key, ms .. '-*', 'e', name, 'd', data)
    end
    if not last then redis.call('HSET', sizes, 's:' .. c, id) end
    redis.call('PEXPIRE', key, ttl)
    local size = #name + #data + #exclude + {{event_overhead}}
    mine[#mine + 1] = {c, id, size}
    ids[#ids + 1] = id
    redis.call('HSET', sizes, 'l:' .. c, ms)
    redis.call('HINCRBY', sizes, 'b:' .. c, size)
    local count = redis.call('HINCRBY', sizes, 'n:' .. c, 1)
    redis.call('HINCRBY', meta, 'bytes', size)
    redis.call('HINCRBY', meta, 'events', 1)
    redis.call('ZADD', lru, redis.call('HINCRBY', meta, 'seq', 1), c)
    while channels > 0 and redis.call('ZCARD', lru) > maxChannels do
      dropChannel(redis.call('ZRANGE', lru, 0, 0)[1], 4)
    end
    if count > maxEvents then
      dropOldest(c, count - maxEvents, '+', false, 1)
    end
    dropOldest(c, events, '(' .. floor .. '-0', false, 2)
  end
  -- The bytes, once the entries are in: the channel written least recently
  -- gives its oldest events, whole when all of it must go.
  while true do
    local over = held() - maxBytes
    if over <= 0 then break end
    local front = redis.call('ZRANGE', lru, 0, 0)[1]
    if not front then break end
    if tonumber(redis.call('HGET', sizes, 'b:' .. front) or '0') <= over then
      if channels <= 0 then break end
      dropChannel(front, 3)
    else
      if events <= 0 then break end
      if dropOldest(front, events, '+', over, 3) == 0 then
        if channels <= 0 then break end
        dropChannel(front, 3) -- its stream expired under it
      end
    end
  end
  -- Out of budget and over the bound: this call's own events go, so the app
  -- holds no more than before it.
  local i = 1
  while held() > math.max(maxBytes, before) and i <= #mine do
    local c, id, size = mine[i][1], mine[i][2], mine[i][3]
    if redis.call('XDEL', prefix .. c, id) == 1 then
      gone(c, id)
      account(c, 1, size, 3)
    end
    i = i + 1
  end
  redis.call('PEXPIRE', meta, ttl)
  redis.call('PEXPIRE', lru, ttl)
  redis.call('PEXPIRE', sizes, ttl)
  local h = redis.call('HMGET', meta, 'events', 'bytes')
  return {dropped[1], dropped[2], dropped[3], dropped[4], tonumber(h[1] or '0'), tonumber(h[2] or '0'),
    {{budget}} + n - events, {{budget}} - channels}, ids
end

-- histMark is what a recoverable subscription of channel c is told along
-- with its position: the history's generation, its count of channels
-- dropped whole and the time (ms), which histMissed compares with what it
-- finds later.
local function histMark(base, gen, now)
  return gen .. '/' .. (redis.call('HGET', base, 'drops') or '0') .. '/' .. string.format('%d', now)
end

-- histMissed returns why the events of channel c after the id after cannot
-- all be had ('' when they can) and, when they can, those up to the
-- channel's newest, oldest first, but for those excluded is the
-- connection of socket: {id, name, data} each. mark is histMark's answer
-- when the subscription was made; gen is the history's generation now;
-- maxEvents and floor (ms) the app's policy now; window (ms) how old the
-- first missed event may be, at now (ms).
local function histMissed(base, c, after, mark, gen, maxEvents, floor, window, now, socket)
  local sizes, drops = base .. ':sizes', base .. ':drops'
  local markGen, d0, at = string.match(mark, '^([^/]*)/(%d+)/(%d+)$')
  if markGen ~= gen then
    return 'gap' -- Redis lost its data since: the history with it
  end
  d0 = tonumber(d0)
  local since = redis.call('HGET', sizes, 's:' .. c)
  if not since or idLess(after, since) then
    -- The channel's log began after the position: complete only when no
    -- log of it went whole since the subscription, and none expired with
    -- the whole history (its count of drops starts again then): what came
    -- after the position and the subscription is not past the TTL.
    if math.max(idParts(after), tonumber(at)) < floor then return 'gap' end
    local s = redis.call('ZSCORE', drops, c)
    if s and tonumber(s) > d0 then return 'gap' end
    if tonumber(redis.call('HGET', base, 'drops') or '0') > d0 then
      local oldest = redis.call('ZRANGE', drops, 0, 0, 'WITHSCORES')
      if #oldest == 0 or tonumber(oldest[2]) > d0 + 1 then
        return 'gap' -- drops since then are forgotten: c may be one
      end
    end
    if not since then return '', {} end
  end
  local g = redis.call('HGET', sizes, 'g:' .. c)
  if g and idLess(after, g) then return 'gap' end
  local es = redis.call('XRANGE', base .. ':c:' .. c, '(' .. after, '+', 'COUNT', maxEvents + 1)
  if #es > maxEvents then return 'gap' end -- past the policy, which shrank
  local out = {}
  for i, e in ipairs(es) do
    local ms = idParts(e[1])
    if i == 1 and ms < floor then return 'gap' end
    if i == 1 and ms < now - window then return 'expired' end
    if e[2][6] ~= socket then
      out[#out + 1] = {e[1], e[2][2], e[2][4]}
    end
  end
  return '', out
end
`

// dropsKept is how many of the channels dropped whole a history remembers,
// for recovery to tell whether a channel it asks about was one.
const dropsKept = 1000

// luaScript is a script of the given parts, with the constants they name
// filled in.
func luaScript(parts ...string) *redis.Script {
	return redis.NewScript(strings.NewReplacer(
		"{{event_overhead}}", strconv.Itoa(eventlog.EventOverhead),
		"{{channel_overhead}}", strconv.Itoa(eventlog.ChannelOverhead),
		"{{name_copies}}", strconv.Itoa(eventlog.ChannelNameCopies),
		"{{budget}}", strconv.Itoa(TrimBudget),
		"{{drops_kept}}", strconv.Itoa(dropsKept),
		"{{count_above}}", strconv.Itoa(hub.CountThrottleAbove),
		"{{count_every_ms}}", strconv.FormatInt(hub.CountThrottleEvery.Milliseconds(), 10),
		"{{history_ms}}", strconv.FormatInt(StreamHistory.Milliseconds(), 10),
	).Replace(strings.Join(parts, "")))
}

// histAppendScript: KEYS meta lru sizes stream…; ARGV now_ms floor_ms
// max_events max_bytes max_channels ttl_ms token, then
// channel name data exclude per entry, in the order of the streams.
// Answers histAppend's numbers, without the ids. A call whose token is the
// last the app's history took is the same call again (go-redis sends a
// pipeline again when its answers were lost on the way): it appends
// nothing.
var histAppendScript = luaScript(histLib, `
local meta = KEYS[1]
if redis.call('HGET', meta, 'token') == ARGV[7] then
  local h = redis.call('HMGET', meta, 'events', 'bytes')
  return {0, 0, 0, 0, tonumber(h[1] or '0'), tonumber(h[2] or '0'), 0, 0}
end
redis.call('HSET', meta, 'token', ARGV[7])
local entries = {}
for i = 8, #ARGV, 4 do
  entries[#entries + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]}
end
local v = histAppend(meta, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], entries)
return v
`)
