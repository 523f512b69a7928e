-- ACQUIRE_CHECKED_SCRIPT as it was before the epoch's identity (redlock-core/src/command.rs at
-- e13eb12): what clients of the previous release run, for the mixed-version test.
local n = #KEYS - 1
local epoch = tonumber(redis.call('GET', KEYS[#KEYS]))
if epoch ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not epoch then
    redis.call('SET', KEYS[#KEYS], now)
    epoch = now
  end
  local young = tonumber(ARGV[3]) - (now - epoch)
  if young > 0 then return -young end
end
if n == 1 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
  return 0
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
