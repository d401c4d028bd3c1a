-- queue.lua: a show's waiting room (engine/queue.go). Every call first brings the room
-- up to now: at the opening it draws the order of those who joined before it, then it
-- admits as many waiting holders as the rules allow (admit below). Then, by op:
--   "admit"   nothing more (the engine's ticker, and a status read)
--   "join"    puts the holder in the room, once: before the opening in the draw, after it
--             at the end of the line; a holder admitted or waiting keeps their place
--   "ticket"  only reads the holder's place
--   "rules"   only brings Redis's copy of the rules up to the given one
--
-- KEYS[1]    <base>gen (the show's key prefix; the room's keys share its hash tag)
-- ARGV[1]    op
-- ARGV[2]    the show's sale rules as the engine has them (see sale_rules in common.lua)
-- ARGV[3]    holder tag (join, ticket; "" otherwise)
-- ARGV[4]    a fresh random seed, 32 lowercase hex digits: the draw's, if this call makes it
--
-- The room's keys:
--   <base>q:pre   set of holders who joined before the opening, until the draw
--   <base>q       zset of holders waiting, by place: drawn ones at a 52-bit number from
--                 SHA-1(seed .. tag), later ones at 2^52 + their arrival number
--   <base>q:adm   zset of admitted holders -> until when (ms)
--   <base>q:fresh zset of admitted holders who have not tried to hold yet -> when
--                 admitted (ms); the hold scripts take a holder off at their first try
--   <base>q:st    hash: opened (1 once drawn), seed, drawn (how many), seq (arrivals
--                 after the opening), total (admitted so far), credit and last (the rate's
--                 token bucket), hs and hn (seats and places held, and holds, for units
--                 per holder),
--                 r_at, r_total, p_at, p_total (for the recent admission rate)
--   <base>held    zset of held seats and place keys -> expiry, and <base>heldx the
--                 places beyond one of its place keys (common.lua: held_x), kept by the
--                 hold scripts while the show has a room; <base>nsold the count of sold
--                 seats (kept by mark.lua once counted here)
--
-- Returns {status, position, admitted until ms, opened (0/1), sold out (0/1), waiting,
-- admitted so far, admissions per second recently (string), seed drawn by this call or
-- "", how many it drew}, status one of "ADMITTED", "WAITING", "NONE" (not in the room), "NOQUEUE" (the
-- show has no waiting room; nothing else is meaningful), or "STALE" or "CLOSED" (the given
-- rules are of an earlier show of the id, or of a closed show: see sale_rules in
-- common.lua; nothing else is meaningful).

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
local op, tag, seed = ARGV[1], ARGV[3], ARGV[4]
if op ~= "admit" and op ~= "join" and op ~= "ticket" and op ~= "rules" then return bad("op") end
local given = rules_parse(ARGV[2])
if not given then return bad("rules") end
if tag ~= "" and not is_hex(tag, 32) then return bad("holder tag") end
if (op == "join" or op == "ticket") and tag == "" then return bad("holder tag") end
if not is_hex(seed, 32) then return bad("seed") end

local rules, closed = sale_rules(given, ARGV[2])
if not rules then return {closed[1], 0, 0, 0, 0, 0, 0, "0", "", 0} end
if op == "rules" or not rules.queue then return {"NOQUEUE", 0, 0, 0, 0, 0, 0, "0", "", 0} end

local now = now_ms()
local Q, PRE, ADM, FRESH, ST = BASE .. "q", BASE .. "q:pre", BASE .. "q:adm", BASE .. "q:fresh", BASE .. "q:st"
local TWO52 = 4503599627370496

-- The room's counters, read in one call (most calls only read them).
local ST_FIELDS = {"opened", "at", "soldout", "total", "r_at", "r_total", "p_at", "p_total", "hn", "hs", "credit", "last"}
local st = {}
do
    local vals = redis.call("HMGET", ST, unpack(ST_FIELDS))
    for i, f in ipairs(ST_FIELDS) do st[f] = vals[i] end
end
local function num(field, default) return tonumber(st[field]) or default end

-- The draw: once, at the first call from the opening on.
local drew, drawn = "", 0
if now >= rules.opens and st.opened ~= "1" then
    local pre = redis.call("SMEMBERS", PRE)
    for _, t in ipairs(pre) do
        redis.call("ZADD", Q, tonumber(string.sub(redis.sha1hex(seed .. t), 1, 13), 16), t)
    end
    redis.call("DEL", PRE)
    redis.call("HSET", ST, "opened", "1", "seed", seed, "drawn", #pre, "opened_at", now)
    st.opened = "1"
    drew, drawn = seed, #pre
end
local opened = st.opened == "1"

-- sold_count: the show's sold seats, counted from the markers the first time.
local function sold_count()
    local v = redis.call("GET", BASE .. "nsold")
    if v then return tonumber(v) end
    local c = 0
    for b = 0, math.floor((rules.seats - 1) / 100) do
        for _, m in ipairs(redis.call("HVALS", BASE .. "sold:" .. b)) do
            if is_sold(m) then c = c + 1 end
        end
    end
    for i = 0, rules.areas - 1 do -- an area's markers: place keys, each its count
        local kv = redis.call("HGETALL", BASE .. "sold:" .. (1000000000 + i))
        for j = 1, #kv, 2 do
            if is_sold(kv[j + 1]) then c = c + units(kv[j]) end
        end
    end
    redis.call("SET", BASE .. "nsold", c)
    return c
end

-- admit lets in as many waiting holders as the free seats can serve (seats neither sold
-- nor held, shared by the admissions whose holders have not tried yet, at the seats a
-- hold takes on average), and, with a rate, no more than it allows. An admission whose
-- holder has not tried within FRESH_MS stops counting as demand (they may still hold
-- until it runs out): a holder who walked away does not stall the line.
local ADMIT_MAX = 2000
local FRESH_MS = 30000
local soldout = false
local function admit()
    redis.call("ZREMRANGEBYSCORE", ADM, "-inf", now)
    redis.call("ZREMRANGEBYSCORE", FRESH, "-inf", now - math.min(FRESH_MS, rules.ttl))
    local sold = sold_count()
    local supply = rules.seats + rules.places -- every seat and place of the show
    soldout = sold >= supply
    if not opened or soldout then return end
    local heldx = tonumber(redis.call("GET", BASE .. "heldx")) or 0
    if heldx > 0 then -- the places of the place keys that expire
        for _, s in ipairs(redis.call("ZRANGEBYSCORE", BASE .. "held", "-inf", now)) do held_x(s, -1) end
    end
    redis.call("ZREMRANGEBYSCORE", BASE .. "held", "-inf", now)
    heldx = math.max(tonumber(redis.call("GET", BASE .. "heldx")) or 0, 0)
    local free = supply - sold - redis.call("ZCARD", BASE .. "held") - heldx
    local unused = redis.call("ZCARD", FRESH)
    local hn = num("hn", 0)
    local per = (rules.limit > 0) and math.max(1, rules.limit / 2) or 1
    if hn >= 10 then per = num("hs", 0) / hn end
    local want = math.ceil(free / per) - unused
    local credit = 0
    if rules.rate > 0 then
        local last = num("last", now)
        credit = math.min(math.max(rules.rate, 1), num("credit", 1) + (now - last) / 1000 * rules.rate)
        want = math.min(want, math.floor(credit))
    end
    want = math.min(want, ADMIT_MAX)
    local n = 0
    if want > 0 then
        local popped = redis.call("ZPOPMIN", Q, want)
        for k = 1, #popped, 2 do
            redis.call("ZADD", ADM, now + rules.ttl, popped[k])
            redis.call("ZADD", FRESH, now, popped[k])
            n = n + 1
        end
    end
    if n > 0 then st.total = redis.call("HINCRBY", ST, "total", n) end
    if rules.rate > 0 then redis.call("HSET", ST, "credit", tostring(credit - n), "last", now) end
end
-- admit_due admits now when forced (the engine's ticker) or when the room was last
-- brought up to date ADMIT_EVERY ms ago or more: a crowd joining at once costs a few
-- commands each, not a whole admission round.
local ADMIT_EVERY = 50
local function admit_due(force)
    if force or now - num("at", 0) >= ADMIT_EVERY then
        redis.call("HSET", ST, "at", now)
        admit()
        redis.call("HSET", ST, "soldout", soldout and 1 or 0)
    else
        soldout = st.soldout == "1"
    end
end

local total, rate = 0, "0"
-- rate_now reads the admissions so far and their recent rate (over the last 5 to 10
-- seconds).
local function rate_now()
    total = num("total", 0)
    local r_at = num("r_at", 0)
    if now - r_at >= 5000 then
        local rt = num("r_total", 0)
        redis.call("HSET", ST, "p_at", r_at, "p_total", rt, "r_at", now, "r_total", total)
        st.p_at, st.p_total = r_at, rt
    end
    local p_at, p_total = num("p_at", 0), num("p_total", 0)
    if p_at > 0 and now > p_at then rate = string.format("%.3f", (total - p_total) * 1000 / (now - p_at)) end
end

local function waiting()
    if opened then return redis.call("ZCARD", Q) end
    return redis.call("SCARD", PRE)
end

local function reply(status, pos, until_ms)
    return {status, pos, until_ms, opened and 1 or 0, soldout and 1 or 0, waiting(), total, rate, drew, drawn}
end

-- place: the holder's reply as they stand now (u: their admission's end, if read
-- already), or nil when not in the room.
local function place(u)
    if u == nil then u = redis.call("ZSCORE", ADM, tag) end
    if u and tonumber(u) > now then return reply("ADMITTED", 0, tonumber(u)) end
    local r = redis.call("ZRANK", Q, tag)
    if r then return reply("WAITING", r + 1, 0) end
    if not opened and redis.call("SISMEMBER", PRE, tag) == 1 then return reply("WAITING", redis.call("SCARD", PRE), 0) end
    return nil
end

local admitted_ran = false
if op == "join" then
    local u = redis.call("ZSCORE", ADM, tag)
    local joined = (u and tonumber(u) > now) or (opened and redis.call("ZSCORE", Q, tag)) or
        (not opened and redis.call("SISMEMBER", PRE, tag) == 1)
    if not joined then
        if opened then
            redis.call("ZADD", Q, TWO52 + redis.call("HINCRBY", ST, "seq", 1), tag)
        else
            redis.call("SADD", PRE, tag)
        end
    end
    admitted_ran = op == "admit" or now - num("at", 0) >= ADMIT_EVERY
    admit_due(false)
    rate_now()
    if not admitted_ran then return place(u) or reply("NONE", 0, 0) end
    return place() or reply("NONE", 0, 0)
end
admit_due(op == "admit")
rate_now()
if op == "admit" then return reply("NONE", 0, 0) end
return place() or reply("NONE", 0, 0)
