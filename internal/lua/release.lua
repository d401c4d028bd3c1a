-- release.lua: drop a hold, only for its owner.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4]    how long past the hold's expiry the release is remembered, in ms
-- ARGV[5..]  seat ids
--
-- A release leaves a tombstone, <base>released:<sha1 of "tag:token">, holding the time
-- it was released (ms), which lives until ARGV[4] past the hold's expiry: a later call
-- with the hold (which knows its tag and token) is told it was released.
--
-- With an idempotency key (common.lua: idem_open), a retry of the request answers
-- {"REPLAY", token, the first call's "OK" reply with "" for its feed entry id}, and
-- another request under the key {"KEYREUSED"}, without running again.
--
-- Returns {"OK", feed entry id}, {"LOST"} (not this hold: nothing changed), {"BUSY"}
-- (a batch is committing this hold, see reserve.lua: nothing changed; ask again once
-- the batch has decided), or {"LAPSED", commit id} (a batch's reservation of the hold
-- lapsed: nothing changed; the engine gives it back once the database says the batch
-- made no booking, then asks again).

local F = 4
local I, ierr = idem_open()
if not I then return ierr end
local n, err = hold_layout(F)
if not n then return err end
local replay = idem_replay(I)
if replay then return replay end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]
if not is_uint(ARGV[4], 1, 86400000) then return bad("memory") end

local created, _, commit, lapsed = owned(n, token, gen, tag)
if not created then return {"LOST"} end
if commit ~= "" then return {"BUSY"} end
if lapsed ~= "" then return {"LAPSED", lapsed} end
local now = now_ms()
local left = math.max(redis.call("PTTL", hk(1)), 0)
for i = 1, n do
    redis.call("DEL", hk(i))
    if tag ~= "" then redis.call("ZREM", KEYS[2], seat(i, F)) end
    held_gone(seat(i, F))
    place_gone(seat(i, F))
    index_state(i, seat(i, F), now)
end
redis.call("SET", BASE .. "released:" .. redis.sha1hex(tag .. ":" .. token), now, "PX", left + tonumber(ARGV[4]))
return idem_keep(I, token, {"OK", feed({"d", seat_list(F)})}, 2)
