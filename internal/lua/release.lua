-- release.lua: drop a hold, only for its owner.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4..]  seat ids
--
-- Returns {"OK", feed entry id}, {"LOST"} (not this hold: nothing changed), or {"BUSY"}
-- (a batch is committing this hold, see reserve.lua: nothing changed; ask again once
-- the batch has decided).

local F = 3
local n, err = hold_layout(F)
if not n then return err end
local tag, token, gen = ARGV[1], ARGV[2], ARGV[3]

local created, _, commit = owned(n, token, gen, tag)
if not created then return {"LOST"} end
if commit ~= "" then return {"BUSY"} end
local now = now_ms()
for i = 1, n do
    redis.call("DEL", hk(i))
    if tag ~= "" then redis.call("ZREM", KEYS[2], seat(i, F)) end
    held_gone(seat(i, F))
    index_state(i, seat(i, F), now)
end
return {"OK", feed({"d", seat_list(F)})}
