-- regen.lua: give a current hold a new generation above the database's high-water mark.
-- Used when the database refused a generation for a hold Redis still has: the counter
-- went backwards (Redis lost data), so raise it first, then re-issue.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation the hold has now
-- ARGV[4]    floor: the largest generation the database has accepted for the show
-- ARGV[5..]  seat ids
--
-- Returns {"OK", new_generation, repaired (1 when the counter was below the floor)}, or
-- {"LOST"} when the token no longer owns every seat with that generation.

local F = 4
local n, err = hold_layout(F)
if not n then return err end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]
if not is_uint(ARGV[4], 0, 9007199254740991) then return bad("floor") end
local floor = tonumber(ARGV[4])

local created = owned(n, token, gen, tag)
if not created then return {"LOST"} end
local repaired = 0
local cur = tonumber(redis.call("GET", KEYS[1]) or "0")
if cur < floor then
    redis.call("SET", KEYS[1], floor)
    repaired = 1
end
local new = redis.call("INCR", KEYS[1])
local value = token .. ":" .. new .. ":" .. created .. ":" .. tag
for i = 1, n do redis.call("SET", hk(i), value, "KEEPTTL") end
return {"OK", new, repaired}
