-- wl.lua: a show's waitlists (engine/waitlist.go; their keys and offers: common.lua). By op:
--   "join"   puts the holder on the category's waitlist, once: an entry waiting or
--            offered is answered as it is, an expired one is replaced by a new one at
--            the end of the line; then makes the offers owed (the seats free now may fit)
--   "get"    brings the holder's entry up to its offer hold (settle, in wl_lib) and reads it
--   "sweep"  gives back the expired holds of every category with a waitlist, makes
--            the offers owed and moves the waitlist horizon (the engine's waitlist loop)
--
-- KEYS[1]    <base>gen (the show's key prefix)
-- ARGV[1]    op
-- ARGV[2]    the show's sale rules as the engine has them (see sale_rules)
-- ARGV[3]    holder tag (join, get; "" for sweep)
-- ARGV[4]    category (join, get; "" for sweep)
-- join:  ARGV[5] count (1..1000), ARGV[6] the offer's TTL in ms, ARGV[7] the offer
--        hold's token (32 hex digits), ARGV[8] its place hold id (16 hex digits),
--        ARGV[9] the engine's seats per holder (0: none), ARGV[10] the category's
--        section numbers, ARGV[11] its areas as "<area>@<marker bucket>" (both
--        space-separated)
--
-- Returns, for join and get, {"OK", state, count, position (1 for the first waiting; 0
-- once offered), ttl, token, generation, expiry ms, offer's seats and place keys...}
-- (state "waiting", "offered" or "expired"), {"NONE"} (get: no entry), {"NOSTATE"} (Redis
-- lost the show), {"NOINDEX"} (join: the category has seats and the show's
-- best-available index is not built), {"NOTADMITTED"} (join: the show has a waiting
-- room and the holder is not admitted now), {"LIMIT", booked, limit} (join: the
-- holder's bookings leave less than the count under the sale's holder limit), {"STALE"}
-- or {"CLOSED"} (see sale_rules); for sweep {"OK", entries waiting or offered, 1 when it
-- stopped at its bound of offers (call again) else 0}, or {"OK", 0, 0} once the show
-- has no entry and no horizon left (the loop may forget it).

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
local op, tag, cat = ARGV[1], ARGV[3], ARGV[4]
local given = rules_parse(ARGV[2])
if not given then return bad("rules") end
if op ~= "sweep" then
    if not is_hex(tag, 32) then return bad("holder tag") end
    if cat ~= "" and (not string.match(cat, "^[%w][%w ._-]*$") or #cat > 32) then return bad("category") end
end
if not show_known() then return {"NOSTATE"} end
local now = now_ms()

-- The waitlist horizon (<base>wl:at, the feed's "w"): a seat map shows a hold expired
-- only once the horizon has reached its expiry. A join starts it (every expiry before
-- was shown already); a sweep that went through every category moves it to its time
-- (at most every HORIZON_STEP ms, whichever engine sweeps); a sweep that finds no entry,
-- or the sale closed (nothing is offered then), ends it, and the map applies expiries
-- as they come again. The horizon is the call's time less 1 ms: a key whose expiry is
-- the call's time has not expired yet (Redis expires a key once its clock is past the
-- expiry), so the sweep found only the holds that expired before it.
local HORIZON_STEP = 100
local function wl_horizon(at)
    local k = BASE .. "wl:at"
    if not at then
        if redis.call("DEL", k) == 1 then feed_entry({"w", "-"}) end
        return
    end
    local cur = tonumber(redis.call("GET", k) or "0")
    if cur == 0 or at >= cur + HORIZON_STEP then
        redis.call("SET", k, at)
        feed_entry({"w", at})
    end
end

local rules, closed = sale_rules(given, ARGV[2])
if not rules then
    if op == "sweep" and closed[1] == "CLOSED" then wl_horizon(nil) end
    return closed
end
local W = wl_lib()

-- view answers join and get with the entry as it is: settled (common.lua: settle), and
-- once offered with its hold as it is now (a shrink or an extension since the offer).
local function view()
    local state, live, exp = W.settle(cat, tag, now)
    local E = W.entry(cat, tag)
    if not state or not E then return {"NONE"} end
    local pos = 0
    if E.state == "waiting" then
        pos = 1
        for _, k in ipairs(redis.call("ZRANGE", BASE .. "wl:qc:" .. cat, 0, -1)) do
            pos = pos + redis.call("ZCOUNT", BASE .. "wl:q:" .. cat .. ":" .. k, "-inf", "(" .. E.seq)
        end
    end
    local out = {"OK", state, tonumber(E.count), pos, tonumber(E.ttl), E.token, tonumber(E.gen or 0), exp or 0}
    for _, u in ipairs(live or {}) do out[#out + 1] = u end
    return out
end

-- join puts tag on cat's waitlist.
local function join()
    if not is_uint(ARGV[5], 1, 1000) then return bad("count") end
    if not is_uint(ARGV[6], 1, 86400000) then return bad("ttl") end
    if not is_hex(ARGV[7], 32) then return bad("token") end
    if not is_hex(ARGV[8], 16) then return bad("place hold id") end
    if not is_uint(ARGV[9], 0, 1000000) then return bad("cap") end
    local secs, areas = ARGV[10], ARGV[11]
    if not string.match(secs, "^[%d ]*$") or not string.match(areas, "^[%w._~@ -]*$") then return bad("category's seats") end
    if secs ~= "" and redis.call("EXISTS", BASE .. "ixs") == 0 then return {"NOINDEX"} end
    local state = W.settle(cat, tag, now)
    if state and state ~= "expired" then return view() end
    -- A join is a way to seats: it takes the waiting room's admission, and a count the
    -- holder's bookings leave room for under the sale's limit, as a hold does.
    local refused = sale_admitted(rules, tag, now)
    if refused then return refused end
    if rules.limit > 0 and booked(tag) + tonumber(ARGV[5]) > rules.limit then return {"LIMIT", booked(tag), rules.limit} end
    local seq = redis.call("INCR", BASE .. "wl:seq")
    local ek = BASE .. "wl:e:" .. cat .. ":" .. tag
    redis.call("DEL", ek)
    redis.call("HSET", ek, "count", ARGV[5], "ttl", ARGV[6], "token", ARGV[7], "hid", ARGV[8], "cap", ARGV[9],
        "seq", seq, "state", "waiting")
    redis.call("ZADD", BASE .. "wl:q:" .. cat .. ":" .. ARGV[5], seq, tag)
    redis.call("ZADD", BASE .. "wl:qc:" .. cat, tonumber(ARGV[5]), ARGV[5])
    redis.call("INCR", BASE .. "wl:on")
    redis.call("HSET", BASE .. "wl:c:" .. cat, "secs", secs, "areas", areas)
    redis.call("SADD", BASE .. "wl:cats", cat)
    for sec in string.gmatch(secs, "%d+") do redis.call("HSET", BASE .. "wl:map", "s" .. sec, cat) end
    for a in string.gmatch(areas, "([^%s@]+)@%d+") do redis.call("HSET", BASE .. "wl:map", "a" .. a, cat) end
    WL.on, WL.any, WL.dirty[cat] = true, true, true
    if redis.call("EXISTS", BASE .. "wl:at") == 0 then wl_horizon(now - 1) end
    wl_run(now)
    return view()
end

-- sweep offers every category with a waitlist (flush gives back its expired holds
-- first, and makes a bounded number of offers a call).
local function sweep()
    if redis.call("EXISTS", BASE .. "wl:on") == 0 then
        wl_horizon(nil)
        return {"OK", 0, 0}
    end
    WL.on, WL.any = true, true
    for _, c in ipairs(redis.call("SMEMBERS", BASE .. "wl:cats")) do WL.dirty[c] = true end
    wl_run(now)
    if not WL.more then wl_horizon(now - 1) end
    return {"OK", tonumber(redis.call("GET", BASE .. "wl:on") or "0"), WL.more and 1 or 0}
end

if op == "join" then return join() end
if op == "get" then return view() end
if op == "sweep" then return sweep() end
return bad("op")
