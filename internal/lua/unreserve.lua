-- unreserve.lua: give back a hold that a batch reserved (reserve.lua) and did not commit:
-- the confirmation was refused, or the batch rolled back. The hold is again as it was,
-- with the expiry it had before the reservation; a hold whose expiry has passed meanwhile
-- is gone, as it would have been. A seat not reserved for this commit id is left alone;
-- one whose reservation lapsed (reserve.lua) is given back all the same.
-- A commit id can be reserved again after a give-back was sent for it (the settler
-- commits a confirmation again under its own booking id), so a give-back names which
-- reservation it means (ARGV[3]), and leaves a later one alone:
--   0   any of this commit id: its batch's own, once the batch has decided
--   T   only one whose end is at most T: a check whose reply was lost, T its batch's
--       wait plus the reservation's life (a later check of the id ends later)
--   -1  only one that has lapsed (its end has passed): Release's and Extend's give-back
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    commit id: 32 lowercase hex digits
-- ARGV[3]    which reservation: 0, T (ms) or -1, as above
-- ARGV[4..]  seat ids
--
-- Returns {seats given back, feed entry id or ""}.

local F = 3
local n, err = layout(F, 1, 1)
if not n then return err end
local tag, id, which = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not is_hex(id, 32) then return bad("commit id") end
if not which or which ~= math.floor(which) or which < -1 then return bad("which reservation") end

local now = now_ms()
-- meant: the reservation (its end, "" in a value without one) is the one this give-back names.
local function meant(cend)
    if which == 0 then return true end
    local e = tonumber(cend)
    if not e then return false end
    if which == -1 then return e <= now end
    return e <= which
end
local back, held, gone, exp_at = 0, {}, {}, nil
for i = 1, n do
    local v = redis.call("GET", hk(i))
    if v then
        local _, _, _, _, _, cid, cexp, cend = parse_hold(v)
        if cid == id and meant(cend) then
            back = back + 1
            local exp = tonumber(cexp)
            if exp > now then
                local lengthened = math.abs(now + redis.call("PTTL", hk(i)) - exp) > 2
                redis.call("SET", hk(i), hold_base(v), "PXAT", exp)
                if lengthened then
                    if tag ~= "" then redis.call("ZADD", KEYS[2], "XX", exp, seat(i, F)) end
                    held_until(seat(i, F), exp)
                    index_held(i, seat(i, F), exp)
                    held[#held + 1] = seat(i, F)
                    exp_at = exp
                end
            else
                redis.call("DEL", hk(i))
                if tag ~= "" then redis.call("ZREM", KEYS[2], seat(i, F)) end
                held_gone(seat(i, F))
                place_gone(seat(i, F))
                index_state(i, seat(i, F), now)
                gone[#gone + 1] = seat(i, F)
            end
        end
    end
end
local f = {}
if #held > 0 then f[#f + 1] = "h"; f[#f + 1] = table.concat(held, " "); f[#f + 1] = "x"; f[#f + 1] = int(exp_at) end
if #gone > 0 then f[#f + 1] = "d"; f[#f + 1] = table.concat(gone, " ") end
local fid = ""
if #f > 0 then fid = feed(f) end
return {back, fid}
