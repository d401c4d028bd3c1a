-- common.lua: the argument checks and the ownership test that every holdfast script
-- shares: the top level of the Redis Functions library that lua.go makes of the scripts.
-- Redis runs it once, when the library is loaded (FUNCTION LOAD); each script's body
-- becomes BODY.<script>, which the library's function of that script (lua.go:
-- register_function) calls after begin (at the end of this file), and a group function
-- (group.lua) after begin_member for each of its members. A function library may not
-- create globals, and has no KEYS and ARGV: the call's keys and arguments are the two
-- locals below, set by begin.
--
-- State a call keeps at the top level (KEYS, ARGV, N, BASE, WL, GROUP) lives from one
-- call to the next: begin sets every name of it anew, and a name added to it must be added
-- there (lua_test.go checks that begin sets every top-level local that a function of the
-- library assigns, but WLF: see wl_lib).
--
-- Every script has the same key layout, for n seats:
--   KEYS[1]            <base>gen             the show's generation counter
--   KEYS[2]            <base>holder:<tag>    zset seat -> expiry ms of one holder (tag = ARGV[1])
--   KEYS[3..2+n]       <base>hold:<seat>     one per seat, in the order of the seat arguments
--   KEYS[3+n..2+2n]    <base>sold:<bucket>   the sold-marker hash (seat -> marker) of each
--                                            seat's bucket: a show's seats are split, in sorted
--                                            order, into buckets of 100 so that Redis keeps each
--                                            hash as a compact listpack
-- (and keys each script derives from the counter's, under the same hash tag: the
-- change feed <base>feed and its entry counter <base>feed:n, see feed below; the hold
-- moves <base>moves, see move_log)
-- and ARGV[1] is always the holder tag ("" or 32 lowercase hex digits), then the
-- script's own fixed arguments, then the seat ids (and, for mark, one marker each).

local KEYS, ARGV = {}, {}

-- GROUP is a group call's shared state (group.lua: several calls of one show in one
-- call), nil in any other call: the clock, read once (now_ms); the given sale rules'
-- parses and the rules string the show's key was found equal to (rules_parse,
-- sale_rules: the members are of one show); that the show's counter is there
-- (show_known) and that it has no waitlist entries (wl_on), once found; and the holds'
-- feed entries not written yet (feed, group_flush).
local GROUP = nil

local function bad(what) return redis.error_reply("HOLDFAST_BADARG " .. what) end

-- show_known: whether the show's counter (KEYS[1]) is there: Redis knows the show. A
-- group's members share it (group.lua) and no hold deletes it, so a group reads it once.
local function show_known()
    if GROUP and GROUP.known == KEYS[1] then return true end
    if redis.call("EXISTS", KEYS[1]) == 0 then return false end
    if GROUP then GROUP.known = KEYS[1] end
    return true
end

local function now_ms()
    if GROUP then return GROUP.now end
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_hex(s, len) return type(s) == "string" and #s == len and string.match(s, "^[0-9a-f]+$") ~= nil end

local function is_uint(s, min, max)
    local v = tonumber(s)
    return v ~= nil and string.match(s, "^%d+$") ~= nil and v >= min and v <= max
end

-- Places (engine/areas.go). A hold's places in an area are one "seat" argument of the
-- scripts, its place key "<area>~<count>~<hold id>" (a seat id has no "~"; the hold id is
-- 16 hex digits derived from the hold's token), with a hold key like a seat's and, as
-- its sold-bucket key, the area's marker hash. Each area has
--   <base>ar:<area>  hash c: capacity, h: places of holds not yet found ended, s: places
--                    sold (as the markers say)
--   <base>ax:<area>  zset place key -> a time (ms) its hold key lives at least until
-- and the places free are c - h - s. A hold's places come back when its key goes: at
-- once on a release or a sale (place_gone), and after an expiry at the next area_trim,
-- which every hold of the area's places runs first. The zset's score is never later
-- than the key's expiry (extensions and reservations only lengthen a key's life), so a
-- key found alive past its score is scored again, and one found gone gives its places
-- back once: the ZREM that removes its entry is the one that counts.
local function is_place(s) return string.match(s, "^[%w][%w._-]*~[1-9]%d*~%x+$") ~= nil end

-- place_of is a place key's area and count (nil for a seat: a seat id has no "~").
local function place_of(s)
    if not string.find(s, "~", 1, true) then return nil end
    local a, c = string.match(s, "^([%w][%w._-]*)~([1-9]%d*)~%x+$")
    if not a then return nil end
    return a, tonumber(c)
end

-- units is what a seat argument counts for holder limits and sold counts: a seat one,
-- a place key its places.
local function units(s)
    local _, c = place_of(s)
    return c or 1
end

-- N is the number of seats of the call and BASE the show's key prefix, set by layout.
local N, BASE = 0, ""

-- hk and sk are the hold key and the sold-bucket key of seat i.
local function hk(i) return KEYS[2 + i] end
local function sk(i) return KEYS[2 + N + i] end

