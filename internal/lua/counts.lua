-- counts.lua: move the seats booked per holder (<base>hc: tag -> "<version>:<seats>",
-- read by the hold scripts for the sale's holder limit) forward to what the database
-- says. A count is replaced only by one of a higher version (holder_seats.version), so
-- writes that arrive late, twice or out of order end where the database is.
--
-- KEYS[1]    <base>gen (the show's key prefix)
-- ARGV       triples: holder tag, version, seats
-- Returns how many counts moved.

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
if #ARGV % 3 ~= 0 then return bad("argument count") end
BASE = string.sub(KEYS[1], 1, -4)
local moved = 0
for i = 1, #ARGV, 3 do
    local tag, v, c = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if not is_hex(tag, 32) then return bad("holder tag") end
    if not is_uint(v, 1, 9007199254740991) or not is_uint(c, 0, 1000000000) then return bad("count") end
    local cur = redis.call("HGET", BASE .. "hc", tag)
    local cv = cur and tonumber(string.match(cur, "^(%d+):")) or 0
    if tonumber(v) > cv then
        redis.call("HSET", BASE .. "hc", tag, v .. ":" .. c)
        moved = moved + 1
    end
end
return moved
