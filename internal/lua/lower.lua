-- lower.lua: set sold markers back to what the database says, where Redis is ahead of
-- it. The only script that moves a marker backwards: reconciliation (reconcile.go)
-- runs it after an asynchronous failover lost bookings whose markers Redis still has.
-- A marker is changed only if it is still the value reconciliation read before it read
-- the database (compare and set), so a marker written since — by a booking the
-- database does have — is left alone.
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag (unused: "")
-- ARGV[2..1+n]      seat ids
-- ARGV[2+n..1+2n]   each seat's marker as read ("g" or "-g")
-- ARGV[2+2n..1+3n]  each seat's marker from the database ("g", "-g", or "" for none)
-- Returns {markers lowered, feed entry id or ""}.

local F = 1
local n, err = layout(F, 3, 1)
if not n then return err end
for i = 1, n do
    local was, to = ARGV[F + n + i], ARGV[F + 2 * n + i]
    if not string.match(was, "^%-?[1-9]%d*$") or #was > 17 then return bad("marker read " .. i) end
    if to ~= "" and (not string.match(to, "^%-?[1-9]%d*$") or #to > 17) then return bad("marker " .. i) end
end

local lowered, sold, unsold = 0, {}, {}
local now = now_ms()
for i = 1, n do
    local s, was, to = seat(i, F), ARGV[F + n + i], ARGV[F + 2 * n + i]
    if redis.call("HGET", sk(i), s) == was then
        if to == "" then redis.call("HDEL", sk(i), s) else redis.call("HSET", sk(i), s, to) end
        lowered = lowered + 1
        if is_sold(was) ~= (is_sold(to ~= "" and to or nil) and true or false) then place_marked(s, not is_sold(was)) end
        if is_sold(to ~= "" and to or nil) then sold[#sold + 1] = s else unsold[#unsold + 1] = s end
        index_state(i, s, now)
    end
end
local id = ""
-- The waiting room's count of sold seats is counted again when next needed.
if lowered > 0 then redis.call("DEL", BASE .. "nsold") end
if lowered > 0 then
    local f = {}
    if #sold > 0 then f[#f + 1] = "s"; f[#f + 1] = table.concat(sold, " ") end
    if #unsold > 0 then f[#f + 1] = "u"; f[#f + 1] = table.concat(unsold, " ") end
    id = feed(f)
end
return {lowered, id}
