"""The Lua scripts behind `RedisStore`'s leases: each runs atomically in Redis, so replicas never both take a last place.

Server time, so replicas agree; groups are sorted sets of member → deadline (ms), each key's TTL past its last deadline.
"""

LEASE = """
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local ttl = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if not redis.call('ZSCORE', key, ARGV[1]) and redis.call('ZCARD', key) >= tonumber(ARGV[2 + i]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + ttl, ARGV[1])
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 0
"""
"""KEYS: the groups; ARGV: member, TTL (ms), then each group's limit. Returns the 1-based index of the first full
group (nothing taken), or 0 when `member` now holds every group."""

RENEW = """
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  if redis.call('ZADD', key, 'XX', 'CH', now + ttl, ARGV[1]) == 1 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return 0
"""
"""KEYS: the groups; ARGV: member, TTL (ms). Moves the member's deadline only where it is still held (`XX`)."""
