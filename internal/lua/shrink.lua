-- shrink.lua: give back part of a hold and keep the rest under the same token,
-- generation and expiry, only for its owner, all or nothing.
--
-- KEYS       the common layout (common.lua), for every seat and place key of the hold
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4]    what to keep of each seat argument, space-separated in their order: 0 or 1
--            for a seat, 0 up to its count for a place key
-- ARGV[5..]  seat ids, then place keys (the hold as it is)
--
-- A seat kept keeps its key. A place key kept whole keeps its key; one kept in part is
-- renamed to the place key of the count kept ("<area>~<kept>~<hold id>", under the same
-- hash tag) with the same value and expiry, and its area has the rest back at once. A
-- seat or place key given back goes as on a release (no tombstone: the hold lives on).
--
-- With an idempotency key (common.lua: idem_open), a retry of the request answers
-- {"REPLAY", token, the first call's "OK" reply with "" for its feed entry id}, and
-- another request under the key {"KEYREUSED"}, without running again.
--
-- Returns {"OK", feed entry id}, {"LOST"} (not this hold: nothing changed), {"BUSY"} or
-- {"LAPSED", commit id} (a batch is committing the hold, or its reservation lapsed:
-- nothing changed, see release.lua).

local F = 4
local I, ierr = idem_open()
if not I then return ierr end
local n, err = hold_layout(F)
if not n then return err end
local replay = idem_replay(I)
if replay then return replay end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]
local keep, kept = {}, 0
for k in string.gmatch(ARGV[4], "%S+") do keep[#keep + 1] = tonumber(k) end
if #keep ~= n then return bad("keep count") end
for i = 1, n do
    local k, most = keep[i], units(seat(i, F))
    if not k or k ~= math.floor(k) or k < 0 or k > most then return bad("keep " .. i) end
    kept = kept + k
end
if kept == 0 then return bad("keep nothing") end

local created, _, commit, lapsed = owned(n, token, gen, tag)
if not created then return {"LOST"} end
if commit ~= "" then return {"BUSY"} end
if lapsed ~= "" then return {"LAPSED", lapsed} end
local now = now_ms()
local exp = now + math.max(redis.call("PTTL", hk(1)), 0)

local gone, moved = {}, {}
for i = 1, n do
    local s, k = seat(i, F), keep[i]
    if k == 0 then
        redis.call("DEL", hk(i))
        if tag ~= "" then redis.call("ZREM", KEYS[2], s) end
        held_gone(s)
        place_gone(s)
        index_state(i, s, now)
        gone[#gone + 1] = s
    elseif k < units(s) then
        local to = place_key(s, k, string.match(s, "~(%x+)$"))
        place_rename(i, s, to, exp, KEYS[2], KEYS[2])
        gone[#gone + 1] = s
        moved[#moved + 1] = to
    end
end
if #gone == 0 then return idem_keep(I, token, {"OK", ""}, 2) end
local fields = {"d", table.concat(gone, " ")}
if #moved > 0 then
    fields[3], fields[4], fields[5], fields[6] = "h", table.concat(moved, " "), "x", int(exp)
end
return idem_keep(I, token, {"OK", feed(fields)}, 2)
