-- verify.lua: is this hold still current? Read-only.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation: the hold's, or the one it had before regen.lua re-issued it
-- ARGV[4..]  seat ids
--
-- Returns {the hold's current generation, its remaining life in ms} when every seat
-- holds this token (see owned in common.lua); {-1, 0} when it does not but a seat's
-- marker is of this very generation, sold or cancelled (the hold made a booking: its
-- keys were replaced by the markers, or dropped by the cancellation's tombstone); {-2, remaining life} when a batch is committing the hold
-- (see reserve.lua: ask again once it has decided); else {0, 0}. A lapsed reservation
-- is no commit (owned): the hold is current, and the batch's own check decides.

local F = 3
local n, err = hold_layout(F)
if not n then return err end
local created, cur, commit = owned(n, ARGV[2], ARGV[3], ARGV[1])
if created and commit ~= "" then return {-2, redis.call("PTTL", hk(1))} end
if created then return {tonumber(cur), redis.call("PTTL", hk(1))} end
if made_booking(n, F, ARGV[2], ARGV[3]) then return {-1, 0} end
return {0, 0}
