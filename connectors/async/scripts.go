package async

import "github.com/redis/go-redis/v9"

// The builtin back end's scripts. Each runs atomically in Redis; every one
// that acts for a claimer first reads the entry's owner from the pending
// list (XPENDING start end 1), because XACK, XCLAIM and HSET check nothing:
// a replica whose claim was taken over (XAUTOCLAIM after its lease ran out)
// is fenced here, and its late result is dropped.
//
// Job hash fields: tenant id queue lane path body hash headers created
// deadline (unix ms) state entry stream owner cancel deleted runs | status result
// code msg fetched.

// luaCommon is prepended to the scripts that end a request.
const luaCommon = `
local function decr(k)
  if tonumber(redis.call('DECR', k)) < 0 then redis.call('SET', k, 0) end
end
local function unqueue(stream, group, entry)
  if entry and entry ~= '' then
    redis.call('XACK', stream, group, entry)
    redis.call('XDEL', stream, entry)
  end
end
-- terminal stores the one visible result and releases everything the
-- request held: its entry, its backlog slots, its body.
local function terminal(job, stream, group, entry, tkey, qkey, chan, member, status, body, code, msg, ttl)
  redis.call('HSET', job, 'state', 'done', 'status', status, 'result', body, 'code', code, 'msg', msg)
  redis.call('HDEL', job, 'body', 'owner')
  redis.call('PEXPIRE', job, ttl)
  unqueue(stream, group, entry)
  decr(tkey)
  decr(qkey)
  redis.call('PUBLISH', chan, 'done ' .. member)
end
local function owner(stream, group, entry)
  local p = redis.call('XPENDING', stream, group, entry, entry, 1)
  if #p == 0 then return nil, 0 end
  return p[1][2], tonumber(p[1][4])
end
`

// KEYS job tkey qkey stream; ARGV hash body path headers created deadline
// ttl tlimit qlimit tenant id queue lane.
var submitScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  local f = redis.call('HMGET', KEYS[1], 'hash', 'state', 'deleted')
  if f[3] == '1' or f[1] ~= ARGV[1] then return {'conflict', ''} end
  return {'exists', f[2]}
end
local tl, ql = tonumber(ARGV[8]), tonumber(ARGV[9])
if tl > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= tl then return {'full_tenant', ''} end
if ql > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= ql then return {'full_queue', ''} end
local e = redis.call('XADD', KEYS[4], '*', 't', ARGV[10], 'i', ARGV[11])
redis.call('HSET', KEYS[1], 'tenant', ARGV[10], 'id', ARGV[11], 'queue', ARGV[12], 'lane', ARGV[13],
  'path', ARGV[3], 'body', ARGV[2], 'hash', ARGV[1], 'headers', ARGV[4], 'created', ARGV[5],
  'deadline', ARGV[6], 'state', 'queued', 'entry', e, 'stream', KEYS[4])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('INCR', KEYS[2])
redis.call('INCR', KEYS[3])
return {'created', 'queued'}
`)

// KEYS stream job tkey qkey dlq; ARGV group consumer entry now max ttl chan member.
var claimScript = redis.NewScript(luaCommon + `
local who, n = owner(KEYS[1], ARGV[1], ARGV[3])
if who ~= ARGV[2] then return {'lost'} end
local f = redis.call('HMGET', KEYS[2], 'entry', 'state', 'deleted', 'cancel', 'deadline', 'runs')
if f[1] ~= ARGV[3] or f[2] == 'done' then
  unqueue(KEYS[1], ARGV[1], ARGV[3])
  return {'skip'}
end
if f[3] == '1' then
  redis.call('DEL', KEYS[2])
  unqueue(KEYS[1], ARGV[1], ARGV[3])
  decr(KEYS[3]) decr(KEYS[4])
  return {'skip'}
end
if f[4] == '1' then
  terminal(KEYS[2], KEYS[1], ARGV[1], ARGV[3], KEYS[3], KEYS[4], ARGV[7], ARGV[8], 0, '', 'CANCELLED', 'cancelled before it ran', ARGV[6])
  return {'skip'}
end
if tonumber(f[5]) <= tonumber(ARGV[4]) then
  terminal(KEYS[2], KEYS[1], ARGV[1], ARGV[3], KEYS[3], KEYS[4], ARGV[7], ARGV[8], 0, '', 'DEADLINE_EXCEEDED', 'deadline exceeded in the queue', ARGV[6])
  return {'skip'}
end
-- Runs, not Redis deliveries: the stream's delivery counter also counts
-- deliveries whose claim Redis refused (at its memory limit, say), so a
-- full Redis would dead-letter requests that never ran.
local runs = tonumber(f[6] or '0')
if runs >= tonumber(ARGV[5]) then
  redis.call('XADD', KEYS[5], '*', 'member', ARGV[8], 'entry', ARGV[3], 'runs', runs, 'deliveries', n)
  terminal(KEYS[2], KEYS[1], ARGV[1], ARGV[3], KEYS[3], KEYS[4], ARGV[7], ARGV[8], 0, '', 'DEAD_LETTERED',
    'started ' .. runs .. ' times without a result (max_deliveries)', ARGV[6])
  return {'dead'}