-- layout checks the keys and the seat arguments. fixed counts ARGV[1..fixed]; each seat
-- is followed by per_seat - 1 more arguments at the end; min_seats is 0 or 1.
-- It returns the number of seats, or nil and an error reply.
local function layout(fixed, per_seat, min_seats)
    local rest = #ARGV - fixed
    if rest < 0 or rest % per_seat ~= 0 then return nil, bad("argument count") end
    local n = rest / per_seat
    local tag = ARGV[1]
    if n < min_seats or #KEYS ~= 2 + 2 * n then
        return nil, bad("key count")
    end
    if tag ~= "" and not is_hex(tag, 32) then return nil, bad("holder tag") end
    if string.sub(KEYS[1], -4) ~= ":gen" then return nil, bad("keys") end
    local base = string.sub(KEYS[1], 1, -4)
    if KEYS[2] ~= base .. "holder:" .. tag then return nil, bad("keys") end
    N, BASE = n, base
    local seen = {}
    for i = 1, n do
        local seat = ARGV[fixed + i]
        if #seat < 1 or #seat > 88 or not (string.match(seat, "^[%w][%w._-]*$") and #seat <= 64 or is_place(seat)) or seen[seat] then
            return nil, bad("seat " .. i)
        end
        if hk(i) ~= base .. "hold:" .. seat then return nil, bad("key " .. i) end
        seen[seat] = true
    end
    for i = 3 + n, #KEYS do
        local k = KEYS[i]
        if string.sub(k, 1, #base + 5) ~= base .. "sold:" or not string.match(string.sub(k, #base + 6), "^%d+$") then
            return nil, bad("sold key " .. (i - 2 - n))
        end
    end
    return n
end

-- hold_layout checks the arguments of a script that acts on an existing hold: the
-- common layout, ARGV[2] the token and ARGV[3] the generation. It returns the number
-- of seats, or nil and an error reply.
local function hold_layout(fixed)
    local n, err = layout(fixed, 1, 1)
    if not n then return nil, err end
    if not is_hex(ARGV[2], 32) then return nil, bad("token") end
    if not is_uint(ARGV[3], 1, 9007199254740991) then return nil, bad("generation") end
    return n
end

-- int formats an integer as digits: tostring would write 1e+14 from 10^14 on.
local function int(x) return string.format("%d", x) end

-- parse_hold splits a hold value "<token>:<gen>:<created_ms>:<tag>[:<original gen>]"
-- (the original generation is there once regen.lua re-issued the hold's generation),
-- followed, while a batch commits the hold, by "|<commit id><nonce>:<expiry ms>:<end ms>"
-- (see reserve.lua): token, gen, created, tag, original gen, commit id ("" when none),
-- expiry before the commit reserved it, the reservation's own end (Redis ms; "" in a
-- value an older holdfast wrote, whose reservation ends with its keys), and the nonce of
-- the check that made the reservation (16 hex digits, right after the commit id's 32;
-- "" in a value an older holdfast wrote, which reads commit id and nonce as one other
-- batch's id).
local function parse_hold(v)
    local base, cid, cexp, cend = string.match(v, "^([^|]+)|(%x+):(%d+):?(%d*)$")
    if not base then base, cid, cexp, cend = v, "", "", "" end
    local nonce = string.sub(cid, 33)
    cid = string.sub(cid, 1, 32)
    local t, g, c, h, o = string.match(base, "^([0-9a-f]+):(%d+):(%d+):([0-9a-f]*):?(%d*)$")
    return t, g, c, h, o, cid, cexp, cend, nonce
end

-- hold_base is a hold value without its commit reservation.
local function hold_base(v) return (string.match(v, "^([^|]+)")) end

-- owned returns the creation time (ms), the current generation and the commit id of the
-- hold when every seat key holds token with one creation time and one generation, the
-- holder tag is tag, and gen is that generation or the one it had before regen.lua
-- re-issued it; nil when any seat is not this hold. The commit id is "" when no batch is
-- committing any of the seats (a confirmation of some of a hold's seats reserves those
-- alone; the hold is being committed all the same). The token is compared here, inside
-- Redis, and nowhere else.
-- A reservation lapses by itself at its end (reserve.lua): its batch has ended by then,
-- whatever reply was lost. A lapsed one is no commit: its id is returned fourth, and the
-- hold is as it was, with its own expiry — nil when that has passed too.
local function owned(n, token, gen, tag)
    local created, cur, commit, lapsed, now = nil, nil, "", "", nil
    for i = 1, n do
        local v = redis.call("GET", hk(i))
        if not v then return nil end
        local t, g, c, h, o, cid, cexp, cend = parse_hold(v)
        if t ~= token or h ~= tag or (g ~= gen and o ~= gen) or (created and (c ~= created or g ~= cur)) then
            return nil
        end
        created, cur = c, g
        if cend ~= "" then
            now = now or now_ms()
            if tonumber(cend) <= now then
                if tonumber(cexp) <= now then return nil end
                if lapsed == "" then lapsed = cid end
                cid = ""
            end
        end
        if commit == "" then commit = cid end
    end
    return tonumber(created), cur, commit, lapsed
end

-- Sold markers. A seat's marker is the generation of the booking that sold it ("g"), or,
-- once that booking is cancelled, "-g" (a tombstone: the seat is free). Markers are
-- ordered by (generation, cancelled): a write only ever moves a marker forward, so
-- marker writes may arrive late, twice or out of order and still end where the
-- database is. A value that is not a number (written by an older holdfast) counts as
-- sold, below every generation.
local function mark_order(v)
    if not v then return -1, 0 end
    local g = tonumber(v)
    if not g then return 0, 0 end
    if g < 0 then return -g, 1 end
    return g, 0
end

local function is_sold(v) return v and string.sub(v, 1, 1) ~= "-" end

local function seat(i, fixed) return ARGV[fixed + i] end

-- A spent hold's keys that a cancellation's tombstone dropped (mark.lua) leave
-- <base>spent:<sha1 of "holdfast-spent:" and the token> for as long as the hold had
-- left, so that the hold, whatever generation it presents, is still known spent.
local function spent_key(token) return BASE .. "spent:" .. redis.sha1hex("holdfast-spent:" .. token) end

-- made_booking reports whether the hold of token, presenting generation gen for the
-- request's n seats (after fixed), made a booking: a seat carries a marker of gen,
-- sold or cancelled (mark.lua replaced its keys by the markers, or dropped them on the
-- tombstone), or its spent key is there.
local function made_booking(n, fixed, token, gen)
    if redis.call("EXISTS", spent_key(token)) == 1 then return true end
    local cancelled = "-" .. gen
    for i = 1, n do
        local m = redis.call("HGET", sk(i), seat(i, fixed))
        if m == gen or m == cancelled then return true end
    end
    return false
end

-- Hold moves. reclaim.lua and transfer.lua log each hold they give a new token in the
-- show's stream <base>moves, in the script that moves it, for the engine to write to the
-- event feed in PostgreSQL and then delete (engine/moves.go): the stream holds the
-- moves whose events are not in the feed yet, and is never trimmed. An entry's fields:
--   k  the event's kind: hold_reclaimed or hold_transferred
--   m  the move's id: the SHA-1 of "holdfast-move:" and the new token (every move has a
--      new token, so its own id; the token itself never leaves the hold keys)
--   g  the new generation                 x  the hold's expiry (ms, Redis clock)
--   s  the hold's seats and place keys, space-separated
--   h  the holder's id now                f  the holder's id before ("" for a reclaim)
local function move_log(kind, token, gen, exp, seats, holder, from)
    redis.call("XADD", BASE .. "moves", "*", "k", kind, "m", redis.sha1hex("holdfast-move:" .. token),
        "g", int(gen), "x", int(exp), "s", table.concat(seats, " "), "h", holder, "f", from)
end

-- seat_list joins the seat arguments (after fixed) with spaces.
local function seat_list(fixed)
    return table.concat(ARGV, " ", fixed + 1, fixed + N)
end

-- The best-available index (see index.lua, best.lua). A row is indexed in segments of
-- at most 32 adjacent seats (engine/shows.go): a best-available block never spans two.
--   <base>mt:<bucket>  hash seat -> its meta "<score> <section> <segment> <place>": score =
--                      rank * 2^20 + layout index (lower is better), the section's number,
--                      the segment (the layout index of its first seat) and the seat's
--                      place in it (1..32)
--   <base>sg           hash segment -> "<scores> <seats>": its places' scores, SCORE_W
--                      digits each, then its seats as "<seat>@<bucket>", space-separated
--   <base>fr:<section> zset "<seat>@<bucket>": every seat that is not sold, a free one at
--                      its score, a held one at HELD + its hold's expiry (ms), so that
--                      expired holds are found by score and given back lazily
--   <base>rn:<section>:<c>  zset "<segment>:<first place>:<len>": runs of adjacent seats
--                      of length c (10 for 10 and more), at the run's best score
--   <base>rd:<section> set "<segment>:<place>": the seats of the section that came free
--                      since their segment's runs were last listed
--   <base>ixs          exists once every seat is indexed
-- A seat without meta is not indexed yet: scripts leave it alone.
--
-- The runs are kept lazily, and only adjacent searches pay for them. A seat that stops
-- being free changes only its entry in fr, and the runs it was in stay listed until
-- best.lua meets them, checks them against fr and puts the runs of free seats they now
-- hold in their place. A seat that becomes free changes its entry in fr and is marked
-- in rd; an adjacent search first lists the runs of free seats of every segment with a
-- marked seat in its sections, and unlists the runs a marked seat joined (best.lua:
-- relist), so that gives do not pile up listings. So, once that is done, every run of free
-- seats (maximal: no free seat on either side in its segment) lies within a listed run,
-- whose score (its best seat's) is never above its own and whose length is never below
-- it — best.lua meets that one first and finds the run there.
local HELD = 4503599627370496 -- 2^52
local SCORE_W = 16            -- digits of a score in a segment record (2^52 < 10^16)

local function bucket_of(i) return string.match(sk(i), "sold:(%d+)$") end

-- meta_parse reads seat's meta value m (in bucket b).
local function meta_parse(seat, b, m)
    local score, sec, seg, pos = string.match(m, "^(%d+) (%d+) (%d+) (%d+)$")
    return {seat = seat, b = b, score = tonumber(score), sec = sec, seg = seg, pos = tonumber(pos)}
end

local function meta_get(seat, b)
    local m = redis.call("HGET", BASE .. "mt:" .. b, seat)
    if not m then return nil end
    return meta_parse(seat, b, m)
end

local function ref(r)
    if r == "-" then return nil end
    return string.match(r, "^(.+)@(%d+)$")
end

local function free_key(sec) return BASE .. "fr:" .. sec end
local function member(m) return m.seat .. "@" .. m.b end
local SEG = "sg"

-- segment reads segment seg of section sec: its places' members ("<seat>@<bucket>"),
-- scores and whether fr lists them as free now, by place (seat_meta makes one a meta).
local function segment(seg, sec)
    local v = redis.call("HGET", BASE .. SEG, seg)
    if not v then return nil end
    local cut = string.find(v, " ", 1, true)
    local S = {seg = seg, sec = sec, mem = {}, score = {}, free = {}, n = 0}
    for mem in string.gmatch(string.sub(v, cut + 1), "%S+") do
        local k = S.n + 1
        S.n = k
        S.mem[k] = mem
        S.score[k] = tonumber(string.sub(v, SCORE_W * (k - 1) + 1, SCORE_W * k))
    end
    local sc = redis.call("ZMSCORE", free_key(sec), unpack(S.mem))
    for k = 1, S.n do S.free[k] = sc[k] ~= false and sc[k] ~= nil and tonumber(sc[k]) < HELD end
    return S
end

-- seat_meta is place k of segment S as a meta (see meta_parse).
local function seat_meta(S, k)
    local seat, b = string.match(S.mem[k], "^(.+)@(%d+)$")
    return {seat = seat, b = b, score = S.score[k], sec = S.sec, seg = S.seg, pos = k}
end

local function run_key(sec, len) return BASE .. "rn:" .. sec .. ":" .. math.min(len, 10) end

-- run_name is the run of places lo..hi of segment seg as listed; run_score its best
-- seat's score (S: the segment, from segment()).
local function run_name(seg, lo, hi) return seg .. ":" .. lo .. ":" .. (hi - lo + 1) end
local function run_score(S, lo, hi)
    local best = S.score[lo]
    for k = lo + 1, hi do best = math.min(best, S.score[k]) end
    return best
end

-- free_run is the run of free seats around place p of segment S: its first and last place.
local function free_run(S, p)
    local lo, hi = p, p
    while lo > 1 and S.free[lo - 1] do lo = lo - 1 end
    while hi < S.n and S.free[hi + 1] do hi = hi + 1 end
    return lo, hi
end

-- each_free_run calls fn(a, b) for each run of free seats of segment S that starts
-- within places lo..hi, each as far as it goes (b may lie past hi), in order.
local function each_free_run(S, lo, hi, fn)
    local p = lo
    while p <= hi do
        if S.free[p] then
            local a, b = free_run(S, p)
            fn(a, b)
            p = b + 1
        else
            p = p + 1
        end
    end
end

-- Waitlists (engine/waitlist.go; the offers themselves: wl_lib below). WL is this
-- call's view of them: on (nil until asked: does the show have a waitlist entry waiting
-- or offered, <base>wl:on), the categories whose seats or places this call freed
-- (dirty), the seat arguments it offered (taken) and the feed entries of its offers.
local function wl_new() return {dirty = {}, any = false, taken = {}, feeds = {}, offers = 0, more = false} end
local WL = wl_new()
local WL_OFFERS = 32 -- offers one call makes at most (offer_cat)

-- wl_on: whether the show has waitlist entries (<base>wl:on), read once a call. A group
-- of holds reads it once while it finds none: a hold adds no entry.
local function wl_on()
    if WL.on ~= nil then return WL.on end
    if GROUP and GROUP.wl_off == BASE then
        WL.on = false
    else
        WL.on = redis.call("EXISTS", BASE .. "wl:on") == 1
        if GROUP and not WL.on then GROUP.wl_off = BASE end
    end
    return WL.on
end

-- wl_dirty: a seat of section number sec ("s" .. sec) or a place of area a ("a" .. a) has
-- come free; its category is offered to its waitlist before the call ends.
local function wl_dirty(k)
    if not wl_on() then return end
    local cat = redis.call("HGET", BASE .. "wl:map", k)
    if cat then WL.dirty[cat], WL.any = true, true end
end

-- take: a free seat stops being free; held until exp (ms), or sold when exp is nil.
-- The runs it was in are left to best.lua.
local function take(m, exp)
    if exp then
        redis.call("ZADD", free_key(m.sec), int(HELD + exp), member(m))
    else
        redis.call("ZREM", free_key(m.sec), member(m))
    end
end

-- dirty_key: the seats of section sec that came free since their segment's runs were
-- last listed (see above).
local function dirty_key(sec) return BASE .. "rd:" .. sec end

-- give: a seat that is not free becomes free; its segment's runs are owed a listing.
local function give(m)
    local s = redis.call("ZSCORE", free_key(m.sec), member(m))
    if s and tonumber(s) < HELD then return end
    redis.call("ZADD", free_key(m.sec), int(m.score), member(m))
    wl_dirty("s" .. m.sec)
    redis.call("SADD", dirty_key(m.sec), m.seg .. ":" .. m.pos)
end

-- index_held: seat i of the call is now held until exp (a hold, an extension, a commit's
-- reservation). A sold seat stays out of the index whatever its hold does: a hold taken
-- while the seat's marker was owed outlives the marker's arrival (mark.lua leaves it to
-- its owner), and extending it must not list the seat again.
-- unsold says the caller has just read the seat's marker and found it unsold.
local function index_held(i, seat_id, exp, unsold)
    local b = bucket_of(i)
    local v = redis.call("HGET", BASE .. "mt:" .. b, seat_id)
    if not v then return end
    -- take needs the seat's section and member alone.
    local m = {seat = seat_id, b = b, sec = string.match(v, "^%d+ (%d+) ")}
    if not unsold and is_sold(redis.call("HGET", sk(i), seat_id)) then take(m, nil) else take(m, exp) end
end

-- index_fix: the indexed seat m is now as Redis says: sold, held (its key's TTL) or
-- free. Used after a release, a marker write, an expiry, and wherever the index and the
-- keys might disagree.
local function index_fix(m, now)
    if is_sold(redis.call("HGET", BASE .. "sold:" .. m.b, m.seat)) then
        take(m, nil)
        return
    end
    -- The key's own expiry, not now + its PTTL: TIME moves during a script while its
    -- keys expire by the script's start, so a sum can land after the key's expiry, and
    -- an index entry later than its key hides an expired hold from a reaping.
    local at = redis.call("PEXPIRETIME", BASE .. "hold:" .. m.seat)
    if at >= 0 then take(m, at) else give(m) end
end

-- index_state: index_fix for seat i of the call.
local function index_state(i, seat_id, now)
    local m = meta_get(seat_id, bucket_of(i))
    if m then index_fix(m, now) end
end

-- Sale rules (engine/sale.go). A show's rules are one string, "<epoch> <version> <holder
-- limit> <queue opens ms or -1> <admissions per second> <admission ttl ms> <seats>", and
-- for a show with standing areas " <places> <areas>" (their capacities' sum, and how
-- many), kept in <base>rules. epoch is the show's identity (a show deleted and created again under its
-- id has a larger one), version counts the changes of that show's rules. From the moment
-- DeleteShow closes a show (close.lua), and for good once it is deleted, the key says
-- "<epoch> closed". Every script that needs the rules is given the engine's copy (read
-- from the database) and keeps the newer of the two, a later show's or else a higher
-- version: a Redis that lost its copy, or missed a change in a failover, is given it back
-- before the script decides anything. A copy of an earlier show than Redis knows, or of a
-- closed one, decides nothing: the script refuses (see sale_rules).
local function parse_rules(s)
    if type(s) ~= "string" then return nil end
    local head, places, areas = string.match(s, "^(.*) (%d+) (%d+)$")
    local e, v, lim, opens, rate, ttl, seats = string.match(head or "", "^(%d+) (%d+) (%d+) (%-?%d+) (%d+%.?%d*) (%d+) (%d+)$")
    if not e then
        places, areas = "0", "0"
        e, v, lim, opens, rate, ttl, seats = string.match(s, "^(%d+) (%d+) (%d+) (%-?%d+) (%d+%.?%d*) (%d+) (%d+)$")
    end
    if not e then return nil end
    return {e = tonumber(e), v = tonumber(v), limit = tonumber(lim), opens = tonumber(opens), rate = tonumber(rate),
        ttl = tonumber(ttl), seats = tonumber(seats), places = tonumber(places), areas = tonumber(areas),
        queue = tonumber(opens) >= 0}
