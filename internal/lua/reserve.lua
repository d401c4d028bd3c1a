-- reserve.lua: a batch's Redis check of one confirmation, which also reserves the hold for
-- the batch: from here until the batch decides, the hold cannot be released, extended or
-- reserved by another batch, and it cannot expire. So a Release and a Confirm of one hold
-- never both succeed, and no other hold is granted on its seats while the booking
-- commits: the keys stay until mark.lua replaces them with the sold markers (committed)
-- or unreserve.lua gives the hold back as it was (refused, rolled back).
--
-- The reservation carries its own end, life ms from now by Redis's clock: past it, it
-- has lapsed (owned in common.lua) and the hold is as it was, whatever the hold's TTL
-- and whatever reply was lost (a batch that stopped waiting, a process that died). A
-- batch deciding longer (a COMMIT left pending) calls again with the same commit id,
-- which moves the end on. A call that runs past its late-check bound (ARGV[7]: Redis was
-- frozen or slow, or the call's connection delayed) reserves nothing; the batch may
-- stop waiting for the reply sooner, and then gives back what the call reserved until
-- that bound has passed (engine/groupcommit_giveback.go).
--
-- Each check carries a nonce, kept with the reservation: a give-back (unreserve.lua)
-- names the nonce of the check it gives back, and leaves alone a reservation that a later
-- check of the same commit id made (the settler commits a confirmation again under its
-- own booking id). An engine draws its nonces in increasing order, so a reservation keeps
-- the larger of its nonce and the check's: a check Redis runs late, after a later one of
-- the same id, does not take the later one's name.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation: the hold's, or the one it had before regen.lua re-issued it
-- ARGV[4]    commit id: 32 lowercase hex digits, the confirmation's booking id
-- ARGV[5]    the check's nonce: 16 lowercase hex digits, larger than any earlier check's
--            of the commit id
-- ARGV[6]    reservation life in ms: the reservation ends, and the hold lives at least,
--            this long from now: long enough for the batch to decide and, should its
--            process die after COMMIT, for the marker repair to write the sold markers
-- ARGV[7]    the late-check bound: the time (Unix ms) after which the call reserves nothing
-- ARGV[8..]  seat ids
--
-- Returns, like verify.lua, {the hold's current generation, its remaining life in ms},
-- followed by the hold's offer ("" for none, see offer_of), once it is reserved for this commit id (again: a retried batch, or one whose COMMIT is
-- pending, moves the end to life from now and lengthens the hold to that when shorter),
-- {-1, 0} when the hold made a booking (made_booking in common.lua), {-2, 0} when
-- another batch has it reserved, {-4, 0} when it ran past ARGV[7] (nothing changed),
-- else {0, 0}. Writes a feed entry only when it lengthened the hold.

local F = 7
local n, err = hold_layout(F)
if not n then return err end
local tag, token, gen, id, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not is_hex(id, 32) then return bad("commit id") end
if not is_hex(nonce, 16) then return bad("nonce") end
if not is_uint(ARGV[6], 1, 86400000) then return bad("reservation life") end
if not is_uint(ARGV[7], 0, 9007199254740991) then return bad("reply deadline") end
local life = tonumber(ARGV[6])
local now = now_ms()
if now > tonumber(ARGV[7]) then return {-4, 0} end

local created, cur, commit = owned(n, token, gen, tag)
if not created then
    if made_booking(n, F, token, gen) then return {-1, 0} end
    return {0, 0}
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

local ttl = redis.call("PTTL", hk(1))
local own = redis.call("PEXPIRETIME", hk(1)) -- exact: now + ttl mixes two clocks, 1 ms apart at times
-- Each key gets the reservation: this commit id and nonce (a later check's, kept), the
-- hold's own expiry (kept from the reservation it renews), and the end.
for i = 1, n do
    local v = redis.call("GET", hk(i))
    local _, _, _, _, _, cid, cexp, _, cnonce = parse_hold(v)
    if commit ~= id or cexp == "" then cexp = int(own) end
    local keep = nonce
    if cid == id and #cnonce == 16 and cnonce > nonce then keep = cnonce end
    redis.call("SET", hk(i), hold_base(v) .. "|" .. id .. keep .. ":" .. cexp .. ":" .. int(now + life), "KEEPTTL")
end
if ttl < life then
    lengthen(now)
    ttl = life
end
return {tonumber(cur), ttl, offer_of(token)}
