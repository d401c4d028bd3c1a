-- best.lua: hold the best available seats of a show — count of them, or count adjacent
-- ones in one row — under one token and one generation, or nothing. Free means no live
-- hold and no sold marker, as for hold.lua. The seats come from the best-available
-- index (common.lua); expired holds found there are given back first, and every chosen
-- seat is checked against its keys before anything is written. Idempotent by token:
-- a retried call returns the seats the first call chose.
--
-- KEYS       <base>gen, <base>holder:<tag>
-- ARGV[1]    holder tag
-- ARGV[2]    token: 32 lowercase hex digits
-- ARGV[3]    ttl in milliseconds, 1..86400000
-- ARGV[4]    holder cap: seats this holder may hold at once in this show, 0 = no cap
-- ARGV[5]    count, 1..1000
-- ARGV[6]    adjacent: "1" for count seats side by side in one row, "0" for any
-- ARGV[7]    the sections to look in: their numbers, space-separated
-- ARGV[8]    the show's sale rules as the engine has them (see sale_rules in common.lua)
--
-- With an idempotency key, as hold.lua: {"REPLAY", token, "OK", generation, expires_ms,
-- created_ms, "", seat, ...} while the key's hold lives, {"LOST"} when it lives under
-- fresh tokens, {"KEYREUSED"} for another request.
--
-- Returns {"OK", generation, expires_ms, created_ms, feed entry id, seat, ...},
-- {"NONE", free seats left in the best section}, {"LIMIT", held} (the holder cap),
-- {"LIMIT", held and booked, limit} (the sale's holder limit), {"NOTADMITTED"} (the show
-- has a waiting room and the holder is not admitted now), {"LOST"} (a retry
-- whose hold is gone), {"NOSTATE"} or {"NOINDEX"} (the index is not built), {"STALE"} or
-- {"CLOSED"} (as hold.lua's), or {"AGAIN"}:
-- it gave back REAP_MAX expired holds, or read RELIST_SEATS seats listing runs, and
-- has more to do before it may choose (call again; what it did stays done).

local F = 8
local I, ierr = idem_open()
if not I then return ierr end
local _, err = layout(F, 1, 0)
if err then return err end
local tag, token = ARGV[1], ARGV[2]
if not is_hex(token, 32) then return bad("token") end
if not is_uint(ARGV[3], 1, 86400000) then return bad("ttl") end
if not is_uint(ARGV[4], 0, 1000000) then return bad("holder cap") end
if not is_uint(ARGV[5], 1, 1000) then return bad("count") end
if ARGV[6] ~= "0" and ARGV[6] ~= "1" then return bad("adjacent") end
local sections = {}
for sec in string.gmatch(ARGV[7], "%S+") do
    if not string.match(sec, "^%d+$") then return bad("sections") end
    sections[#sections + 1] = sec
end
if #sections == 0 then return bad("sections") end
local ttl, cap, count, adjacent = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == "1"
local given = rules_parse(ARGV[8])
if not given then return bad("rules") end

if not show_known() then return {"NOSTATE"} end
local rules, closed = sale_rules(given, ARGV[8])
if not rules then return closed end
if redis.call("EXISTS", BASE .. "ixs") == 0 then return {"NOINDEX"} end
local now = now_ms()
local tok = BASE .. "tok:" .. token

-- The key's hold, as hold.lua's (common.lua: idem_held).
local held = idem_held(I, now)
if held then return held end
local prev = redis.call("GET", tok)
if prev then
    -- A retry of this very call: answer as the first one did.
    local seats = {}
    for s in string.gmatch(prev, "%S+") do seats[#seats + 1] = s end
    local v = redis.call("GET", BASE .. "hold:" .. seats[1])
    if not v or string.sub(v, 1, 33) ~= token .. ":" then return {"LOST"} end
    local gen, created = string.match(v, "^[0-9a-f]+:(%d+):(%d+):")
    local out = {"OK", tonumber(gen), now + redis.call("PTTL", BASE .. "hold:" .. seats[1]), tonumber(created), ""}
    for _, s in ipairs(seats) do out[#out + 1] = s end
    return out
end

local refused = sale_admitted(rules, tag, now)
if refused then return refused end
local capped = tag ~= "" and (cap > 0 or rules.limit > 0)
local held = 0
-- A named holder's live seats are kept (KEYS[2]) for the caps and for reclaim.lua.
if tag ~= "" then redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now) end
if capped then
    held = held_units(KEYS[2])
    if cap > 0 and held + count > cap then return {"LIMIT", held} end
end
refused = sale_limit(rules, tag, held, count)
if refused then return refused end

-- reap gives back up to limit seats of sec whose hold expired; returns how many it saw.
local function reap(sec, limit)
    local due = redis.call("ZRANGEBYSCORE", free_key(sec), int(HELD), int(HELD + now - 1), "LIMIT", 0, limit)
    for _, mem in ipairs(due) do
        local s, b = ref(mem)
        index_fix(meta_get(s, b), now)
    end
    return #due
end

local HELD_S = string.format("(%d", HELD)

-- any_best: the count best-scored free seats of the sections.
local function any_best()
    local c = {}
    for _, sec in ipairs(sections) do
        local r = redis.call("ZRANGE", free_key(sec), 0, HELD_S, "BYSCORE", "LIMIT", 0, count, "WITHSCORES")
        for k = 1, #r, 2 do c[#c + 1] = {mem = r[k], score = tonumber(r[k + 1])} end
    end
    if #c < count then return nil end
    table.sort(c, function(x, y) return x.score < y.score end)
    local out = {}
    for k = 1, count do
        local s, b = ref(c[k].mem)
        out[k] = meta_get(s, b)
    end
    return out
end

-- adjacent_best: the count adjacent free seats of one row with the lowest score sum.
-- Listed runs are visited by their best score; a run whose best score times count is
-- not below the best sum found cannot hold a better block. A listed run is checked
-- against fr (runs are kept lazily, see common.lua): when its seats are no longer one
-- run of free seats, it is unlisted and the runs of free seats within it are listed
-- in its place (after the search, so the pages being read do not move) and searched
-- at once.
local function adjacent_best()
    local best, best_seats = nil, nil
    local segs = {}           -- segment -> segment(), read once per call
    local drop, add = {}, {}  -- listings to change once the search is over
    local function consider(S, lo, hi)
        local len = hi - lo + 1
        if len < count then return end
        local sc = S.score
        local sum = 0
        for j = lo, lo + count - 1 do sum = sum + sc[j] end
        local at, low = lo, sum
        for j = lo + count, hi do
            sum = sum + sc[j] - sc[j - count]
            if sum < low then at, low = j - count + 1, sum end
        end
        if not best or low < best then
            best, best_seats = low, {}
            for j = at, at + count - 1 do best_seats[#best_seats + 1] = seat_meta(S, j) end
        end
    end
    for _, sec in ipairs(sections) do
        for c = math.min(count, 10), 10 do
            local key, off, done = run_key(sec, c), 0, false
            while not done do
                local r = redis.call("ZRANGE", key, 0, "+inf", "BYSCORE", "LIMIT", off, 16, "WITHSCORES")
                if #r == 0 then break end
                for k = 1, #r, 2 do
                    if best and count * tonumber(r[k + 1]) >= best then
                        done = true
                        break
                    end
                    local seg, lo, len = string.match(r[k], "^(%d+):(%d+):(%d+)$")
                    lo, len = tonumber(lo), tonumber(len)
                    local S = segs[seg]
                    if S == nil then
                        S = segment(seg, sec) or false
                        segs[seg] = S
                    end
                    local hi = lo + len - 1
                    if not S or hi > S.n then
                        drop[#drop + 1] = {key, r[k]}
                    else
                        -- The runs of free seats within lo..hi, each as far as it goes.
                        local whole = false
                        each_free_run(S, lo, hi, function(a, b)
                            if a == lo and b == hi then
                                whole = true
                            else
                                add[#add + 1] = {run_key(sec, b - a + 1), int(run_score(S, a, b)), run_name(seg, a, b)}
                            end
                            consider(S, a, b)
                        end)
                        if not whole then drop[#drop + 1] = {key, r[k]} end
                    end
                end
                off = off + 16
            end
        end
    end
    for _, d in ipairs(drop) do redis.call("ZREM", d[1], d[2]) end
    for _, a in ipairs(add) do redis.call("ZADD", a[1], a[2], a[3]) end
    return best_seats
end

local function search()
    if adjacent then return adjacent_best() end
    return any_best()
end

-- really_free checks a chosen seat against its keys; a disagreement is fixed in the
-- index (and the search runs again).
local function really_free(m)
    if redis.call("EXISTS", BASE .. "hold:" .. m.seat) == 1 or is_sold(redis.call("HGET", BASE .. "sold:" .. m.b, m.seat)) then
        index_fix(m, now)
        return false
    end
    return true
end

-- Give back every expired hold of the sections before choosing: any of them could be
-- better than the best seat free now, whenever it expired. Bounded per call: past
-- REAP_MAX the engine calls again.
local REAP_MAX = 2000
local reaped = 0
for _, sec in ipairs(sections) do
    while true do
        local k = reap(sec, 500)
        reaped = reaped + k
        if k < 500 then break end
        if reaped >= REAP_MAX then
            wl_run(now) -- what it gave back of a waitlisted category goes to the waitlist first
            return {"AGAIN"}
        end
    end
end
-- What the reaping freed of a category with a waitlist goes to the waitlist first.
wl_run(now)

-- relist lists the runs of free seats of the segments of section sec where a seat came
-- free since their runs were last listed (common.lua: give), and unlists the runs each
-- such seat joined (the free seats on either side of it, as they were listed before it
-- came free); it reads segments until budget seats, and returns what is left of the
-- budget, and false when marked seats are left. A seat stays marked until its
-- segment's runs are listed.
local RELIST_SEATS = 2048
local function relist(sec, budget)
    local key = dirty_key(sec)
    local marks = redis.call("SRANDMEMBER", key, RELIST_SEATS)
    if #marks == 0 then return budget, true end
    local by, order = {}, {} -- segment -> its marked places
    local done = {}
    for _, mk in ipairs(marks) do
        local seg, pos = string.match(mk, "^(%d+):(%d+)$")
        if seg then
            if not by[seg] then by[seg], order[#order + 1] = {}, seg end
            table.insert(by[seg], {mk, tonumber(pos)})
        else
            done[#done + 1] = mk -- not a mark: dropped
        end
    end
    for _, seg in ipairs(order) do
        if budget <= 0 then break end
        local S = segment(seg, sec)
        if S then
            each_free_run(S, 1, S.n, function(a, b)
                redis.call("ZADD", run_key(sec, b - a + 1), int(run_score(S, a, b)), run_name(seg, a, b))
            end)
        end
        for _, m in ipairs(by[seg]) do
            local q = m[2]
            if S and q <= S.n and S.free[q] then
                local a, b = free_run(S, q)
                if a < q then redis.call("ZREM", run_key(sec, q - a), run_name(seg, a, q - 1)) end
                if q < b then redis.call("ZREM", run_key(sec, b - q), run_name(seg, q + 1, b)) end
            end
            done[#done + 1] = m[1]
        end
        budget = budget - (S and S.n or 1)
    end
    if #done > 0 then redis.call("SREM", key, unpack(done)) end
    return budget, #done == #marks and (#marks < RELIST_SEATS or redis.call("SCARD", key) == 0)
end
-- An adjacent search reads the listed runs: every segment that gave a seat back is
-- listed again first, RELIST_SEATS seats of segments a call over all its sections.
if adjacent then
    local budget, all = RELIST_SEATS, true
    for _, sec in ipairs(sections) do
        budget, all = relist(sec, budget)
        if not all then return {"AGAIN"} end
    end
end
local chosen
for _ = 1, 5 do
    chosen = search()
    if not chosen then break end
    local ok = true
    for _, m in ipairs(chosen) do
        if not really_free(m) then ok = false end
    end
    if ok then break end
    chosen = nil
end
if not chosen then
    local left = 0
    for _, sec in ipairs(sections) do
        left = math.max(left, redis.call("ZCOUNT", free_key(sec), 0, HELD_S))
    end
    return {"NONE", left}
end

local gen = redis.call("INCR", KEYS[1])
local value = token .. ":" .. int(gen) .. ":" .. int(now) .. ":" .. tag
local ids = {}
for k, m in ipairs(chosen) do
    redis.call("SET", BASE .. "hold:" .. m.seat, value, "PXAT", now + ttl)
    if tag ~= "" then redis.call("ZADD", KEYS[2], now + ttl, m.seat) end
    take(m, now + ttl)
    ids[k] = m.seat
end
if tag ~= "" and redis.call("PTTL", KEYS[2]) < ttl then redis.call("PEXPIRE", KEYS[2], ttl) end
sale_granted(rules, ids, now + ttl)
local list = table.concat(ids, " ")
redis.call("SET", tok, list, "PX", ttl)
local id = feed({"h", list, "x", int(now + ttl)})
local out = {"OK", gen, now + ttl, now, id}
for _, s in ipairs(ids) do out[#out + 1] = s end
return idem_keep(I, token, out, 5)