end

-- rules_parse is parse_rules, once per rules string in a group call (its members share
-- the tables: no script changes one).
local function rules_parse(s)
    if not GROUP then return parse_rules(s) end
    local r = GROUP.parsed[s]
    if r == nil then
        r = parse_rules(s) or false
        GROUP.parsed[s] = r
    end
    return r or nil
end

-- rules_epoch reads the rules key's value s: the epoch it is of (0 for none), whether
-- it says that show is closed, and its rules (rules_parse; nil when closed or none).
local function rules_epoch(s)
    if type(s) ~= "string" then return 0, false end
    local closed = string.match(s, "^(%d+) closed$")
    if closed then return tonumber(closed), true end
    local r = rules_parse(s)
    if r then return r.e, false, r end
    return 0, false
end

-- sale_rules returns the show's rules: the given ones (ARGV, already checked by
-- rules_parse) or Redis's when those are of the same show and at least as new. When
-- Redis knows a later show of the id it returns nil and {"STALE"}; when the given show is
-- closed, nil and {"CLOSED"}. Either way Redis's copy is left as it is. A copy that is
-- the given string itself, the usual case, is not parsed again: a parse costs several
-- times a Redis command called from Lua.
local function sale_rules(given, raw)
    local key = BASE .. "rules"
    if GROUP and GROUP.rules == raw then return given end
    local cur = redis.call("GET", key)
    if cur == raw then
        if GROUP then GROUP.rules = raw end
        return given
    end
    local e, closed, have = rules_epoch(cur)
    if e > given.e then return nil, {"STALE"} end
    if e == given.e then
        if closed then return nil, {"CLOSED"} end
        if have and have.v >= given.v then return have end
    end
    redis.call("SET", key, raw)
    if GROUP then GROUP.rules = raw end
    return given
