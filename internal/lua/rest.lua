-- rest.lua: give back what a partial confirmation did not book, once its booking has
-- committed and its sold markers are written (mark.lua): the rest of the hold a batch
-- reserved for the commit id (reserve.lua) is released at once, as on a release.
--
-- KEYS       the common layout (common.lua), for the hold keys given back
-- ARGV[1]    holder tag
-- ARGV[2]    commit id: 32 lowercase hex digits, the booking's id
-- ARGV[3..]  seat ids and place keys of the hold that the booking did not take whole
--
-- A key not reserved for this commit id (gone already, or another hold's) is left alone.
-- The booking id is kept by generation in <base>booked, as mark.lua keeps it for a seat
-- whose key the sold marker replaces (a booking of places only in part has none).
-- Returns {keys given back, feed entry id or ""}.

local F = 2
local n, err = layout(F, 1, 1)
if not n then return err end
local tag, id = ARGV[1], ARGV[2]
if not is_hex(id, 32) then return bad("commit id") end

local now = now_ms()
local gone = {}
for i = 1, n do
    local s = seat(i, F)
    local v = redis.call("GET", hk(i))
    if v then
        local t, g, _, _, _, cid = parse_hold(v)
        if cid == id then
            wl_done(t) -- a waitlist's offer booked in part: its entry ends
            redis.call("HSET", BASE .. "booked", g, cid)
            redis.call("DEL", hk(i))
            if tag ~= "" then redis.call("ZREM", KEYS[2], s) end
            held_gone(s)
            place_gone(s)
            index_state(i, s, now)
            gone[#gone + 1] = s
        end
    end
end
if #gone == 0 then return {0, ""} end
return {#gone, feed({"d", table.concat(gone, " ")})}
