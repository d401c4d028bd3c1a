-- areas.lua: give Redis a show's areas (engine/areas.go): each area's capacity, and its
-- held and sold counts from zero where Redis has none (a rebuild moves sold forward
-- through the place markers, mark.lua; a hold of places adds to held).
--
-- The areas are one show's: they are written only while Redis's rules are that show's
-- (see sale_rules in common.lua; the rebuild gives Redis the rules first). An engine
-- whose copy is of a show deleted since, and created again with other areas, writes
-- nothing of the old areas over the new show's.
--
-- KEYS[1]    <base>gen: the show's counter (names the show's slot; not written)
-- ARGV[1]    the show's epoch
-- ARGV[2..]  area id, capacity, area id, capacity, ...
-- Returns {"OK", the number of areas}, {"STALE"} (Redis's rules are of a later show of
-- the id), {"CLOSED"} (the show is being deleted) or {"NORULES"} (Redis has no rules of
-- the show); but for "OK" nothing is written.

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
if not is_uint(ARGV[1], 1, 9007199254740991) then return bad("epoch") end
if #ARGV % 2 ~= 1 then return bad("argument count") end
for i = 2, #ARGV, 2 do
    local c = tonumber(ARGV[i + 1])
    if not string.match(ARGV[i], "^[%w][%w._-]*$") or #ARGV[i] > 64 or not c or c < 1 or c > 1000000 then
        return bad("area " .. (i / 2))
    end
end
local e, closed = rules_epoch(redis.call("GET", BASE .. "rules"))
local epoch = tonumber(ARGV[1])
if e > epoch then return {"STALE"} end
if e < epoch then return {"NORULES"} end
if closed then return {"CLOSED"} end
for i = 2, #ARGV, 2 do
    local k = BASE .. "ar:" .. ARGV[i]
    redis.call("HSET", k, "c", ARGV[i + 1])
    redis.call("HSETNX", k, "h", 0)
    redis.call("HSETNX", k, "s", 0)
end
return {"OK", (#ARGV - 1) / 2}
