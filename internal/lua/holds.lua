-- holds.lua: several holds of one show in one call, each hold.lua's own: its keys, its
-- arguments and its reply, decided in order as if each were called after the one before
-- it. The group shares what its holds would each do alike (common.lua: GROUP): one
-- reading of the clock, one parse of the sale rules given and one read of the show's,
-- and one feed entry for the holds of one expiry (each hold's reply carries that
-- entry's id).
--
-- KEYS       each hold's keys (hold.lua's), one hold's after another's
-- ARGV[1]    the number of holds, 1..MAX_GROUP
-- ARGV[2..]  for each hold: its number of keys, its number of arguments, then its
--            arguments (hold.lua's)
--
-- Every hold must be of the show of the first one's counter key (KEYS[1]). Returns one
-- reply per hold, in order: hold.lua's, or an error reply for a hold that raised an
-- error (the holds before it and after it stand).

local MAX_GROUP = 64
if not is_uint(ARGV[1], 1, MAX_GROUP) then return bad("hold count") end
local members, ki, ai = {}, 1, 2
for h = 1, tonumber(ARGV[1]) do
    local nk, na = ARGV[ai], ARGV[ai + 1]
    if not (nk and na and is_uint(nk, 1, #KEYS) and is_uint(na, 1, #ARGV)) then return bad("hold " .. h .. " counts") end
    nk, na = tonumber(nk), tonumber(na)
    ai = ai + 2
    if ki + nk - 1 > #KEYS or ai + na - 1 > #ARGV then return bad("hold " .. h .. " counts") end
    if KEYS[ki] ~= KEYS[1] then return bad("hold " .. h .. " is of another show") end
    members[h] = {{unpack(KEYS, ki, ki + nk - 1)}, {unpack(ARGV, ai, ai + na - 1)}}
    ki, ai = ki + nk, ai + na
end
if ki ~= #KEYS + 1 or ai ~= #ARGV + 1 then return bad("argument count") end

group_begin()
local out = {}
for h, m in ipairs(members) do
    GROUP.member = h
    begin_member(m[1], m[2])
    local ok, reply = pcall(BODY.hold)
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
