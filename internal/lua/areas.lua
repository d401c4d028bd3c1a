-- areas.lua: give Redis a show's areas (engine/areas.go): each area's capacity, and its
-- held and sold counts from zero where Redis has none (a rebuild moves sold forward
-- through the place markers, mark.lua; a hold of places adds to held).
--
-- KEYS[1]    <base>gen: the show's counter (names the show's slot; not written)
-- ARGV       area id, capacity, area id, capacity, ...
-- Returns the number of areas.

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return redis.error_reply("HOLDFAST_BADARG keys") end
if #ARGV % 2 ~= 0 then return redis.error_reply("HOLDFAST_BADARG argument count") end
local base = string.sub(KEYS[1], 1, -4)
for i = 1, #ARGV, 2 do
    local c = tonumber(ARGV[i + 1])
    if not string.match(ARGV[i], "^[%w][%w._-]*$") or #ARGV[i] > 64 or not c or c < 1 or c > 1000000 then
        return redis.error_reply("HOLDFAST_BADARG area " .. ((i + 1) / 2))
    end
end
for i = 1, #ARGV, 2 do
    local k = base .. "ar:" .. ARGV[i]
    redis.call("HSET", k, "c", ARGV[i + 1])
    redis.call("HSETNX", k, "h", 0)
    redis.call("HSETNX", k, "s", 0)
end
return #ARGV / 2
