-- resync.lua: rebuild a show's Redis state from the database.
--
-- KEYS       the common layout (common.lua) for the sold seats, then every sold bucket
--            of the show (cleared in "replace" mode)
-- ARGV[1]    holder tag (unused: "")
-- ARGV[2]    floor: the largest generation the database has accepted for the show
-- ARGV[3]    "replace" (drop markers the database does not have) or "merge" (only add)
-- ARGV[4..3+n]      seat ids the database says are sold
-- ARGV[4+n..3+2n]   their booking ids
--
-- Raises the counter to the floor (creating it when Redis lost it), writes every sold
-- marker, and drops holds on sold seats: they could never be confirmed.
-- Returns {markers written, counter repaired (0/1)}.

local F = 3
local n, err = layout(F, 2, 0, true)
if not n then return err end
if not is_uint(ARGV[2], 0, 9007199254740991) then return bad("floor") end
local mode = ARGV[3]
if mode ~= "replace" and mode ~= "merge" then return bad("mode") end
for i = 1, n do
    local id = ARGV[F + n + i]
    if #id ~= 36 or not string.match(id, "^[0-9a-f-]+$") then return bad("booking id " .. i) end
end

local floor = tonumber(ARGV[2])
local repaired = 0
local cur = redis.call("GET", KEYS[1])
if not cur or tonumber(cur) < floor then
    redis.call("SET", KEYS[1], floor)
    repaired = 1
end
if mode == "replace" then -- every bucket of the show: the per-seat ones and the rest
    for i = 3 + n, #KEYS do redis.call("DEL", KEYS[i]) end
end
for i = 1, n do
    redis.call("HSET", sk(i), seat(i, F), ARGV[F + n + i])
    redis.call("DEL", hk(i))
end
return {n, repaired}
