-- mark.lua: move a show's sold markers forward to what the database says.
-- Serves every marker write: sold after a confirmation, the tombstone after a
-- cancellation, the repairs, and Resync (a page of seats at a time).
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag (unused: "")
-- ARGV[2]    floor: raise the show's counter to at least this, creating it; "-" leaves
--            the counter alone
-- ARGV[3..2+n]      seat ids
-- ARGV[3+n..2+2n]   each seat's marker: "g" (sold by the booking of generation g) or
--                   "-g" (that booking was cancelled), "-g@<booking id, 32 hex>" for
--                   the tombstone of a cancellation that knows its booking
--
-- A marker only moves forward (see mark_order in common.lua), so a write that arrives
-- late, twice or out of order never undoes a later one. When a seat ends up sold, a hold
-- on it whose generation is not above the sale's is dropped (with its holder's count):
-- it was taken before the booking and can never confirm. A hold taken later (while the
-- marker was missing) is left to its owner, whose confirmation the claim refuses. When
-- a seat's tombstone that names its booking lands, the hold that made that booking —
-- of its generation, reserved by its batch under the booking's id — is dropped too: it
-- is spent, and its spent key (common.lua) says so for the life it had left. A hold of
-- the same generation that is not the booking's (Redis lost data and issued the
-- generation again) is left alone, as is every hold under a tombstone that names no
-- booking (the repairs and Resync write those).
-- Every marker it moves and every hold it drops goes to the change feed, in one entry.
-- The booking id of a sale (from the reserved hold it replaces) is kept in
-- <base>booked by generation until the booking is cancelled.
-- Returns {markers moved, holds dropped, counter repaired (0/1), feed entry id or ""}.

local F = 2
local n, err = layout(F, 2, 0)
if not n then return err end
local floor = ARGV[2]
if floor ~= "-" and not is_uint(floor, 0, 9007199254740991) then return bad("floor") end
local by = {} -- by seat: the booking a tombstone names
for i = 1, n do
    local m = ARGV[F + n + i]
    local t, b = string.match(m, "^(%-[1-9]%d*)@(%x+)$")
    if t and is_hex(b, 32) then
        m, by[i] = t, b
        ARGV[F + n + i] = t
    end
    if not string.match(m, "^%-?[1-9]%d*$") or #m > 17 then return bad("marker " .. i) end
end

local repaired = 0
if floor ~= "-" then
    local cur = redis.call("GET", KEYS[1])
    if not cur or tonumber(cur) < tonumber(floor) then
        redis.call("SET", KEYS[1], floor)
        repaired = 1
    end
end

local moved, dropped = 0, 0
local sold, unsold, gone = {}, {}, {}
local changed = {} -- seats whose marker moved or whose hold was dropped
for i = 1, n do
    local s, m = seat(i, F), ARGV[F + n + i]
    local cur = redis.call("HGET", sk(i), s)
    local cg, cc = mark_order(cur)
    local ng, nc = mark_order(m)
    if ng > cg or (ng == cg and nc > cc) then
        local was, now_sold = is_sold(cur) and true or false, is_sold(m) and true or false
        redis.call("HSET", sk(i), s, m)
        moved, cur, cg = moved + 1, m, ng
        if now_sold ~= was then
            nsold_add(now_sold and units(s) or -units(s))
            place_marked(s, now_sold)
        end
        if is_sold(m) then
            sold[#sold + 1] = s
        else
            unsold[#unsold + 1] = s
            redis.call("HDEL", BASE .. "booked", ng)
        end
        changed[i] = true
    end
    local v = cur and redis.call("GET", hk(i))
    if v then
        local t, g, _, tag, _, cid = parse_hold(v)
        local spent = g and tonumber(g) == cg -- the hold that made this marker's booking
        -- The hold that made this booking, reserved by its batch: its commit id is the
        -- booking's id, kept by generation for reconciliation to name a booking a
        -- failover lost (<base>booked, dropped again by the cancellation).
        if spent and is_sold(cur) and cid ~= "" then
            redis.call("HSET", BASE .. "booked", g, cid)
        end
        -- A sold seat drops every hold taken before its booking. A tombstone that names
        -- its booking drops the hold that made it: its sold marker may come after the
        -- tombstone (an exchange racing the cancellation) or never, and must not leave
        -- the spent hold holding the seat.
        if not is_sold(cur) then spent = spent and by[i] ~= nil and cid == by[i] end
        if spent or (is_sold(cur) and (not g or tonumber(g) <= cg)) then
            if spent and not is_sold(cur) then
                local left = redis.call("PTTL", hk(i))
                if left > 0 then redis.call("SET", spent_key(t), "1", "PX", left) end
            end
            redis.call("DEL", hk(i))
            if tag and tag ~= "" then redis.call("ZREM", BASE .. "holder:" .. tag, s) end
            held_gone(s)
            place_gone(s)
            if spent then wl_done(t) end -- the hold booked (a waitlist's offer ends)
            dropped = dropped + 1
            gone[#gone + 1] = s
            changed[i] = true
        end
    end
end
if moved > 0 or dropped > 0 then
    local now = now_ms()
    for i = 1, n do
        if changed[i] then index_state(i, seat(i, F), now) end
    end
end
local id = ""
if moved > 0 or dropped > 0 then
    local f = {}
    if #sold > 0 then f[#f + 1] = "s"; f[#f + 1] = table.concat(sold, " ") end
    if #unsold > 0 then f[#f + 1] = "u"; f[#f + 1] = table.concat(unsold, " ") end
    if #gone > 0 then f[#f + 1] = "d"; f[#f + 1] = table.concat(gone, " ") end
    id = feed(f)
end
return {moved, dropped, repaired, id}
