-- name: ShowInsert :execrows
-- ShowInsert creates a show; 0 rows when it exists already.
INSERT INTO shows (show_id) VALUES (@show_id)
ON CONFLICT (show_id) DO NOTHING;

-- name: ShowEpochGet :one
-- ShowEpochGet reads a show's identity (migration 00009).
SELECT epoch FROM shows WHERE show_id = @show_id;

-- name: ShowExists :one
SELECT EXISTS (SELECT 1 FROM shows WHERE show_id = @show_id);

-- name: ShowRulesGet :one
-- ShowRulesGet reads a show's sale rules, their version and the show's identity.
SELECT sh.epoch, sh.holder_limit, sh.queue_opens_at, sh.queue_admit_per_second, sh.queue_admission_ttl_ms, sh.rules_version,
    (SELECT count(*) FROM seats s WHERE s.show_id = sh.show_id)::bigint AS seat_count
FROM shows sh WHERE sh.show_id = @show_id;

-- name: ShowRulesSet :one
-- ShowRulesSet replaces the sale rules of the show of that identity and moves their
-- version forward; no row when the show is gone or another show has its id now.
UPDATE shows SET holder_limit = @holder_limit, queue_opens_at = sqlc.narg(queue_opens_at),
    queue_admit_per_second = @queue_admit_per_second, queue_admission_ttl_ms = @queue_admission_ttl_ms,
    rules_version = rules_version + 1
WHERE show_id = @show_id AND epoch = @epoch
RETURNING rules_version;

-- name: ShowRulesVersionPass :one
-- ShowRulesVersionPass moves the version of the sale rules of the show of that identity
-- past above (Redis's copy's: a change a failover lost), the rules as they are; no row
-- when the show is gone or another show has its id now.
UPDATE shows SET rules_version = greatest(rules_version, @above::bigint) + 1
WHERE show_id = @show_id AND epoch = @epoch
RETURNING rules_version;

-- name: HolderSeatsFind :many
-- HolderSeatsFind reads the booked-seat counts of (show, holder) pairs, a probe of
-- the key per pair (as SeatClaimsFind).
SELECT h.show_id, h.holder_id, h.seats, h.version
FROM (SELECT unnest(@show_ids::text[]) AS show_id, unnest(@holder_ids::text[]) AS holder_id) AS k
CROSS JOIN LATERAL (
    SELECT h.show_id, h.holder_id, h.seats, h.version FROM holder_seats h
    WHERE h.show_id = k.show_id AND h.holder_id = k.holder_id
    LIMIT 1) AS h;

-- name: HolderSeatsByShow :many
-- HolderSeatsByShow pages through a show's holders with booked seats.
SELECT holder_id, seats, version FROM holder_seats
WHERE show_id = @show_id AND holder_id > @after
ORDER BY holder_id
LIMIT @max_rows;

-- name: ShowList :many
-- ShowList reads shows newest first, after the show named by @after (none: from the
-- newest), with their seat and sold-seat counts, and their areas' places and places sold.
SELECT sh.show_id, sh.created_at,
    (SELECT count(*) FROM seats s WHERE s.show_id = sh.show_id)::bigint AS seats,
    (SELECT count(*) FROM seat_claims c WHERE c.show_id = sh.show_id)::bigint AS sold,
    (SELECT COALESCE(sum(a.capacity), 0) FROM areas a WHERE a.show_id = sh.show_id)::bigint AS places,
    (SELECT COALESCE(sum(a.sold), 0) FROM areas a WHERE a.show_id = sh.show_id)::bigint AS places_sold
FROM shows sh
WHERE sqlc.narg(after)::text IS NULL
   OR (sh.created_at, sh.show_id) < (SELECT a.created_at, a.show_id FROM shows a WHERE a.show_id = sqlc.narg(after))
ORDER BY sh.created_at DESC, sh.show_id DESC
LIMIT @max_rows;

-- name: ShowLockForDelete :one
-- ShowLockForDelete locks the row of the show of that identity and says whether it
-- ever had a booking, and whether it has events (a hold's move, a refusal), which
-- shows_delete_unused refuses to delete it with.
SELECT EXISTS (SELECT 1 FROM bookings b WHERE b.show_id = sh.show_id) AS has_bookings,
       EXISTS (SELECT 1 FROM booking_events e WHERE e.show_id = sh.show_id) AS has_events
FROM shows sh WHERE sh.show_id = @show_id AND sh.epoch = @epoch
FOR UPDATE;

-- name: ShowDelete :execrows
-- ShowDelete removes a show and, by cascade, its seats, fences and holder counts.
DELETE FROM shows WHERE show_id = @show_id;
