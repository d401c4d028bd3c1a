-- verify.lua: is this hold still current? Read-only.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4..]  seat ids
--
-- Returns 1 when every seat holds this token and generation, else 0.

local F = 3
local n, err = hold_layout(F)
if not n then return err end
if owned(n, ARGV[2], ARGV[3], ARGV[1]) then return 1 end
return 0
