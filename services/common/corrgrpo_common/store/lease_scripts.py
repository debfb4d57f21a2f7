"""The Lua scripts behind `RedisStore`'s leases and state writes: each runs atomically in Redis, so
replicas never both take a last place, nor both write over one version of a state.

Leases use server time, so replicas agree. A group is a sorted set of member → deadline (ms) and a hash
of member → amount whose field "" is the sum of the amounts, so a lease costs what has lapsed, not what is
held. Each key's TTL runs past its last deadline.
"""

LEASE = """
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local member, ttl = ARGV[1], tonumber(ARGV[2])
local function held(amounts, who)
  return tonumber(redis.call('HGET', amounts, who) or '0')
end
local function add(amounts, change)  -- HINCRBY refuses '-0'
  if change ~= 0 then redis.call('HINCRBY', amounts, '', change) end
end
for i = 1, #KEYS / 2 do
  local group, amounts = KEYS[2 * i - 1], KEYS[2 * i]
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', group, '-inf', now)) do
    add(amounts, -held(amounts, gone))
    redis.call('HDEL', amounts, gone)
  end
  redis.call('ZREMRANGEBYSCORE', group, '-inf', now)
  local amount, limit, mine = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]), held(amounts, member)
  if amount > mine and held(amounts, '') - mine + amount > limit then return i end
end
for i = 1, #KEYS / 2 do
  local group, amounts, amount = KEYS[2 * i - 1], KEYS[2 * i], tonumber(ARGV[1 + 2 * i])
  add(amounts, amount - held(amounts, member))
  redis.call('HSET', amounts, member, amount)
  redis.call('ZADD', group, now + ttl, member)
  for _, key in ipairs({group, amounts}) do
    if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  end
end
return 0
"""
"""KEYS: each group's sorted set, then its hash of amounts; ARGV: member, TTL (ms), then each group's
amount and limit. Returns the 1-based index of the first group without room (nothing taken), or 0 when
`member` now holds every group."""

RELEASE = """
for i = 1, #KEYS / 2 do
  local group, amounts = KEYS[2 * i - 1], KEYS[2 * i]
  local amount = tonumber(redis.call('HGET', amounts, ARGV[1]) or '0')
  if redis.call('ZREM', group, ARGV[1]) == 1 then
    if amount ~= 0 then redis.call('HINCRBY', amounts, '', -amount) end
    redis.call('HDEL', amounts, ARGV[1])
  end
end
return 0
"""
"""KEYS: as `LEASE`'s; ARGV: member."""

SET_STATE = """
if tonumber(redis.call('GET', KEYS[2]) or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[2], tostring(tonumber(ARGV[1]) + 1), 'PX', ARGV[3])
return 1
"""
"""KEYS: the state key, its version key; ARGV: the version replaced (0: none), the sealed value, TTL (ms).
Returns 1 when written, 0 when the version key holds another version."""
