package fleet

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// The Lua scripts. Each runs atomically in Redis. Times are microseconds:
// the caller's when ARGV[1] is not empty (CallerClock), else Redis's TIME.
// Numbers go in and out as strings ('%.17g'), so no precision is lost to
// Redis's integer conversion of Lua numbers.
//
// Every script starts with ARGV = now, member, ttl, expect ('1': the member
// believes its lease is live, so Redis not knowing it means Redis lost it).
//
// Lane scripts take KEYS = members, lane state, lane held, lane active,
// lanes, lane limits, lane acks, member-job (laneKeys), and after the four
// common ARGV: seq, mine, refunds ×4 (cumulative, one per dimension:
// requests, input, output, combined tokens); their reply is {code, wait
// ns, taken ×4, marks ×4 (the lane's cumulative spending before a grant),
// (limit, depth, level, seen) ×4, members, lost, stored seq, stored
// permits}, a bucket's four empty while it is unknown.
//
// The bucket model is budget.Local's (docs/control.md): refill at limit/60
// per second up to the learned depth; the reserve a share of the depth;
// Observe sets limit and depth, lowers the level to a remaining surely
// lower, raises it to one surely higher (less the spending since the grant
// and the rounding slack) after budget.RaiseAfter calm answers, and a
// changed limit keeps the level.

// prelude is shared by every script.
var prelude = `
local function num(x) return string.format('%.17g', x) end
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local me, ttl, expect = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
-- renew drops expired members and extends this one's lease. It returns the
-- live members and whether this member's lease was lost: it expected one
-- and Redis had none (a restart that lost the data, or a lapse).
local function renew(kMembers)
  local s = redis.call('ZSCORE', kMembers, me)
  local lost = expect and not (s and tonumber(s) >= now)
  redis.call('ZREMRANGEBYSCORE', kMembers, '-inf', '(' .. num(now))
  redis.call('ZADD', kMembers, num(now + ttl), me)
  return redis.call('ZCARD', kMembers), lost
end
-- post records this member's permits on a lane and its cumulative refunds
-- r, unless a call of a later (or the same) sequence number has already:
-- a repeat, or a call overtaken by a later one, changes nothing. It
-- returns whether it applied, the refunds not applied before (a member
-- Redis has no record of — first call, or data lost — applies none), and
-- the stored sequence number and permits.
local function post(kHeld, kAcks, seq, mine, r)
  local rec = redis.call('HGET', kAcks, me)
  local base = r
  if rec then
    local f = {}
    for x in string.gmatch(rec, '%S+') do f[#f + 1] = tonumber(x) end
    if seq <= f[1] then
      return false, {0, 0, 0, 0}, f[1], tonumber(redis.call('HGET', kHeld, me)) or 0
    end
    base = {f[2], f[3], f[4], f[5] or 0}
  end
  redis.call('HSET', kAcks, me, num(seq) .. ' ' .. num(r[1]) .. ' ' .. num(r[2]) .. ' ' .. num(r[3]) .. ' ' .. num(r[4]))
  if mine > 0 then redis.call('HSET', kHeld, me, num(mine)) else redis.call('HDEL', kHeld, me) end
  return true, {r[1] - base[1], r[2] - base[2], r[3] - base[3], r[4] - base[4]}, seq, mine
end
local N = 4
local RAISE_AFTER = ` + strconv.Itoa(budget.RaiseAfter) + `
local dims = {'r', 'i', 'o', 'k'}
-- load reads a lane's buckets refilled to now (false: unknown). Each has
-- limit l (per minute), depth d, seen s, level v at time t, cumulative
-- spending c (budget.Grant's mark) and calm q (answers since one lowered
-- the level).
local function load(kState)
  local fields = {}
  for k = 1, N do
    for _, f in ipairs({'l', 'd', 's', 'v', 't', 'c', 'q'}) do fields[#fields + 1] = dims[k] .. f end
  end
  local raw = redis.call('HMGET', kState, unpack(fields))
  local b = {}
  for k = 1, N do
    local o = 7 * (k - 1)
    local l = tonumber(raw[o + 1])
    if l then
      local d, s, v, t = tonumber(raw[o + 2]) or l, tonumber(raw[o + 3]) or 0, tonumber(raw[o + 4]), tonumber(raw[o + 5])
      if now > t then
        if v < d then v = math.min(d, v + (now - t) / 1000000 * l / 60) end
        t = now
      end
      b[k] = {l = l, d = d, s = s, v = v, t = t, c = tonumber(raw[o + 6]) or 0, q = tonumber(raw[o + 7]) or 0}
    else
      b[k] = false
    end
  end
  return b
end
local function save(kState, b)
  for k = 1, N do
    if b[k] then
      local x = dims[k]
      redis.call('HSET', kState, x .. 'l', num(b[k].l), x .. 'd', num(b[k].d), x .. 's', num(b[k].s),
        x .. 'v', num(b[k].v), x .. 't', num(b[k].t), x .. 'c', num(b[k].c), x .. 'q', num(b[k].q))
    end
  end
end
-- refund adds token deltas (taken − actual) to the known buckets. The
-- cumulative spending only grows (an actual above the charge): a refund of
-- an earlier grant is not spending a later answer may not have seen, so
-- taking it off would let a raise count it (budget.Local.Settle).
local function refund(b, delta)
  local any = false
  for k = 1, N do
    if b[k] and delta[k] ~= 0 then
      b[k].v = math.min(b[k].d, b[k].v + delta[k])
      if delta[k] < 0 then b[k].c = b[k].c - delta[k] end
      any = true
    end
  end
  return any
end
-- argsLane reads seq, mine and the refunds from ARGV[i ..].
local function argsLane(i)
  local r = {}
  for k = 1, N do r[k] = tonumber(ARGV[i + 1 + k]) end
  return tonumber(ARGV[i]), tonumber(ARGV[i + 1]), r
end
local function reply(code, wait, taken, b, members, lost, aseq, aheld, marks)
  local out = {tostring(code), num(wait)}
  for k = 1, N do out[#out + 1] = num(taken[k] or 0) end
  for k = 1, N do out[#out + 1] = num((marks or {})[k] or 0) end
  for k = 1, N do
    if b[k] then
      out[#out + 1] = num(b[k].l)
      out[#out + 1] = num(b[k].d)
      out[#out + 1] = num(b[k].v)
      out[#out + 1] = num(b[k].s)
    else
      for _ = 1, 4 do out[#out + 1] = '' end
    end
  end
  out[#out + 1] = tostring(members)
  out[#out + 1] = lost and '1' or '0'
  out[#out + 1] = num(aseq)
  out[#out + 1] = num(aheld)
  return out
end
`

