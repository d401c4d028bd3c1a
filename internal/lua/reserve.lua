-- reserve.lua: a batch's Redis check of one confirmation, which also reserves the hold for
-- the batch: from here until the batch decides, the hold cannot be released, extended or
-- reserved by another batch, and it cannot expire. So a Release and a Confirm of one hold
-- never both succeed, and no other hold is granted on its seats while the booking
-- commits: the keys stay until mark.lua replaces them with the sold markers (committed)
-- or unreserve.lua gives the hold back as it was (refused, rolled back).
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation: the hold's, or the one it had before regen.lua re-issued it
-- ARGV[4]    commit id: 32 lowercase hex digits, the confirmation's booking id
-- ARGV[5]    reservation life in ms: the hold lives at least this long from now, long
--            enough for the batch to decide and, should its process die after COMMIT,
--            for the marker repair to write the sold markers
-- ARGV[6..]  seat ids
--
-- Returns, like verify.lua, {the hold's current generation, its remaining life in ms}
-- once it is reserved for this commit id (again: a retried batch, or one whose COMMIT is
-- pending, only lengthens the reservation to life when it is shorter), {-1, 0}
-- when every seat is sold by a booking of this very generation, {-2, 0} when another
-- batch has it reserved, else {0, 0}. Writes a feed entry only when it lengthened the hold.

local F = 5
local n, err = hold_layout(F)
if not n then return err end
local tag, token, gen, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not is_hex(id, 32) then return bad("commit id") end
if not is_uint(ARGV[5], 1, 86400000) then return bad("reservation life") end
local life = tonumber(ARGV[5])

local created, cur, commit = owned(n, token, gen, tag)
if not created then
    for i = 1, n do
        if redis.call("HGET", sk(i), seat(i, F)) ~= gen then return {0, 0} end
    end
    return {-1, 0}
end
if commit ~= "" and commit ~= id then return {-2, 0} end

-- lengthen makes every key of the hold live life ms from now (with its holder's entry
-- and its place in the index), and says so in the feed.
local function lengthen(now)
    for i = 1, n do
        redis.call("PEXPIREAT", hk(i), now + life)
        if tag ~= "" then redis.call("ZADD", KEYS[2], "XX", now + life, seat(i, F)) end
        held_until(seat(i, F), now + life)
        index_held(i, seat(i, F), now + life)
    end
    if tag ~= "" and redis.call("EXISTS", KEYS[2]) == 1 and redis.call("PTTL", KEYS[2]) < life then
        redis.call("PEXPIRE", KEYS[2], life)
    end
    feed({"h", seat_list(F), "x", int(now + life)})
end

local now = now_ms()
local ttl = redis.call("PTTL", hk(1))
if commit == id then
    -- Reserved already by this commit (a retried batch, or one whose COMMIT is still
    -- pending and keeps its reservation alive): only lengthened, when shorter than life.
    if ttl < life then
        lengthen(now)
        ttl = life
    end
    return {tonumber(cur), ttl}
end
local exp = now + ttl
for i = 1, n do
    redis.call("SET", hk(i), redis.call("GET", hk(i)) .. "|" .. id .. ":" .. int(exp), "KEEPTTL")
end
if ttl < life then
    lengthen(now)
    ttl = life
end
return {tonumber(cur), ttl}
