-- recount.lua: set the seats booked per holder (<base>hc, see counts.lua) to what the
-- database says, whatever their versions. The only write of a count that does not
-- compare versions: reconciliation (reconcile.go) runs it, where a failover to an
-- asynchronous standby left counts of bookings the new primary never had, at versions
-- above the new primary's, which counts.lua would keep forever. A count is changed only
-- if it is still the value reconciliation read before it read the database (compare and
-- set), so a count written since, by a confirmation, is left alone.
--
-- KEYS[1]    <base>gen (the show's key prefix)
-- ARGV       triples: holder tag, the count as read ("" for none), the database's
--            ("<version>:<seats>", or "" for none: the count is deleted)
-- Returns how many counts changed.

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
if #ARGV % 3 ~= 0 then return bad("argument count") end
BASE = string.sub(KEYS[1], 1, -4)
for i = 1, #ARGV, 3 do
    local to = ARGV[i + 2]
    if not is_hex(ARGV[i], 32) then return bad("holder tag") end
    if to ~= "" and (#to > 30 or not string.match(to, "^[1-9]%d*:%d+$")) then return bad("count") end
end
local changed = 0
for i = 1, #ARGV, 3 do
    local tag, was, to = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if (redis.call("HGET", BASE .. "hc", tag) or "") == was then
        if to == "" then redis.call("HDEL", BASE .. "hc", tag) else redis.call("HSET", BASE .. "hc", tag, to) end
        changed = changed + 1
    end
end
return changed
