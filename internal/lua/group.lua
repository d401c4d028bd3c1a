-- group.lua: several calls of one script on one show in one call, each that script's
-- own: its keys, its arguments and its reply, decided in order as if each were called
-- after the one before it. The script a group may run is hold.lua. The
-- group shares what its members would each do alike (common.lua: GROUP): one reading of
-- the clock, one parse of each sale-rules string given and one read of the show's, one
-- check that Redis knows the show and, while it has none, that it has no waitlist
-- entries, and one feed entry for the holds of one expiry (each hold's reply carries
-- that entry's id).
--
-- KEYS       each member's keys (its script's), one member's after another's
-- ARGV[1]    the script: "hold"
-- ARGV[2]    the number of members, 1..MAX_GROUP
-- ARGV[3..]  for each member: its number of keys, its number of arguments, then its
--            arguments (its script's)
--
-- Every member must be of the show of the first one's counter key (KEYS[1]). Returns
-- one reply per member, in order: its script's, or an error reply for a member that
-- raised an error (the members before it and after it stand).

local MAX_GROUP = 64
-- Only holds: wl_on keeps "no waitlist entries" for the group's later members because
-- a hold adds none (a waitlist join would).
local run = ({hold = BODY.hold})[ARGV[1]]
if not run then return bad("script") end
if not is_uint(ARGV[2] or "", 1, MAX_GROUP) then return bad("member count") end
local members, ki, ai = {}, 1, 3
for h = 1, tonumber(ARGV[2]) do
    local nk, na = ARGV[ai], ARGV[ai + 1]
    if not (nk and na and is_uint(nk, 1, #KEYS) and is_uint(na, 1, #ARGV)) then return bad("member " .. h .. " counts") end
    nk, na = tonumber(nk), tonumber(na)
    ai = ai + 2
    if ki + nk - 1 > #KEYS or ai + na - 1 > #ARGV then return bad("member " .. h .. " counts") end
    if KEYS[ki] ~= KEYS[1] then return bad("member " .. h .. " is of another show") end
    members[h] = {{unpack(KEYS, ki, ki + nk - 1)}, {unpack(ARGV, ai, ai + na - 1)}}
    ki, ai = ki + nk, ai + na
end
if ki ~= #KEYS + 1 or ai ~= #ARGV + 1 then return bad("argument count") end

group_begin()
local out = {}
for h, m in ipairs(members) do
    GROUP.member = h
    begin_member(m[1], m[2])
    local ok, reply = pcall(run)
    if not ok then
        reply = redis.error_reply(type(reply) == "table" and reply.err or tostring(reply))
    end
    out[h] = reply
end
group_flush()
for h, id in pairs(GROUP.ids) do
    if out[h][1] == "OK" then out[h][5] = id end
end
GROUP = nil
return out