end

-- booked returns the seats tag's confirmed bookings hold in the show, as the database
-- last said (<base>hc: tag -> "<version>:<seats>", see counts.lua).
local function booked(tag)
    local v = redis.call("HGET", BASE .. "hc", tag)
    if not v then return 0 end
    return tonumber(string.match(v, ":(%d+)$")) or 0
end

-- sale_admitted: nil when tag may take a hold now under rules r, else the refusal.
-- With a waiting room only a holder admitted now (<base>q:adm: tag -> until ms) may;
-- their first try, granted or not, takes them off <base>q:fresh (the admissions whose
-- holders have not tried yet, which the room counts as demand still to come).
local function sale_admitted(r, tag, now)
    if not r.queue then return nil end
    if tag == "" then return {"NOTADMITTED"} end
    local u = redis.call("ZSCORE", BASE .. "q:adm", tag)
    if not u or tonumber(u) <= now then return {"NOTADMITTED"} end
    redis.call("ZREM", BASE .. "q:fresh", tag)
    return nil
end

-- sale_limit: nil when tag, who holds held seats now, may hold n more under the holder
-- limit of rules r (seats held plus seats booked), else the refusal.
local function sale_limit(r, tag, held, n)
    if r.limit == 0 then return nil end
    if tag == "" then return {"LIMIT", 0, r.limit} end
    local have = held + booked(tag)
    if have + n > r.limit then return {"LIMIT", have, r.limit} end
    return nil
end

-- held_x moves <base>heldx, the places beyond one of the place keys in <base>held, by
-- d times them for place key s (a member counts one, a place key its places: the units
-- held are ZCARD held + heldx).
local function held_x(s, d)
    if not string.find(s, "~", 1, true) then return end -- a seat: one
    local c = units(s)
    if c > 1 then redis.call("INCRBY", BASE .. "heldx", d * (c - 1)) end
end

-- sale_granted records a granted hold of the given seats until exp for the waiting
-- room: the seats and place keys held (<base>held: seat -> expiry ms, and heldx: see
-- held_x; admission counts them), and the units per hold it estimates demand with.
local function sale_granted(r, seats, exp)
    if not r.queue then return end
    local n = 0
    for _, s in ipairs(seats) do
        if redis.call("ZADD", BASE .. "held", exp, s) == 1 then held_x(s, 1) end
        n = n + (string.find(s, "~", 1, true) and units(s) or 1)
    end
    redis.call("HINCRBY", BASE .. "q:st", "hs", n)
    redis.call("HINCRBY", BASE .. "q:st", "hn", 1)
end

-- held_gone: seat's hold is gone (released, sold, expired); held_until: it lives until exp.
local function held_gone(s)
    if redis.call("ZREM", BASE .. "held", s) == 1 then held_x(s, -1) end
end
local function held_until(s, exp) redis.call("ZADD", BASE .. "held", "XX", exp, s) end

-- nsold_add moves the show's count of sold seats (<base>nsold) by d, when it is kept
-- (the waiting room counts it once, then it is kept up).
local function nsold_add(d)
    if redis.call("EXISTS", BASE .. "nsold") == 1 then redis.call("INCRBY", BASE .. "nsold", d) end
end

