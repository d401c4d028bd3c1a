-- name: ShowInsert :execrows
-- ShowInsert creates a show; 0 rows when it exists already.
INSERT INTO shows (show_id) VALUES (@show_id)
ON CONFLICT (show_id) DO NOTHING;

-- name: ShowExists :one
SELECT EXISTS (SELECT 1 FROM shows WHERE show_id = @show_id);

-- name: ShowRulesGet :one
-- ShowRulesGet reads a show's sale rules and their version.
SELECT sh.holder_limit, sh.queue_opens_at, sh.queue_admit_per_second, sh.queue_admission_ttl_ms, sh.rules_version,
    (SELECT count(*) FROM seats s WHERE s.show_id = sh.show_id)::bigint AS seat_count
FROM shows sh WHERE sh.show_id = @show_id;

-- name: ShowRulesSet :one
-- ShowRulesSet replaces a show's sale rules and moves their version forward.
UPDATE shows SET holder_limit = @holder_limit, queue_opens_at = sqlc.narg(queue_opens_at),
    queue_admit_per_second = @queue_admit_per_second, queue_admission_ttl_ms = @queue_admission_ttl_ms,
    rules_version = rules_version + 1
WHERE show_id = @show_id
RETURNING rules_version;

-- name: HolderSeatsFind :many
-- HolderSeatsFind reads the booked-seat counts of (show, holder) pairs.
SELECT h.show_id, h.holder_id, h.seats, h.version
FROM holder_seats h
WHERE (h.show_id, h.holder_id) IN (
    SELECT unnest(@show_ids::text[]), unnest(@holder_ids::text[]));

-- name: HolderSeatsByShow :many
-- HolderSeatsByShow pages through a show's holders with booked seats.
SELECT holder_id, seats, version FROM holder_seats
WHERE show_id = @show_id AND holder_id > @after
ORDER BY holder_id
LIMIT @max_rows;
