-- extend.lua: give a hold a new TTL, only for its owner, only within its maximum age.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4]    new ttl in milliseconds, 1..86400000
-- ARGV[5]    maximum total age of a hold in milliseconds
-- ARGV[6..]  seat ids
--
-- With an idempotency key (common.lua: idem_open), a retry of the request answers
-- {"REPLAY", token, the first call's "OK" reply with "" for its feed entry id}, and
-- another request under the key {"KEYREUSED"}, without running again.
--
-- Returns {"OK", expires_ms, feed entry id}, {"LOST"} (not this hold: nothing changed),
-- {"LIMIT", deadline_ms} (the new expiry would pass created + max age), {"BUSY"} (a
-- batch is committing this hold, see reserve.lua: nothing changed), or {"LAPSED",
-- commit id} (a batch's reservation of it lapsed: nothing changed, see release.lua).

local F = 5
local I, ierr = idem_open()
if not I then return ierr end
local n, err = hold_layout(F)
if not n then return err end
local replay = idem_replay(I)
if replay then return replay end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]
if not is_uint(ARGV[4], 1, 86400000) then return bad("ttl") end
if not is_uint(ARGV[5], 1, 86400000) then return bad("max age") end
local ttl, max_age = tonumber(ARGV[4]), tonumber(ARGV[5])

local created, _, commit, lapsed = owned(n, token, gen, tag)
if not created then return {"LOST"} end
if commit ~= "" then return {"BUSY"} end
if lapsed ~= "" then return {"LAPSED", lapsed} end
local now = now_ms()
if now + ttl > created + max_age then return {"LIMIT", created + max_age} end
for i = 1, n do
    redis.call("PEXPIREAT", hk(i), now + ttl)
    if tag ~= "" then redis.call("ZADD", KEYS[2], "XX", now + ttl, seat(i, F)) end
    held_until(seat(i, F), now + ttl)
    index_held(i, seat(i, F), now + ttl)
end
if tag ~= "" and redis.call("EXISTS", KEYS[2]) == 1 and redis.call("PTTL", KEYS[2]) < ttl then
    redis.call("PEXPIRE", KEYS[2], ttl)
end
return idem_keep(I, token, {"OK", now + ttl, feed({"h", seat_list(F), "x", int(now + ttl)})}, 3)