-- place_gone: place key s's hold key is gone (released, sold, dropped): its places are
-- no longer held. Only the first call for a hold counts (its zset entry's ZREM).
local function place_gone(s)
    local a, c = place_of(s)
    if a and redis.call("ZREM", BASE .. "ax:" .. a, s) == 1 then
        redis.call("HINCRBY", BASE .. "ar:" .. a, "h", -c)
        wl_dirty("a" .. a)
    end
end

-- area_trim gives back the places of area a's holds whose keys have gone by now (expired)
-- and scores again those still alive past their score.
local function area_trim(a, now)
    local ax = BASE .. "ax:" .. a
    local back = 0
    for _, p in ipairs(redis.call("ZRANGEBYSCORE", ax, "-inf", now)) do
        local at = redis.call("PEXPIRETIME", BASE .. "hold:" .. p) -- never after the key's expiry (index_fix)
        if at > now then
            redis.call("ZADD", ax, at, p)
        else
            redis.call("ZREM", ax, p)
            back = back + units(p)
        end
    end
    if back > 0 then
        redis.call("HINCRBY", BASE .. "ar:" .. a, "h", -back)
        wl_dirty("a" .. a)
    end
end

-- area_free is the places of area a free now, after area_trim; nil when Redis has no
-- state for the area (it lost the show: the engine rebuilds it).
local function area_free(a, now)
    if redis.call("EXISTS", BASE .. "ar:" .. a) == 0 then return nil end
    area_trim(a, now)
    local v = redis.call("HMGET", BASE .. "ar:" .. a, "c", "h", "s")
    return math.max(0, (tonumber(v[1]) or 0) - (tonumber(v[2]) or 0) - (tonumber(v[3]) or 0))
end

-- place_held: place key s is now held until exp by a new hold.
local function place_held(s, exp)
    local a, c = place_of(s)
    if not a then return end
    redis.call("ZADD", BASE .. "ax:" .. a, exp, s)
    redis.call("HINCRBY", BASE .. "ar:" .. a, "h", c)
end

-- place_marked: place key s's marker moved to sold (now_sold) or from sold.
local function place_marked(s, now_sold)
    local a, c = place_of(s)
    if a then
        redis.call("HINCRBY", BASE .. "ar:" .. a, "s", now_sold and c or -c)
        if not now_sold then wl_dirty("a" .. a) end
    end
end

-- place_key is place key s of k places and hold id id (16 hex digits): the same area.
local function place_key(s, k, id)
    local a = place_of(s)
    return a .. "~" .. int(k) .. "~" .. id
end

-- place_rename renames place key s (hold key hk(i)) to place key to of the same area,
-- under the same hash tag, with the same value and expiry exp: its entry in the holder
-- zset from_z moves to to_z (the same key, or another holder's), its entries in the
-- waiting room's held seats and its area's holds follow, and the area's held places
-- change by to's count less s's.
local function place_rename(i, s, to, exp, from_z, to_z)
    local a, c = place_of(s)
    local _, k = place_of(to)
    redis.call("SET", BASE .. "hold:" .. to, redis.call("GET", hk(i)), "PXAT", exp)
    redis.call("DEL", hk(i))
    local z = redis.call("ZSCORE", from_z, s)
    if z then
        redis.call("ZREM", from_z, s)
        redis.call("ZADD", to_z, z, to)
    end
    local h = redis.call("ZSCORE", BASE .. "held", s)
    if h then
        held_gone(s)
        if redis.call("ZADD", BASE .. "held", h, to) == 1 then held_x(to, 1) end
    end
    local ax = redis.call("ZSCORE", BASE .. "ax:" .. a, s)
    if ax then
        redis.call("ZREM", BASE .. "ax:" .. a, s)
        redis.call("ZADD", BASE .. "ax:" .. a, ax, to)
        redis.call("HINCRBY", BASE .. "ar:" .. a, "h", k - c)
        if k < c then wl_dirty("a" .. a) end
    end
end

-- held_units is what holder tag's holds (their zset key) count now: a seat one, a place
-- key its places.
local function held_units(key)
    local n = 0
    for _, m in ipairs(redis.call("ZRANGE", key, 0, -1)) do n = n + units(m) end
    return n
end

-- A hold's offer (engine/offers.go) is <base>of:<sha1 of its token>, written by the
-- engine before the hold script, living past any hold. offer_of is the offer of the hold
-- of token ("" for none); offer_move gives it to the hold's new token (reclaim.lua,
-- transfer.lua) with the same end, and returns it.
local function offer_of(token) return redis.call("GET", BASE .. "of:" .. redis.sha1hex(token)) or "" end
local function offer_move(from, to)
    local k = BASE .. "of:" .. redis.sha1hex(from)
    local o = redis.call("GET", k)
    if not o then return "" end
    redis.call("SET", BASE .. "of:" .. redis.sha1hex(to), o, "PXAT", redis.call("PEXPIRETIME", k))
    return o
end

-- Idempotency keys (engine/idempotency.go). A call made with one ends its KEYS with the
-- key's record, <base>idem:<64 hex digits> (under the show's hash tag, named from the
-- holder and the key), and its ARGV with the request's fingerprint (64 hex digits) and
-- the record's life in ms. The record holds "<fingerprint>\n<token>\n<reply>": the reply
-- the first call gave, each field "i<integer>" or "s<string>" on a line of its own, and
-- the token of the hold it names. idem_open takes the key's items off KEYS and ARGV (the
-- script's layout then reads as without a key) and returns the call's record, nil and
-- an error reply when the items are malformed: rec ("" without a key), fp, life, and,
-- when the record exists, its token, its reply and same (true when it answered this
-- very request, false when another request).
local function idem_open()
    local rec = KEYS[#KEYS]
    local I = {rec = ""}
    if not rec or not string.match(rec, ":idem:%x+$") then return I end
    table.remove(KEYS)
    I.rec, I.life, I.fp = rec, table.remove(ARGV), table.remove(ARGV)
    local base = KEYS[1] and string.sub(KEYS[1], 1, -4)
    if not base or string.sub(KEYS[1], -4) ~= ":gen" or rec ~= base .. "idem:" .. string.sub(rec, #base + 6)
        or not is_hex(string.sub(rec, #base + 6), 64) then
        return nil, bad("idempotency record")
    end
    if not is_hex(I.fp, 64) then return nil, bad("fingerprint") end
    if not is_uint(I.life or "", 1, 86400000) then return nil, bad("idempotency life") end
    local v = redis.call("GET", rec)
    if not v then return I end
    local fp, token, rest = string.match(v, "^(%x+)\n(%x*)\n(.*)$")
    if not fp then return I end
    I.same, I.token, I.reply = fp == I.fp, token, {}
    for f in string.gmatch(rest, "[^\n]+") do
        local kind, x = string.sub(f, 1, 1), string.sub(f, 2)
        I.reply[#I.reply + 1] = (kind == "i" and tonumber(x)) or x
    end
    return I
end

-- idem_replay is the answer to a call whose record exists: {"REPLAY", token, reply...}
-- for the request it answered, {"KEYREUSED"} for another; nil without one.
local function idem_replay(I)
    if not I.reply then return nil end
    if not I.same then return {"KEYREUSED"} end
    local out = {"REPLAY", I.token}
    for i = 1, #I.reply do out[#out + 1] = I.reply[i] end
    return out
end

-- idem_hold finds the hold a new hold's key names (hold.lua, best.lua: its record's
-- reply is {"OK", generation, expiry, created ms, "", the first call's seat arguments}).
-- A seat argument holds it when its hold key holds the record's token, among the
-- holder's live seats (KEYS[2]: a Shrink may have renamed a place key) and the record's
-- own seat arguments (in case the holder's set lost one). A hold whose batch
-- reservation outlived it (its own expiry, before the reservation, has passed) is gone.
-- It returns those seat arguments (none: the hold is gone) with the hold's generation,
-- creation time and own expiry; and whether a recorded seat holds, for this holder, a
-- hold created at the same time under another token (reclaim.lua gave the key's hold
-- fresh tokens: it lives on, on another device).
local function idem_hold(I, now)
    local live, seen, gen, created, at, moved = {}, {}, nil, nil, nil, false
    local function look(s, recorded)
        if seen[s] then return end
        seen[s] = true
        local v = redis.call("GET", BASE .. "hold:" .. s)
        if not v then return end
        local t, g, c, h, _, cid, cexp = parse_hold(v)
        if t == I.token then
            local own = (cid ~= "" and tonumber(cexp)) or redis.call("PEXPIRETIME", BASE .. "hold:" .. s)
            if own > now then
                live[#live + 1], gen, created, at = s, tonumber(g), tonumber(c), at or own
            end
        elseif recorded and h == ARGV[1] and tonumber(c) == I.reply[4] then
            moved = true
        end
    end
    for i = 6, #I.reply do look(I.reply[i], true) end
    for _, s in ipairs(redis.call("ZRANGE", KEYS[2], now, "+inf", "BYSCORE")) do look(s, false) end
    return live, gen, created, at, moved
end

-- idem_held answers a new hold's call (hold.lua, best.lua) whose key names a hold that
-- lives: {"REPLAY", token, "OK", generation, expiry, created, "", seat arguments...}
-- with the hold as it is now (a Shrink may have given part of it back), {"LOST"} when
-- the hold lives under fresh tokens (Reclaim), {"KEYREUSED"} for another request; nil
-- when the key's hold is gone (the key is free).
local function idem_held(I, now)
    if not I.reply then return nil end
    local live, gen, created, at, moved = idem_hold(I, now)
    if #live == 0 and not moved then return nil end
    if not I.same then return {"KEYREUSED"} end
    if #live == 0 then return {"LOST"} end
    local out = {"REPLAY", I.token, "OK", gen, at, created, ""}
    for _, s in ipairs(live) do out[#out + 1] = s end
    return out
end

-- idem_keep keeps reply, the answer to the call, with token (the hold it names), in the
-- call's record (nothing without a key; the field at index skip, a feed entry id, is
-- kept as ""), and returns reply.
local function idem_keep(I, token, reply, skip)
    if I.rec == "" then return reply end
    local out = {}
    for i = 1, #reply do
        local v = reply[i]
        if i == skip then v = "" end
        out[i] = (type(v) == "number" and "i" .. int(v)) or "s" .. v
    end
    redis.call("SET", I.rec, I.fp .. "\n" .. token .. "\n" .. table.concat(out, "\n"), "PX", I.life)
    return reply
end

-- Waitlists (engine/waitlist.go). A show's, under its hash tag:
--   <base>wl:on        the entries waiting or offered, a count (gone at 0)
--   <base>wl:map       hash "s<section number>" / "a<area id>" -> category, for every
--                      category that has had a waitlist
--   <base>wl:cats      set of those categories
--   <base>wl:c:<cat>   hash secs: the category's section numbers; areas: its areas as
--                      "<area>@<marker bucket>" (both space-separated)
--   <base>wl:qc:<cat>  zset of the counts entries wait for (scored by the count)
--   <base>wl:q:<cat>:<k>  zset holder tag -> join number: the entries waiting for k
--   <base>wl:seq       the join numbers
--   <base>wl:e:<cat>:<tag>  hash, an entry: count, ttl (its offer's, ms), token and hid
--                      (its offer hold's token and place hold id, chosen at the join),
--                      cap (the engine's seats per holder, 0: none), seq, state
--                      ("waiting", "offered" or "expired"), and once offered gen, exp
--                      and units ("<seat or place key>@<marker bucket>", space-separated)
--   <base>wl:ox        zset "<cat>\t<tag>" -> expiry: the offers out
--   <base>wl:t:<sha1 of token>  "<cat>\t<tag>": the entry an offer hold's token is of,
--                      until a day past the offer's expiry
--   <base>wl:at        the horizon (ms, Redis clock) while the show has a waitlist: the
--                      time of the last sweep that went through every category (wl.lua)
-- Whatever frees a seat or places of a category with a waitlist (give, place_gone,
-- area_trim, place_marked: a release, a shrink, a cancellation, an expiry found) marks
-- the category (wl_dirty), and before the call's feed entry flush (in wl_lib) offers the free
-- seats and places of each marked category, entry by entry, to the first entry whose
-- count fits and whose holder may hold that many more: as a hold of the holder's, under
-- the entry's token, a new generation and the entry's TTL. So a seat freed goes to the
-- waitlist in the script that frees it; one freed by an expiry, in the first script
-- that finds it expired (wl_precheck, best.lua's reaping, wl.lua's sweep).
--
-- wl_lib makes the functions that make the offers at the first call that needs them (a
-- show with an entry waiting or offered) and keeps them (WLF) for every later call: they
-- are functions only, which read the call's state through BASE and WL, never a value
-- of the call that made them.

local WLF
local function wl_lib()
    if WLF then return WLF end
    local L = {}
    function L.entry(cat, tag)
        local v = redis.call("HGETALL", BASE .. "wl:e:" .. cat .. ":" .. tag)
        if #v == 0 then return nil end
        local E = {}
        for i = 1, #v, 2 do E[v[i]] = v[i + 1] end
        return E
    end

    -- rules: the show's rules as Redis has them, nil when the show is closed or unknown.
    function L.rules()
        local cur = redis.call("GET", BASE .. "rules")
        local _, closed = rules_epoch(cur)
        if closed then return nil end
        return rules_parse(cur)
    end

    -- fits: may tag hold the entry's count more now (the engine's cap, the sale's limit)?
    function L.fits(E, tag, r, now)
        local hz = BASE .. "holder:" .. tag
        redis.call("ZREMRANGEBYSCORE", hz, "-inf", now)
        local held, k, cap = held_units(hz), tonumber(E.count), tonumber(E.cap)
        if cap > 0 and held + k > cap then return false end
        return r.limit == 0 or held + booked(tag) + k <= r.limit
    end

    -- next: the first entry of cat, by join number, whose count is at most free and whose
    -- holder may hold it now (among the first 64 waiting for each count: an entry behind
    -- 64 whose holders may not hold that many now waits): its tag and entry.
    function L.next(cat, free, r, now)
        local best, btag, bE
        for _, k in ipairs(redis.call("ZRANGE", BASE .. "wl:qc:" .. cat, 0, free, "BYSCORE")) do
            local heads = redis.call("ZRANGE", BASE .. "wl:q:" .. cat .. ":" .. k, 0, 63, "WITHSCORES")
            for j = 1, #heads, 2 do
                local seq = tonumber(heads[j + 1])
                if best and seq > best then break end
                local E = L.entry(cat, heads[j])
                if E and L.fits(E, heads[j], r, now) then
                    best, btag, bE = seq, heads[j], E
                    break
                end
            end
        end
        return btag, bE
    end

    -- seats: the count best free seats of the sections, each checked against its keys
    -- (the index is fixed where it was behind); nil when there are not that many.
    function L.seats(secs, count, now)
        for _ = 1, 5 do
            local c = {}
            for _, sec in ipairs(secs) do
                local r = redis.call("ZRANGE", free_key(sec), 0, string.format("(%d", HELD), "BYSCORE", "LIMIT", 0, count, "WITHSCORES")
                for k = 1, #r, 2 do c[#c + 1] = {mem = r[k], score = tonumber(r[k + 1])} end
            end
            if #c < count then return nil end
            table.sort(c, function(x, y) return x.score < y.score end)
            local out, ok = {}, true
            for k = 1, count do
                local s, b = ref(c[k].mem)
                local m = meta_get(s, b)
                if redis.call("EXISTS", BASE .. "hold:" .. s) == 1 or is_sold(redis.call("HGET", BASE .. "sold:" .. b, s)) then
                    index_fix(m, now)
                    ok = false
                end
                out[k] = {arg = s, b = b, m = m}
            end
            if ok then return out end
        end
        return nil
    end

    -- finish ends entry tag of cat (its offer booked, released or moved on); wl_expire keeps
    -- it a day as expired (its offer was not confirmed in time).
    function L.out(cat, tag)
        redis.call("ZREM", BASE .. "wl:ox", cat .. "\t" .. tag)
        if redis.call("DECR", BASE .. "wl:on") <= 0 then redis.call("DEL", BASE .. "wl:on") end
    end
    function L.finish(cat, tag)
        L.out(cat, tag)
        redis.call("DEL", BASE .. "wl:e:" .. cat .. ":" .. tag)
    end
    function L.expire(cat, tag)
        L.out(cat, tag)
        local ek = BASE .. "wl:e:" .. cat .. ":" .. tag
        redis.call("HSET", ek, "state", "expired")
        redis.call("PEXPIRE", ek, 86400000)
    end

    -- offer makes entry E of tag in cat its offer: units ({arg, b, m}: seats with their
    -- index meta, or one place key) held by tag under E's token and a new generation for
    -- E's TTL, counted as any hold of theirs.
    function L.offer(cat, tag, E, units, now, r)
        local gen, ttl = redis.call("INCR", BASE .. "gen"), tonumber(E.ttl)
        local exp = now + ttl
        local value = E.token .. ":" .. int(gen) .. ":" .. int(now) .. ":" .. tag
        local hz = BASE .. "holder:" .. tag
        local args, recs = {}, {}
        for k, u in ipairs(units) do
            redis.call("SET", BASE .. "hold:" .. u.arg, value, "PXAT", exp)
            redis.call("ZADD", hz, exp, u.arg)
            if u.m then take(u.m, exp) else place_held(u.arg, exp) end
            args[k], recs[k] = u.arg, u.arg .. "@" .. u.b
            WL.taken[u.arg] = true
        end
        if redis.call("PTTL", hz) < ttl then redis.call("PEXPIRE", hz, ttl) end
        sale_granted(r, args, exp)
        redis.call("HSET", BASE .. "wl:e:" .. cat .. ":" .. tag, "state", "offered", "gen", gen, "exp", exp, "units", table.concat(recs, " "))
        local q = BASE .. "wl:q:" .. cat .. ":" .. E.count
        redis.call("ZREM", q, tag)
        if redis.call("EXISTS", q) == 0 then redis.call("ZREM", BASE .. "wl:qc:" .. cat, E.count) end
        redis.call("ZADD", BASE .. "wl:ox", exp, cat .. "\t" .. tag)
        redis.call("SET", BASE .. "wl:t:" .. redis.sha1hex(E.token), cat .. "\t" .. tag, "PXAT", exp + 86400000)
        WL.feeds[#WL.feeds + 1] = {"h", table.concat(args, " "), "x", int(exp)}
    end

    -- category reads cat's sections and areas.
    function L.category(cat)
        local c = redis.call("HMGET", BASE .. "wl:c:" .. cat, "secs", "areas")
        local secs, areas = {}, {}
        for x in string.gmatch(c[1] or "", "%S+") do secs[#secs + 1] = x end
        for x in string.gmatch(c[2] or "", "%S+") do
            local a, b = string.match(x, "^(.+)@(%d+)$")
            areas[#areas + 1] = {a = a, b = b}
        end
        return secs, areas
    end

    -- reap gives back the expired holds of the sections secs (up to 500 a section) and
    -- of the areas: the seats and places that are free now, all counted.
    function L.reap(secs, areas, now)
        for _, sec in ipairs(secs) do
            local ended = redis.call("ZRANGE", free_key(sec), int(HELD), int(HELD + now - 1), "BYSCORE", "LIMIT", 0, 500)
            if #ended == 500 then WL.more = true end -- more may have ended: the sweep comes back
            for _, mem in ipairs(ended) do
                local s, b = ref(mem)
                local m = meta_get(s, b)
                if m then index_fix(m, now) end
            end
        end
        for _, a in ipairs(areas) do area_trim(a.a, now) end
    end

    -- offer_cat offers cat's free seats and places (its expired holds given back first),
    -- entry by entry, while one fits: an entry gets seats when as many are free, else
    -- places of one area that has them. A call makes at most WL_OFFERS offers (WL.more
    -- says it stopped there, or at the bound of expired holds it gives back: the sweep
    -- makes the rest), so that one script never blocks Redis for long whatever the
    -- waitlist.
    function L.offer_cat(cat, now, r)
        local secs, areas = L.category(cat)
        L.reap(secs, areas, now)
        local seats = 0
        for _, sec in ipairs(secs) do seats = seats + redis.call("ZCOUNT", free_key(sec), 0, string.format("(%d", HELD)) end
        local frees = {}
        for i, a in ipairs(areas) do frees[i] = area_free(a.a, now) or 0 end
        while true do
            local most = seats
            for i = 1, #areas do most = math.max(most, frees[i]) end
            if most == 0 then return end
            local tag, E = L.next(cat, most, r, now)
            if not tag then return end
            if WL.offers >= WL_OFFERS then
                WL.more = true
                return
            end
            local k, units = tonumber(E.count), nil
            if seats >= k then
                units = L.seats(secs, k, now)
                if units then seats = seats - k end
            end
            for i, a in ipairs(areas) do
                if not units and frees[i] >= k then
                    units, frees[i] = {{arg = a.a .. "~" .. int(k) .. "~" .. E.hid, b = a.b}}, frees[i] - k
                end
            end
            if not units then return end
            L.offer(cat, tag, E, units, now, r)
            WL.offers = WL.offers + 1
        end
    end

    -- settle brings entry tag of cat up to its offer hold, and returns the entry's state
    -- with, while offered, its hold as it is now (its seat arguments and expiry, found
    -- under the entry's token among the offer's and the holder's: a shrink renames a
    -- place key). While the hold lives the entry stays offered (scored again by the
    -- hold's expiry). A hold gone before the offer's expiry was booked (in part: a
    -- booking of it whole ends the entry as it is marked sold, wl_done) or released: the
    -- entry ends; one released after it too. Otherwise it expired: the entry is kept a
    -- day as expired. (A hold moved to another token, Reclaim or Transfer, ended the
    -- entry as it moved: wl_done.)
    function L.settle(cat, tag, now)
        local E = L.entry(cat, tag)
        if not E then return nil end
        if E.state ~= "offered" then return E.state end
        local live, until_, seen = {}, 0, {}
        local function look(arg)
            if seen[arg] then return end
            seen[arg] = true
            local v = redis.call("GET", BASE .. "hold:" .. arg)
            if v and string.sub(v, 1, 33) == E.token .. ":" then
                live[#live + 1] = arg
                until_ = math.max(until_, redis.call("PEXPIRETIME", BASE .. "hold:" .. arg))
            end
        end
        for u in string.gmatch(E.units, "%S+") do look(string.match(u, "^(.+)@%d+$")) end
        for _, m in ipairs(redis.call("ZRANGE", BASE .. "holder:" .. tag, now, "+inf", "BYSCORE")) do look(m) end
        if #live > 0 then
            redis.call("ZADD", BASE .. "wl:ox", until_, cat .. "\t" .. tag)
            table.sort(live)
            return "offered", live, until_
        end
        if now < tonumber(E.exp) or redis.call("EXISTS", BASE .. "released:" .. redis.sha1hex(tag .. ":" .. E.token)) == 1 then
            L.finish(cat, tag)
            return nil
        end
        L.expire(cat, tag)
        return "expired"
    end

    -- done: the hold of token was booked, or moved to another token: when it is an
    -- offer, its entry ends.
    function L.done(token)
        local e = redis.call("GET", BASE .. "wl:t:" .. redis.sha1hex(token))
        if not e then return end
        local cat, tag = string.match(e, "^(.-)\t(.*)$")
        local E = L.entry(cat, tag)
        if E and E.state == "offered" and E.token == token then L.finish(cat, tag) end
    end

    -- flush makes the offers owed: the offers out that are due are settled first (an
    -- expired one's entry ends before its seats go to the next), then each category this
    -- call freed seats or places of is offered.
    function L.flush(now)
        if not WL.any then return end
        WL.any = false
        local cats = {}
        for cat in pairs(WL.dirty) do cats[#cats + 1] = cat end
        WL.dirty = {}
        local r = L.rules()
        if not r then return end
        local ended = redis.call("ZRANGE", BASE .. "wl:ox", "-inf", now, "BYSCORE", "LIMIT", 0, 100)
        if #ended == 100 then WL.more = true end
        for _, m in ipairs(ended) do
            local cat, tag = string.match(m, "^(.-)\t(.*)$")
            L.settle(cat, tag, now)
        end
        table.sort(cats)
        for _, cat in ipairs(cats) do L.offer_cat(cat, now, r) end
    end
    WLF = L
    return L
end

-- wl_done: the hold of token was booked (mark.lua: whole; rest.lua: in part) or given
-- a new token (reclaim.lua, transfer.lua): when it is a waitlist's offer, its entry
-- ends (the offer is no longer the entry's to confirm).
local function wl_done(token)
    if wl_on() and token then wl_lib().done(token) end
end

-- The change feed. Every script that changes what a seat map shows appends one entry to
-- the show's stream <base>feed, saying each touched seat's new state:
--   n  the entry's number, from the counter <base>feed:n: a reader that does not see
--      n, n+1, n+2... missed entries (trimmed past it, or Redis lost the feed) and
--      rebuilds its map
--   h  seats now held, until x (ms, Redis clock)      d  seats whose hold is gone
--   s  seats now sold                                  u  seats no longer sold
--   w  the waitlist horizon: "-" for none, else a time (ms) up to which every expired
--      hold has been offered to the waitlists (wl.lua: wl_horizon); a map shows a hold
--      expired only once the horizon has passed its expiry, so a seat an expiry frees
--      is never shown free before its waitlist had it
-- Seat lists are space-separated (a seat id has no spaces). The stream is trimmed to
-- about FEED_LEN entries, so its memory is bounded per show. feed first makes the
-- waitlist offers the call owes (flush, in wl_lib): a seat it freed and offered is left out of
-- its "d", and each offer follows as an entry of its own (its hold's expiry), so that no
-- map shows an offered seat free. Returns the call's entry's id.
--
-- In a group call the holds' entries ("h" and "x" alone) wait in GROUP.held, one per
-- expiry, and go out as one entry each (group_flush) before any other entry and at the
-- group's end: the order of the entries is the order of the calls', and a hold's reply
-- gets its entry's id then (GROUP.ids).
local FEED_LEN = 4096
local function feed_write(base, fields)
    local n = redis.call("INCR", base .. "feed:n")
    return redis.call("XADD", base .. "feed", "MAXLEN", "~", FEED_LEN, "*", "n", n, unpack(fields))
end

local function group_flush()
    for _, x in ipairs(GROUP.order) do
        local e = GROUP.held[x]
        local id = feed_write(GROUP.base, {"h", table.concat(e.seats, " "), "x", x})
        for _, m in ipairs(e.members) do GROUP.ids[m] = id end
    end
    GROUP.held, GROUP.order = {}, {}
end

local function feed_entry(fields)
    if GROUP then group_flush() end
    return feed_write(BASE, fields)
end

-- group_hold keeps a group member's hold entry (seats held until x) for group_flush.
local function group_hold(seats, x)
    local e = GROUP.held[x]
    if not e then
        e = {seats = {}, members = {}}
        GROUP.held[x] = e
        GROUP.order[#GROUP.order + 1] = x
    end
    GROUP.base = BASE
    e.seats[#e.seats + 1] = seats
    e.members[#e.members + 1] = GROUP.member
end

-- wl_feed writes the feed entries of the offers made so far.
local function wl_feed()
    for _, f in ipairs(WL.feeds) do feed_entry(f) end
    WL.feeds = {}
end

local function feed(fields)
    if WL.any then wl_lib().flush(now_ms()) end
    if next(WL.taken) then
        for i = 1, #fields - 1, 2 do
            if fields[i] == "d" then
                local keep = {}
                for s in string.gmatch(fields[i + 1], "%S+") do
                    if not WL.taken[s] then keep[#keep + 1] = s end
                end
                fields[i + 1] = table.concat(keep, " ")
            end
        end
    end
    if GROUP and #fields == 4 and fields[1] == "h" and fields[3] == "x" then
        group_hold(fields[2], fields[4])
        wl_feed()
        return ""
    end
    local id = feed_entry(fields)
    wl_feed()
    return id
end

-- wl_run makes the offers owed now with their feed entries, for a call that decides more
-- after them (hold.lua, best.lua) or writes no entry of its own (wl.lua).
local function wl_run(now)
    if WL.any then wl_lib().flush(now) end
    wl_feed()
end

-- wl_precheck: before hold.lua decides, each category with a waitlist that it asks
-- seats or places of is brought up to now and offered (flush, in wl_lib): what expired goes to
-- the waitlist first.
local function wl_precheck(fixed, now)
    if not wl_on() then return end
    for i = 1, N do
        local s = seat(i, fixed)
        local a = place_of(s)
        if a then
            wl_dirty("a" .. a)
        else
            local m = meta_get(s, bucket_of(i))
            if m then
                -- A seat asked for whose key has gone is free now, whatever time its index
                -- entry says (give: the category is marked there too).
                if redis.call("EXISTS", hk(i)) == 0 then index_fix(m, now) end
                wl_dirty("s" .. m.sec)
            end
        end
    end
    wl_run(now)
end

-- begin starts a call of one of the library's functions: KEYS and ARGV are its keys and
-- arguments (fresh tables: a script may take items off them, idem_open), and the rest of
-- the state a call keeps at the top level starts anew, so that no call sees anything a
-- call before it left, of its show or another (not even a call that failed half-way).
-- begin_member starts a member of a group call (group.lua) the same way, but for GROUP,
-- which the members share: group_begin starts it.
local function begin_member(keys, args)
    KEYS, ARGV = keys, args
    N, BASE = 0, ""
    WL = wl_new()
end

local function begin(keys, args)
    GROUP = nil
    begin_member(keys, args)
end

local function group_begin()
    local now = now_ms() -- begin left GROUP nil: the clock's
    GROUP = {now = now, parsed = {}, rules = nil, held = {}, order = {}, ids = {}, member = 0, base = ""}
end
