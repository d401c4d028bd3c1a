-- reclaim.lua: give a holder's live holds of a show fresh tokens and generations (a
-- buyer who moved to another device). Each hold keeps its seats and its expiry; its old
-- token stops working at once (owned finds another token), and its new generation, from
-- the show's counter, is larger than any the database has fenced, so a confirmation
-- made with the old hold is refused by the fence too. Each hold's move is logged in the
-- show's hold moves (common.lua: move_log) for the event feed.
--
-- KEYS[1]    <base>gen             the show's generation counter
-- KEYS[2]    <base>holder:<tag>    the holder's live seats (zset seat -> expiry ms)
-- ARGV[1]    holder tag (32 lowercase hex digits: an anonymous hold has no holder)
-- ARGV[2]    seed: 32 lowercase hex digits, random per call; a hold's new token is the
--            first 32 hex digits of sha1(seed .. old token)
-- ARGV[3]    the holder's id (for the moves' log)
-- ARGV[4..]  tokens of holds to leave alone: their batch booked them (their sold
--            markers are owed)
--
-- The hold keys are <base>hold:<seat>, under the show's hash tag like KEYS. A hold with
-- places (their keys name a hash of the token, which Lua cannot recompute) is left as
-- it is.
--
-- Returns {"OK", token, generation, expires_ms, "seat seat ...", offer, token, ...}
-- (one group of five per reclaimed hold; the offer moves to the new token, "" for none), {"BUSY", token} when a batch is committing one of
-- the holder's holds (nothing changed; ask again once it has decided), {"LAPSED", token,
-- commit id, "seat seat ..."} when a batch's reservation of one of them lapsed and the
-- hold lives on (nothing changed; the engine gives those seats back as Release does,
-- once the database says that batch booked nothing, and asks again), or {"NOSTATE"}
-- when the counter is missing (Redis lost the show: the engine rebuilds it first).

local tag, seed, holder = ARGV[1], ARGV[2], ARGV[3]
if #KEYS ~= 2 or #ARGV < 3 then return bad("argument count") end
if not is_hex(tag, 32) then return bad("holder tag") end
if not is_hex(seed, 32) then return bad("seed") end
if string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
if KEYS[2] ~= BASE .. "holder:" .. tag then return bad("keys") end
if not show_known() then return {"NOSTATE"} end
local booked = {}
for i = 4, #ARGV do booked[ARGV[i]] = true end

local now = now_ms()
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
local holds, order, lapsed_hold = {}, {}, nil
for _, s in ipairs(redis.call("ZRANGE", KEYS[2], 0, -1)) do
    local v = redis.call("GET", BASE .. "hold:" .. s)
    local t, g, c, h, _, cid, cexp, cend = nil, nil, nil, nil, nil, "", "", ""
    if v then t, g, c, h, _, cid, cexp, cend = parse_hold(v) end
    local lapsed = cid ~= "" and cend ~= "" and tonumber(cend) <= now
    if not t or h ~= tag then
        redis.call("ZREM", KEYS[2], s) -- gone, or another holder's now
    elseif booked[t] then
        -- booked: its keys become sold markers
    elseif lapsed and tonumber(cexp) <= now then
        -- a reservation that lapsed past the hold's own expiry: the hold is gone
    elseif lapsed then
        -- its batch has ended without giving it back: the engine does, then asks again
        lapsed_hold = lapsed_hold or {t = t, cid = cid, seats = {}}
        if lapsed_hold.t == t and lapsed_hold.cid == cid then table.insert(lapsed_hold.seats, s) end
    elseif cid ~= "" then
        return {"BUSY", t} -- a batch is committing it
    else
        local hd = holds[t]
        if not hd then
            -- its expiry as Redis has it (ms), so the new token's is the same to the ms
            hd = {created = c, seats = {}, at = redis.call("PEXPIRETIME", BASE .. "hold:" .. s)}
            holds[t] = hd
            order[#order + 1] = t
        end
        hd.seats[#hd.seats + 1] = s
        if is_place(s) then hd.places = true end
    end
end

if lapsed_hold then
    return {"LAPSED", lapsed_hold.t, lapsed_hold.cid, table.concat(lapsed_hold.seats, " ")}
end
local out = {"OK"}
for _, t in ipairs(order) do
    local hd = holds[t]
    if not hd.places and hd.at > now then
        local gen = redis.call("INCR", KEYS[1])
        local token = string.sub(redis.sha1hex(seed .. t), 1, 32)
        local value = token .. ":" .. int(gen) .. ":" .. hd.created .. ":" .. tag
        for _, s in ipairs(hd.seats) do redis.call("SET", BASE .. "hold:" .. s, value, "KEEPTTL") end
        move_log("hold_reclaimed", token, gen, hd.at, hd.seats, holder, "")
        wl_done(t) -- a waitlist's offer reclaimed: the holder has it on the other device
        out[#out + 1] = token
        out[#out + 1] = gen
        out[#out + 1] = hd.at
        out[#out + 1] = table.concat(hd.seats, " ")
        out[#out + 1] = offer_move(t, token)
    end
end
return out
