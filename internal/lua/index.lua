-- index.lua: index a page of a show's seats for best-available holds (see common.lua).
-- A page holds whole rows, in layout order; each seat is written with its meta and
-- its current state (sold marker, hold key), and the runs of free adjacent seats are
-- built. A page that is indexed already is left alone (the call is idempotent).
--
-- KEYS[1]    <base>gen (names the show's base)
-- ARGV       triples: seat id, its bucket, its meta "<score> <section> <left> <right>"
--
-- Returns the number of seats indexed (0 when the page was indexed already).

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
if #ARGV == 0 or #ARGV % 3 ~= 0 then return bad("argument count") end
local n = #ARGV / 3
for i = 1, n do
    local seat_id, b, m = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
    if #seat_id < 1 or #seat_id > 64 or not string.match(seat_id, "^[%w][%w._-]*$") then return bad("seat " .. i) end
    if not string.match(b, "^%d+$") then return bad("bucket " .. i) end
    if not string.match(m, "^%d+ %d+ %S+ %S+$") or #m > 200 then return bad("meta " .. i) end
end
if redis.call("HEXISTS", BASE .. "meta:" .. ARGV[2], ARGV[1]) == 1 then return 0 end

local now = now_ms()
-- Batched by bucket and by section: one HSET and one HMGET per bucket of the page, one
-- ZADD per section, a PTTL per seat.
local metas, by_bucket, order = {}, {}, {}
for i = 1, n do
    local seat_id, b, raw = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
    metas[i] = meta_parse(seat_id, b, raw)
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
    redis.call("HSET", BASE .. "meta:" .. b, unpack(g.set))
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
local run = {}
local function flush()
    if #run > 0 then run_add(run) end
    run = {}
end
for i = 1, n do
    local m = metas[i]
    if sold[i] then
        flush()
    else
        local ttl = redis.call("PTTL", BASE .. "hold:" .. m.seat)
        if ttl >= 0 then
            zadd(m.sec, int(HELD + now + ttl), member(m))
            flush()
        else
            zadd(m.sec, int(m.score), member(m))
            if #run > 0 and run[#run].right ~= member(m) then flush() end
            run[#run + 1] = m
        end
    end
end
flush()
for _, sec in ipairs(zorder) do redis.call("ZADD", free_key(sec), unpack(zadds[sec])) end
return n
