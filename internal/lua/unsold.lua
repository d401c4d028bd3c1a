-- unsold.lua: after a cancellation, drop the sold markers that still name the booking.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag (unused: "")
-- ARGV[2]    booking id
-- ARGV[3..]  seat ids
--
-- Returns the number of markers dropped.

local F = 2
local n, err = layout(F, 1, 1, false)
if not n then return err end
local id = ARGV[2]
if #id ~= 36 or not string.match(id, "^[0-9a-f-]+$") then return bad("booking id") end
local dropped = 0
for i = 1, n do
    if redis.call("HGET", sk(i), seat(i, F)) == id then
        redis.call("HDEL", sk(i), seat(i, F))
        dropped = dropped + 1
    end
end
return dropped
