-- transfer.lua: move a hold to another holder under a new token and a new generation,
-- only for its owner, all or nothing. The hold keeps its seats, places, creation time
-- and expiry; its old token stops working at once (owned finds another token), and its
-- new generation, from the show's counter, is larger than any the database has fenced,
-- so a confirmation made with the old hold is refused by the fence too. The new holder
-- is counted as a hold of the seats would count them: the waiting room must admit them
-- now, and the holder cap and the sale's holder limit must have room. The move is logged
-- in the show's hold moves (common.lua: move_log) for the event feed.
--
-- KEYS       the common layout (common.lua), for every seat and place key of the hold;
--            KEYS[2] is the holder's now (the hold's), and the new holder's zset is
--            <base>holder:<new tag>, under the same hash tag
-- ARGV[1]    holder tag (the hold's)
-- ARGV[2]    token
-- ARGV[3]    generation
-- ARGV[4]    the new holder's tag (32 lowercase hex digits, not ARGV[1])
-- ARGV[5]    the new token: 32 lowercase hex digits
-- ARGV[6]    the hold id of the new token's place keys (16 hex digits, see common.lua)
-- ARGV[7]    holder cap: seats a holder may hold at once in this show, 0 = no cap
-- ARGV[8]    the show's sale rules as the engine has them (see sale_rules in common.lua)
-- ARGV[9]    the holder's id (the hold's; "" for none), for the moves' log
-- ARGV[10]   the new holder's id, for the moves' log
-- ARGV[11..] seat ids, then place keys (the hold as it is)
--
-- A place key is renamed to the new hold id's (place_rename); a seat keeps its key.
--
-- With an idempotency key (common.lua: idem_open), a retry of the request answers
-- {"REPLAY", the new token, the first call's "OK" reply with "" for its feed entry id}, and
-- another request under the key {"KEYREUSED"}, without running again.
--
-- Returns {"OK", generation, expires_ms, feed entry id ("" without places), the hold's
-- offer (moved to the new token, "" for none)}, {"LOST"}
-- (not this hold: nothing changed), {"BUSY"} or {"LAPSED", commit id} (a batch is
-- committing the hold, or its reservation lapsed: nothing changed, see release.lua),
-- {"LIMIT", held} (the new holder's cap), {"LIMIT", held and booked, limit} (the sale's
-- holder limit), {"NOTADMITTED"}, {"NOSTATE"}, {"STALE"} or {"CLOSED"} (as hold.lua).

local F = 10
local I, ierr = idem_open()
if not I then return ierr end
local n, err = hold_layout(F)
if not n then return err end
local replay = idem_replay(I)
if replay then return replay end
local tag, token, gen, to_tag, new_token, new_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if not is_hex(to_tag, 32) or to_tag == tag then return bad("new holder tag") end
if not is_hex(new_token, 32) or new_token == token then return bad("new token") end
if not is_hex(new_id, 16) then return bad("new hold id") end
if not is_uint(ARGV[7], 0, 1000000) then return bad("holder cap") end
local cap = tonumber(ARGV[7])
local given = rules_parse(ARGV[8])
if not given then return bad("rules") end

if not show_known() then return {"NOSTATE"} end
local created, _, commit, lapsed = owned(n, token, gen, tag)
if not created then return {"LOST"} end
if commit ~= "" then return {"BUSY"} end
if lapsed ~= "" then return {"LAPSED", lapsed} end
local rules, closed = sale_rules(given, ARGV[8])
if not rules then return closed end

local now = now_ms()
local refused = sale_admitted(rules, to_tag, now)
if refused then return refused end
local to_key = BASE .. "holder:" .. to_tag
redis.call("ZREMRANGEBYSCORE", to_key, "-inf", now)
local held, want = held_units(to_key), 0
for i = 1, n do want = want + units(seat(i, F)) end
if cap > 0 and held + want > cap then return {"LIMIT", held} end
refused = sale_limit(rules, to_tag, held, want)
if refused then return refused end

local exp = redis.call("PEXPIRETIME", hk(1))
local g = redis.call("INCR", KEYS[1])
local value = new_token .. ":" .. int(g) .. ":" .. int(created) .. ":" .. to_tag
local gone, moved, now_all = {}, {}, {}
for i = 1, n do
    local s, now_s = seat(i, F), seat(i, F)
    if is_place(s) then
        now_s = place_key(s, units(s), new_id)
        place_rename(i, s, now_s, exp, KEYS[2], to_key)
        gone[#gone + 1], moved[#moved + 1] = s, now_s
    elseif tag ~= "" then
        redis.call("ZREM", KEYS[2], s)
    end
    redis.call("ZADD", to_key, exp, now_s)
    redis.call("SET", BASE .. "hold:" .. now_s, value, "KEEPTTL")
    now_all[i] = now_s
end
if redis.call("PTTL", to_key) < exp - now then redis.call("PEXPIREAT", to_key, exp) end
local id = ""
if #moved > 0 then id = feed({"d", table.concat(gone, " "), "h", table.concat(moved, " "), "x", int(exp)}) end
move_log("hold_transferred", new_token, g, exp, now_all, ARGV[10], ARGV[9])
wl_done(token) -- a waitlist's offer transferred: it is the other holder's hold now
return idem_keep(I, new_token, {"OK", g, exp, id, offer_move(token, new_token)}, 4)