end
redis.call('HSET', KEYS[2], 'state', 'in_progress', 'owner', ARGV[2], 'runs', runs + 1)
local j = redis.call('HMGET', KEYS[2], 'path', 'body', 'headers', 'deadline')
return {'run', j[1], j[2], j[3], j[4], tostring(runs + 1)}
`)

// KEYS stream job tkey qkey; ARGV group consumer entry status body code msg ttl chan member.
var finishScript = redis.NewScript(luaCommon + `
local who = owner(KEYS[1], ARGV[1], ARGV[3])
if who ~= ARGV[2] then return 0 end
local f = redis.call('HMGET', KEYS[2], 'entry', 'state', 'deleted')
if f[1] ~= ARGV[3] or f[2] == 'done' then
  unqueue(KEYS[1], ARGV[1], ARGV[3])
  return 0
end
if f[3] == '1' then
  redis.call('DEL', KEYS[2])
  unqueue(KEYS[1], ARGV[1], ARGV[3])
  decr(KEYS[3]) decr(KEYS[4])
  return 1
end
terminal(KEYS[2], KEYS[1], ARGV[1], ARGV[3], KEYS[3], KEYS[4], ARGV[9], ARGV[10], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
return 1
`)

// KEYS stream job; ARGV group consumer entry. -1: lost the claim; 1: a
// cancel was asked for; 0: renewed.
var renewScript = redis.NewScript(luaCommon + `
local who = owner(KEYS[1], ARGV[1], ARGV[3])
if who ~= ARGV[2] then return -1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
local f = redis.call('HMGET', KEYS[2], 'cancel', 'deleted')
if f[1] == '1' or f[2] == '1' then return 1 end
return 0
`)

// KEYS stream job; ARGV group consumer entry. Puts a claimed request back
// at the end of its stream (a worker answered 429): a fresh entry, so the
// refusal does not count as a run towards max_deliveries.
var requeueScript = redis.NewScript(luaCommon + `
local who = owner(KEYS[1], ARGV[1], ARGV[3])
if who ~= ARGV[2] then return 0 end
local f = redis.call('HMGET', KEYS[2], 'entry', 'state', 'tenant', 'id')
if f[1] ~= ARGV[3] or f[2] ~= 'in_progress' then return 0 end
unqueue(KEYS[1], ARGV[1], ARGV[3])
local e = redis.call('XADD', KEYS[1], '*', 't', f[3], 'i', f[4])
redis.call('HSET', KEYS[2], 'state', 'queued', 'entry', e)
redis.call('HDEL', KEYS[2], 'owner')
-- The refused run is not counted either.
if tonumber(redis.call('HINCRBY', KEYS[2], 'runs', -1)) < 0 then redis.call('HSET', KEYS[2], 'runs', 0) end
return 1
`)

// KEYS job; ARGV grace.
var fetchScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'state', 'deleted', 'status', 'result', 'code', 'msg', 'fetched', 'deadline')
if not f[1] or f[2] == '1' then return {'unknown'} end
if f[1] == 'done' then
  if f[7] ~= '1' then
    -- PEXPIRE first: a Redis at its memory limit refuses HSET as a
    -- script's first write, and a result must stay readable then (fetching
    -- results is how memory comes back). pcall: the flag only saves work.
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl < 0 or ttl > tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
    redis.pcall('HSET', KEYS[1], 'fetched', '1')
  end
  return {'done', f[3], f[4], f[5] or '', f[6] or ''}
end
return {f[1], f[8] or '0'}
`)

// KEYS job tkey qkey; ARGV keep chan member ttl.
var cancelScript = redis.NewScript(luaCommon + `
local f = redis.call('HMGET', KEYS[1], 'state', 'entry', 'stream')
if not f[1] then return 0 end
if f[1] == 'done' then
  if ARGV[1] == '0' then redis.call('DEL', KEYS[1]) end
  return 1
end
if f[1] == 'queued' then
  -- Not claimed: end it here. If a dispatcher read the entry but has not
  -- run its claim yet, the claim finds the job gone or done and skips it.
  redis.call('XDEL', f[3], f[2])
  decr(KEYS[2]) decr(KEYS[3])
  if ARGV[1] == '0' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'state', 'done', 'status', 0, 'result', '', 'code', 'CANCELLED', 'msg', 'cancelled before it ran')
    redis.call('HDEL', KEYS[1], 'body')
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
  redis.call('PUBLISH', ARGV[2], 'done ' .. ARGV[3])
  return 1
end
if ARGV[1] == '0' then
  redis.call('HSET', KEYS[1], 'deleted', '1', 'cancel', '1')
else
  redis.call('HSET', KEYS[1], 'cancel', '1')
end
redis.call('PUBLISH', ARGV[2], 'cancel ' .. ARGV[3])
return 1
`)
