-- sold.lua: after a commit, replace the hold keys of the booked seats by the sold marker.
-- Also used to repair the marker of seats the database knows are claimed.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag (its zset loses the seats)
-- ARGV[2]    booking id (36-character UUID)
-- ARGV[3..]  seat ids
--
-- Returns the number of seats marked.

local F = 2
local n, err = layout(F, 1, 1, false)
if not n then return err end
local id = ARGV[2]
if #id ~= 36 or not string.match(id, "^[0-9a-f-]+$") then return bad("booking id") end
for i = 1, n do
    redis.call("HSET", sk(i), seat(i, F), id)
    redis.call("DEL", hk(i))
    if ARGV[1] ~= "" then redis.call("ZREM", KEYS[2], seat(i, F)) end
end
return n
