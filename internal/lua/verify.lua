-- verify.lua: is this hold still current? Read-only.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation: the hold's, or the one it had before regen.lua re-issued it
-- ARGV[4..]  seat ids
--
-- Returns the hold's current generation when every seat holds this token (see owned in
-- common.lua), else 0.

local F = 3
local n, err = hold_layout(F)
if not n then return err end
local created, cur = owned(n, ARGV[2], ARGV[3], ARGV[1])
if created then return tonumber(cur) end
return 0
