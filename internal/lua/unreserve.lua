-- unreserve.lua: give back a hold that a batch reserved (reserve.lua) and did not commit:
-- the confirmation was refused, or the batch rolled back. The hold is again as it was,
-- with the expiry it had before the reservation; a hold whose expiry has passed meanwhile
-- is gone, as it would have been. A seat not reserved for this commit id is left alone;
-- one whose reservation lapsed (reserve.lua) is given back all the same.
-- A commit id can be reserved again after a give-back was sent for it (the settler
-- commits a confirmation again under its own booking id), so a give-back names which
-- reservation it means (ARGV[3]), and leaves a later one alone:
--   a nonce  only one made by the check of that nonce, or an earlier check of the id
--            (reserve.lua keeps the larger nonce): a batch's own once it has decided,
--            a check's whose reply was lost; never one a later check made
--   -1       only one that has lapsed (its end has passed): Release's and Extend's
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    commit id: 32 lowercase hex digits
-- ARGV[3]    which reservation: a nonce (16 lowercase hex digits) or -1, as above
-- ARGV[4..]  seat ids
--
-- Returns {seats given back, feed entry id or ""}.

local F = 3
local n, err = layout(F, 1, 1)
if not n then return err end
local tag, id, which = ARGV[1], ARGV[2], ARGV[3]
if not is_hex(id, 32) then return bad("commit id") end
if which ~= "-1" and not is_hex(which, 16) then return bad("which reservation") end

local now = now_ms()
-- meant: the reservation (its end and nonce, "" in a value an older holdfast wrote) is
-- the one this give-back names.
local function meant(cend, cnonce)
    if which == "-1" then
        local e = tonumber(cend)
        return e ~= nil and e <= now
    end
    return #cnonce == 16 and cnonce <= which
end
local back, held, gone, exp_at = 0, {}, {}, nil
for i = 1, n do
    local v = redis.call("GET", hk(i))
    if v then
        local _, _, _, _, _, cid, cexp, cend, cnonce = parse_hold(v)
        if cid == id and meant(cend, cnonce) then
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
