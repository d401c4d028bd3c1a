-- close.lua: DeleteShow's closing of a show in Redis (engine/listings.go). From the
-- closing on, the show's rules key (<base>rules, see sale_rules in common.lua) says
-- "<epoch> closed", and every hold and waiting-room script given that show's rules
-- refuses (CLOSED): no hold is granted after DeleteShow's check for live holds.
--
-- KEYS[1]  <base>gen (the show's key prefix)
-- ARGV[1]  op: "close" (for ARGV[3] ms, while DeleteShow checks and deletes), "seal"
--          (for good: the show is deleted) or "open" (the delete was refused: the key
--          gets back ARGV[3], the value "close" returned, "" for none)
-- ARGV[2]  the show's epoch
--
-- Returns {"OK", the key's value before ("" for none)}, {"STALE"} (Redis knows a later
-- show of the id: nothing changed), or {"CLOSED"} (close: the show is closed already,
-- by another DeleteShow).

if #KEYS ~= 1 or string.sub(KEYS[1], -4) ~= ":gen" then return bad("keys") end
BASE = string.sub(KEYS[1], 1, -4)
local op = ARGV[1]
if not is_uint(ARGV[2], 1, 9007199254740991) then return bad("epoch") end
local epoch = tonumber(ARGV[2])
local key = BASE .. "rules"
local cur = redis.call("GET", key)
local e, closed = rules_epoch(cur)
if e > epoch then return {"STALE"} end
local mark = ARGV[2] .. " closed"
if op == "close" then
    if not is_uint(ARGV[3], 1, 86400000) then return bad("ttl") end
    if closed and e == epoch then return {"CLOSED"} end
    redis.call("SET", key, mark, "PX", ARGV[3])
elseif op == "seal" then
    redis.call("SET", key, mark)
elseif op == "open" then
    if ARGV[3] ~= "" and not rules_parse(ARGV[3]) then return bad("rules") end
    if cur == mark then
        if ARGV[3] == "" then redis.call("DEL", key) else redis.call("SET", key, ARGV[3]) end
    end
else
    return bad("op")
end
return {"OK", cur or ""}
