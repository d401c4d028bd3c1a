-- common.lua: the argument checks and the ownership test that every holdfast script
-- shares. lua.go puts it after each script's shebang line and before its body.
--
-- Every script has the same key layout, for n seats:
--   KEYS[1]            <base>gen             the show's generation counter
--   KEYS[2]            <base>holder:<tag>    zset seat -> expiry ms of one holder (tag = ARGV[1])
--   KEYS[3..2+n]       <base>hold:<seat>     one per seat, in the order of the seat arguments
--   KEYS[3+n..2+2n]    <base>sold:<bucket>   the sold-marker hash (seat -> booking id) of each
--                                            seat's bucket: a show's seats are split, in sorted
--                                            order, into buckets of 100 so that Redis keeps each
--                                            hash as a compact listpack
-- and ARGV[1] is always the holder tag ("" or 32 lowercase hex digits), then the
-- script's own fixed arguments, then the seat ids (and, for resync, one booking id each).
-- resync may pass more sold-bucket keys after these: every bucket of the show.

local function bad(what) return redis.error_reply("HOLDFAST_BADARG " .. what) end

local function now_ms()
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_hex(s, len) return type(s) == "string" and #s == len and string.match(s, "^[0-9a-f]+$") ~= nil end

local function is_uint(s, min, max)
    local v = tonumber(s)
    return v ~= nil and string.match(s, "^%d+$") ~= nil and v >= min and v <= max
end

-- N is the number of seats of the call, set by layout.
local N = 0

-- hk and sk are the hold key and the sold-bucket key of seat i.
local function hk(i) return KEYS[2 + i] end
local function sk(i) return KEYS[2 + N + i] end

-- layout checks the keys and the seat arguments. fixed counts ARGV[1..fixed]; each seat
-- is followed by per_seat - 1 more arguments at the end; min_seats is 0 or 1; with
-- extra_buckets, more sold-bucket keys may follow the per-seat ones.
-- It returns the number of seats, or nil and an error reply.
local function layout(fixed, per_seat, min_seats, extra_buckets)
    local rest = #ARGV - fixed
    if rest < 0 or rest % per_seat ~= 0 then return nil, bad("argument count") end
    local n = rest / per_seat
    local tag = ARGV[1]
    if n < min_seats or #KEYS < 2 + 2 * n or (not extra_buckets and #KEYS ~= 2 + 2 * n) then
        return nil, bad("key count")
    end
    if tag ~= "" and not is_hex(tag, 32) then return nil, bad("holder tag") end
    if string.sub(KEYS[1], -4) ~= ":gen" then return nil, bad("keys") end
    local base = string.sub(KEYS[1], 1, -4)
    if KEYS[2] ~= base .. "holder:" .. tag then return nil, bad("keys") end
    N = n
    local seen = {}
    for i = 1, n do
        local seat = ARGV[fixed + i]
        if #seat < 1 or #seat > 64 or not string.match(seat, "^[%w][%w._-]*$") or seen[seat] then
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
    local n, err = layout(fixed, 1, 1, false)
    if not n then return nil, err end
    if not is_hex(ARGV[2], 32) then return nil, bad("token") end
    if not is_uint(ARGV[3], 1, 9007199254740991) then return nil, bad("generation") end
    return n
end

-- owned returns the creation time (ms) of the hold when every seat key holds exactly
-- token:gen:<created>:tag with one creation time, or nil when any seat is not this hold.
-- The token is compared here, inside Redis, and nowhere else.
local function owned(n, token, gen, tag)
    local created
    for i = 1, n do
        local v = redis.call("GET", hk(i))
        if not v then return nil end
        local t, g, c, h = string.match(v, "^([0-9a-f]+):(%d+):(%d+):(.*)$")
        if t ~= token or g ~= gen or h ~= tag or (created and c ~= created) then return nil end
        created = c
    end
    return tonumber(created)
end

local function seat(i, fixed) return ARGV[fixed + i] end
