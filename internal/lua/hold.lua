-- hold.lua: hold every requested seat of a show under one token, or none of them.
-- Idempotent by token: a repeated call with the same token returns the same hold and
-- moves the counter once (go-redis retries a command whose reply was lost).
--
-- KEYS       the common layout (common.lua)
-- ARGV[1]    holder tag
-- ARGV[2]    token: 32 lowercase hex digits
-- ARGV[3]    ttl in milliseconds, 1..86400000
-- ARGV[4]    holder cap: seats this holder may hold at once in this show, 0 = no cap
-- ARGV[5]    the show's sale rules as the engine has them (see sale_rules in common.lua)
-- ARGV[6..]  seat ids, then place keys (common.lua: a hold's places of one area each)
--
-- With an idempotency key (common.lua: idem_open), a call whose key names a hold that
-- still lives answers {"REPLAY", its token, "OK", generation, expires_ms, created_ms,
-- "", its seat arguments now...} for the same request, {"LOST"} when the hold lives on
-- under fresh tokens (reclaim.lua), and {"KEYREUSED"} for another request; once that
-- hold is gone (released, expired, confirmed, transferred) the key is free again
-- (common.lua: idem_held).
--
-- Returns {"OK", generation, expires_ms, created_ms, feed entry id} (a retried call
-- has no entry id: the first call wrote it), {"TAKEN", seat or place key, ...} (a place
-- key: its area has fewer places free; the places it has free follow the key),
-- {"LIMIT", held} (the holder cap), {"LIMIT", held and booked, limit} (the sale's holder
-- limit), {"NOTADMITTED"} (the show has a waiting room and the holder is not admitted
-- now), {"NOSTATE"} when the counter is missing (Redis lost the show), or {"STALE"} or
-- {"CLOSED"} (the rules given are of an earlier show of the id, or of a closed one: see
-- sale_rules in common.lua).

local F = 5
local I, ierr = idem_open()
if not I then return ierr end
local n, err = layout(F, 1, 1)
if not n then return err end
local tag, token = ARGV[1], ARGV[2]
if not is_hex(token, 32) then return bad("token") end
if not is_uint(ARGV[3], 1, 86400000) then return bad("ttl") end
if not is_uint(ARGV[4], 0, 1000000) then return bad("holder cap") end
local ttl, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local given = rules_parse(ARGV[5])
if not given then return bad("rules") end

if not show_known() then return {"NOSTATE"} end
local rules, closed = sale_rules(given, ARGV[5])
if not rules then return closed end

local now = now_ms()
-- The key's hold: while it lives, a retry of the request gets it again; once it is
-- gone, so is the key.
local held = idem_held(I, now)
if held then return held end
-- A seat or places this call finds come back, of a category with a waitlist, go to
-- the waitlist first (common.lua: wl_precheck).
wl_precheck(F, now)
local mine, taken, first = 0, {"TAKEN"}, nil
for i = 1, n do
    local v = redis.call("GET", hk(i))
    if v then
        if string.sub(v, 1, 33) == token .. ":" then
            mine = mine + 1
            first = first or v
        else
            taken[#taken + 1] = seat(i, F)
        end
    elseif is_sold(redis.call("HGET", sk(i), seat(i, F))) then
        taken[#taken + 1] = seat(i, F)
    end
end
if mine == n then
    -- A retry of this very hold: answer as the first call did.
    local gen, created = string.match(first, "^[0-9a-f]+:(%d+):(%d+):")
    return {"OK", tonumber(gen), now + redis.call("PTTL", hk(1)), tonumber(created)}
end
-- Every key of a hold expires at one time (PXAT below), and Redis checks expiries at
-- the script's start time: a retry never finds part of its hold gone.
if mine > 0 then return bad("token holds other seats") end
local refused = sale_admitted(rules, tag, now)
if refused then return refused end
local want = 0 -- seats and places
for i = 1, n do
    local a, c = place_of(seat(i, F))
    want = want + (c or 1)
    if a then
        local free = area_free(a, now)
        if not free then return {"NOSTATE"} end
        if free < c then
            taken[#taken + 1] = seat(i, F)
            taken[#taken + 1] = free
        end
    end
end
if #taken > 1 then return taken end

local capped = tag ~= "" and (cap > 0 or rules.limit > 0)
local held = 0
-- A named holder's live seats are kept (KEYS[2]) for the caps and for reclaim.lua.
if tag ~= "" then redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now) end
if capped then
    held = held_units(KEYS[2])
    if cap > 0 and held + want > cap then return {"LIMIT", held} end
end
refused = sale_limit(rules, tag, held, want)
if refused then return refused end

local gen = redis.call("INCR", KEYS[1])
local value = token .. ":" .. int(gen) .. ":" .. int(now) .. ":" .. tag
for i = 1, n do
    redis.call("SET", hk(i), value, "PXAT", now + ttl)
    if tag ~= "" then redis.call("ZADD", KEYS[2], now + ttl, seat(i, F)) end
    index_held(i, seat(i, F), now + ttl, true) -- no marker: read above
    place_held(seat(i, F), now + ttl)
end
if tag ~= "" and redis.call("PTTL", KEYS[2]) < ttl then redis.call("PEXPIRE", KEYS[2], ttl) end
if rules.queue then sale_granted(rules, {unpack(ARGV, F + 1, F + n)}, now + ttl) end
local id = feed({"h", seat_list(F), "x", int(now + ttl)})
if I.rec ~= "" then
    local kept = {"OK", gen, now + ttl, now, ""}
    for i = 1, n do kept[#kept + 1] = seat(i, F) end
    idem_keep(I, token, kept, 0)
end
return {"OK", gen, now + ttl, now, id}
