-- regen.lua: give a current hold a new generation above the database's high-water mark.
-- Used when the database refused a generation for a hold Redis still has: the counter
-- went backwards (Redis lost data), so raise it first, then re-issue. The hold keeps its
-- first generation beside the new one, so its owner can still present the Hold it was
-- given (to confirm again, extend or release). Idempotent: when go-redis retries a call
-- whose reply was lost, the hold already has a generation above the floor, and that is
-- the answer.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation presented (the hold's, or its first)
-- ARGV[4]    floor: the largest generation the database has accepted for the show
-- ARGV[5..]  seat ids
--
-- Returns {"OK", generation, repaired (1 when the counter was below the floor)}, or
-- {"LOST"} when the token no longer owns every seat or a batch is committing the hold.

local F = 4
local n, err = hold_layout(F)
if not n then return err end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]
if not is_uint(ARGV[4], 0, 9007199254740991) then return bad("floor") end
local floor = tonumber(ARGV[4])

local created, cur, commit = owned(n, token, gen, tag)
if not created or commit ~= "" then return {"LOST"} end
if cur ~= gen and tonumber(cur) > floor then
    return {"OK", tonumber(cur), 0} -- re-issued already (a retried call)
end
local _, _, _, _, first = parse_hold(redis.call("GET", hk(1)))
if first == "" then first = cur end
local repaired = 0
local counter = tonumber(redis.call("GET", KEYS[1]) or "0")
if counter < floor then
    redis.call("SET", KEYS[1], int(floor))
    repaired = 1
end
local new = redis.call("INCR", KEYS[1])
local value = token .. ":" .. int(new) .. ":" .. int(created) .. ":" .. tag .. ":" .. first
for i = 1, n do redis.call("SET", hk(i), value, "KEEPTTL") end
return {"OK", new, repaired}