// takeScript: ARGV 5–10 seq, mine, refunds ×4; then cap, reserve, demand
// ×4, active window, lane name, job, limit (the member's own lane limit).
//
// Fair share is per job: a job's permits are the sum over its live
// members, its limit the sum of its active members' limits. A job below
// ⌊cap ÷ active jobs⌋ is only held to the cap; at or above it, it may only
// take what leaves every other active job room for what it is owed (up to
// that share, and up to its limit).
var takeScript = redis.NewScript(prelude + `
local seq, mine, r = argsLane(5)
local cap, reserve = tonumber(ARGV[11]), tonumber(ARGV[12])
local d = {tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])}
local window, job, limit = tonumber(ARGV[17]), ARGV[19], tonumber(ARGV[20])
local members, lost = renew(KEYS[1])
redis.call('SADD', KEYS[5], ARGV[18])
redis.call('HSET', KEYS[2], 'cap', ARGV[11], 'window', ARGV[17])
redis.call('HSET', KEYS[8], me, job)
local applied, delta, aseq, aheld = post(KEYS[3], KEYS[7], seq, mine, r)
local b = load(KEYS[2])
refund(b, delta)
if lost or not applied then
  -- Redis lost this member (restart): no grant on a state that forgot the
  -- fleet's permits. An overtaken call: a later one has decided.
  save(KEYS[2], b)
  return reply(1, 0, {}, b, members, lost, aseq, aheld)
end
-- the live members' permits; dead members' records go
local held, total = {}, 0
local h = redis.call('HGETALL', KEYS[3])
for i = 1, #h, 2 do
  if redis.call('ZSCORE', KEYS[1], h[i]) then
    held[h[i]] = tonumber(h[i + 1])
    total = total + held[h[i]]
  else
    redis.call('HDEL', KEYS[3], h[i])
  end
end
for _, m in ipairs(redis.call('HKEYS', KEYS[7])) do
  if not redis.call('ZSCORE', KEYS[1], m) then redis.call('HDEL', KEYS[7], m) end
end
-- active jobs: a live member of theirs asked within the window
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. num(now - window))
redis.call('ZADD', KEYS[4], num(now), me)
redis.call('HSET', KEYS[6], me, ARGV[20])
local function jobOf(m) return redis.call('HGET', KEYS[8], m) or m end
local jobs, n = {}, 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  if redis.call('ZSCORE', KEYS[1], m) then
    local j = jobOf(m)
    if not jobs[j] then
      jobs[j] = {held = 0, lim = 0}
      n = n + 1
    end
    jobs[j].lim = jobs[j].lim + (tonumber(redis.call('HGET', KEYS[6], m)) or cap)
  else
    redis.call('ZREM', KEYS[4], m)
  end
end
for _, m in ipairs(redis.call('HKEYS', KEYS[6])) do
  if not redis.call('ZSCORE', KEYS[4], m) then redis.call('HDEL', KEYS[6], m) end
end
for m, x in pairs(held) do
  local j = jobs[jobOf(m)]
  if j then j.held = j.held + x end
end
if total >= cap then
  save(KEYS[2], b)
  return reply(1, 0, {}, b, members, false, aseq, aheld)
end
local fair = math.floor(cap / n)
if jobs[job].held >= fair then
  local owed = 0
  for j, s in pairs(jobs) do
    if j ~= job then owed = owed + math.max(0, math.min(fair, s.lim) - s.held) end
  end
  if total + owed >= cap then
    save(KEYS[2], b)
    return reply(1, 0, {}, b, members, false, aseq, aheld)
  end
end
local worst, wait = 0, 0
for k = 1, N do
  if b[k] and d[k] > 0 then
    local res = reserve * b[k].d
    local usable = b[k].v - res
    local want = math.min(d[k], b[k].d - res)
    if usable < want then
      local w = (want - usable) / (b[k].l / 60) * 1e9
      if w > wait then worst, wait = k + 1, w end
    end
  end
end
if worst > 0 then
  save(KEYS[2], b)
  return reply(worst, wait, {}, b, members, false, aseq, aheld)
end
local taken, marks = {}, {}
for k = 1, N do
  if b[k] then
    marks[k] = b[k].c
    b[k].v = b[k].v - d[k]
    b[k].c = b[k].c + d[k]
    taken[k] = d[k]
  end
end
save(KEYS[2], b)
redis.call('HSET', KEYS[3], me, num(mine + 1))
return reply(0, 0, taken, b, members, false, seq, mine + 1, marks)
`)

