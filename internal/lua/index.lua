-- index.lua: index a page of a show's seats for best-available holds (see common.lua).
-- A page holds whole rows, in layout order; each seat is written with its meta and
-- its current state (sold marker, hold key), and the runs of free adjacent seats are
-- built. A page that is indexed already is left alone (the call is idempotent). The
-- last page's call marks the index complete (<base>ixs).
--
-- The layout is one show's: the page is written only while Redis's rules are that
-- show's (see sale_rules in common.lua; the engine gives them to Redis before it
-- indexes). An engine whose copy is of a show deleted since, and created again with
-- other seats, writes nothing of the old layout into the new show's index.
--
-- KEYS[1]    <base>gen (names the show's base)
-- ARGV[1]    the show's epoch
-- ARGV[2]    after this page, mark the index complete with this seat count; "-": not yet
-- ARGV[3..]  triples: seat id, its bucket, its meta "<score> <section> <segment> <place>";
--            a page holds whole segments, their seats in place order
--
-- Returns {"OK", the number of seats indexed (0 when the page was indexed already)},
-- {"STALE"} (Redis's rules are of a later show of the id), {"CLOSED"} (the show is
-- being deleted) or {"NORULES"} (Redis has no rules of the show: it lost them since
-- the engine gave them); but for "OK" nothing is written.

local F = 2
if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
if not is_uint(ARGV[1], 1, 9007199254740991) then return bad("epoch") end
if ARGV[2] ~= "-" and not is_uint(ARGV[2], 1, 9007199254740991) then return bad("seat count") end
if #ARGV == F or (#ARGV - F) % 3 ~= 0 then return bad("argument count") end
local n = (#ARGV - F) / 3
local metas = {}
for i = 1, n do
    local seat_id, b, m = ARGV[F + 3 * i - 2], ARGV[F + 3 * i - 1], ARGV[F + 3 * i]
    if #seat_id < 1 or #seat_id > 64 or not string.match(seat_id, "^[%w][%w._-]*$") then return bad("seat " .. i) end
    if not string.match(b, "^%d+$") then return bad("bucket " .. i) end
    if not string.match(m, "^%d+ %d+ %d+ %d+$") or #m > 64 then return bad("meta " .. i) end
    metas[i] = meta_parse(seat_id, b, m)
    local prev = metas[i - 1]
    local first = not prev or prev.seg ~= metas[i].seg
    if metas[i].score >= HELD or metas[i].pos > 32 or (first and metas[i].pos ~= 1) or (not first and (metas[i].pos ~= prev.pos + 1 or metas[i].sec ~= prev.sec)) then
        return bad("meta " .. i)
    end
end
local e, closed = rules_epoch(redis.call("GET", BASE .. "rules"))
local epoch = tonumber(ARGV[1])
if e > epoch then return {"STALE"} end
if e < epoch then return {"NORULES"} end
if closed then return {"CLOSED"} end
-- done: the page is indexed; the last one marks the index complete.
local function done(indexed)
    if ARGV[2] ~= "-" then redis.call("SET", BASE .. "ixs", ARGV[2]) end
    return {"OK", indexed}
end
if redis.call("HEXISTS", BASE .. "mt:" .. ARGV[F + 2], ARGV[F + 1]) == 1 then return done(0) end

local now = now_ms()
-- Batched by bucket and by section: one HSET and one HMGET per bucket of the page, one
-- ZADD per section, an HSET per segment, a PTTL per seat.
local by_bucket, order = {}, {}
for i = 1, n do
    local seat_id, b, raw = ARGV[F + 3 * i - 2], ARGV[F + 3 * i - 1], ARGV[F + 3 * i]
    local g = by_bucket[b]
    if not g then
        g = {set = {}, seats = {}, idx = {}}
        by_bucket[b] = g
        order[#order + 1] = b
    end
    g.set[#g.set + 1] = seat_id
    g.set[#g.set + 1] = raw
    g.seats[#g.seats + 1] = seat_id
    g.idx[#g.idx + 1] = i
end
local sold = {}
for _, b in ipairs(order) do
    local g = by_bucket[b]
    redis.call("HSET", BASE .. "mt:" .. b, unpack(g.set))
    local marks = redis.call("HMGET", BASE .. "sold:" .. b, unpack(g.seats))
    for k, i in ipairs(g.idx) do sold[i] = is_sold(marks[k]) end
end
local zadds, zorder = {}, {}
local function zadd(sec, score, mem)
    local z = zadds[sec]
    if not z then
        z = {}
        zadds[sec] = z
        zorder[#zorder + 1] = sec
    end
    z[#z + 1] = score
    z[#z + 1] = mem
end
-- index_segment: the seats of one segment (metas[from..to]) and their states; its
-- record is written and its runs of free seats listed.
local function index_segment(from, to)
    local scores, seats, free = {}, {}, {}
    for i = from, to do
        local m = metas[i]
        local k = i - from + 1
        free[k] = false
        if not sold[i] then
            local ttl = redis.call("PTTL", BASE .. "hold:" .. m.seat)
            if ttl >= 0 then
                zadd(m.sec, int(HELD + now + ttl), member(m))
            else
                zadd(m.sec, int(m.score), member(m))
                free[k] = true
            end
        end
        scores[k] = string.format("%0" .. SCORE_W .. "d", m.score)
        seats[k] = member(m)
    end
    local m = metas[from]
    redis.call("HSET", BASE .. SEG, m.seg, table.concat(scores) .. " " .. table.concat(seats, " "))
    local L, lo = to - from + 1, nil
    local S = {score = {}}
    for k = 1, L do S.score[k] = metas[from + k - 1].score end
    for k = 1, L + 1 do
        if k <= L and free[k] then
            lo = lo or k
        elseif lo then
            redis.call("ZADD", run_key(m.sec, k - lo), int(run_score(S, lo, k - 1)), run_name(m.seg, lo, k - 1))
            lo = nil
        end
    end
end
local from = 1
for i = 1, n do
    if i == n or metas[i + 1].seg ~= metas[i].seg then
        index_segment(from, i)
        from = i + 1
    end
end
for _, sec in ipairs(zorder) do redis.call("ZADD", free_key(sec), unpack(zadds[sec])) end
return done(n)