// observeScript: ARGV 5–10 seq, mine, refunds ×4; then (known, limit,
// depth, remaining, slack, noraise, mark) ×4. Permits and refunds first,
// then the view.
var observeScript = redis.NewScript(prelude + `
local seq, mine, r = argsLane(5)
local members, lost = renew(KEYS[1])
local applied, delta, aseq, aheld = post(KEYS[3], KEYS[7], seq, mine, r)
local b = load(KEYS[2])
refund(b, delta)
for k = 1, N do
  local o = 4 + 7 * k
  local known, l, dep, rem = ARGV[o], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), math.max(0, tonumber(ARGV[o + 3]))
  local slack, noraise, mark = tonumber(ARGV[o + 4]), ARGV[o + 5] == '1', tonumber(ARGV[o + 6])
  if known == '1' and l > 0 then
    if dep <= 0 or dep > l then dep = l end
    if not b[k] then
      b[k] = {l = l, d = dep, s = rem, v = math.min(rem, dep), t = now, c = 0, q = 0}
    else
      if b[k].l ~= l then
        -- a new limit: the old bucket's evidence goes, the level (what is
        -- in flight) stays
        b[k].l, b[k].s = l, 0
      end
      b[k].d = dep
      b[k].s = math.max(b[k].s, rem)
      -- the spending since the grant (a mark above the total: a grant of
      -- the local fallback's, whose marks are its own: no raise)
      local unseen = b[k].c - mark
      if rem + slack < b[k].v then
        b[k].v, b[k].q = rem, 0
      elseif rem - slack - unseen > b[k].v and b[k].q >= RAISE_AFTER and not noraise then
        b[k].v = rem - slack - unseen
      else
        b[k].q = b[k].q + 1
      end
      b[k].v = math.min(b[k].v, dep)
    end
  end
end
save(KEYS[2], b)
return reply(0, 0, {}, b, members, lost, aseq, aheld)
`)

// heartbeatScript renews the member's lease, records its info and job, and
// posts its permits and refunds on every lane it has. KEYS = members,
// member-info, member-job, then per lane: state, held, acks; ARGV after
// the common four: info, job, then per lane: seq, mine, refunds ×4.
// Returns {members, lost, rank (live members whose id sorts before this
// one's), then per lane: stored seq, stored permits}.
var heartbeatScript = redis.NewScript(prelude + `
local members, lost = renew(KEYS[1])
redis.call('HSET', KEYS[2], me, ARGV[5])
redis.call('HSET', KEYS[3], me, ARGV[6])
for _, k in ipairs({KEYS[2], KEYS[3]}) do
  for _, m in ipairs(redis.call('HKEYS', k)) do
    if not redis.call('ZSCORE', KEYS[1], m) then redis.call('HDEL', k, m) end
  end
end
local rank = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if m < me then rank = rank + 1 end
end
local out = {tostring(members), lost and '1' or '0', tostring(rank)}
for i = 0, (#KEYS - 3) / 3 - 1 do
  local k = 4 + 3 * i
  local seq, mine, r = argsLane(7 + 6 * i)
  local applied, delta, aseq, aheld = post(KEYS[k + 1], KEYS[k + 2], seq, mine, r)
  if applied then
    local b = load(KEYS[k])
    if refund(b, delta) then save(KEYS[k], b) end
  end
  out[#out + 1] = num(aseq)
  out[#out + 1] = num(aheld)
end
return out
`)

// leaveScript removes the member: KEYS = members, member-info, member-job,
// then each lane's held, active, limits and acks; ARGV = member.
var leaveScript = redis.NewScript(`
local me = ARGV[1]
redis.call('ZREM', KEYS[1], me)
redis.call('HDEL', KEYS[2], me)
redis.call('HDEL', KEYS[3], me)
for i = 4, #KEYS, 4 do
  redis.call('HDEL', KEYS[i], me)
  redis.call('ZREM', KEYS[i + 1], me)
  redis.call('HDEL', KEYS[i + 2], me)
  redis.call('HDEL', KEYS[i + 3], me)
end
return 1
`)
