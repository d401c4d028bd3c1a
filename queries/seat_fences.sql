-- name: SeatFencesAdvance :many
-- SeatFencesAdvance is the fence: it raises each named seat's fence to @generation only
-- where the stored fence is strictly smaller, and returns the seats it raised. A seat
-- missing from the result refused the generation (it has seen it or a larger one).
UPDATE seat_fences
SET generation = @generation::bigint, updated_at = now()
WHERE show_id = @show_id
  AND seat_id = ANY(@seat_ids::text[])
  AND generation < @generation::bigint
RETURNING seat_id;

-- name: SeatFenceMaxByShow :one
-- SeatFenceMaxByShow is the show's high-water mark: the largest generation ever accepted,
-- for a seat or for an area's places.
SELECT greatest(COALESCE((SELECT max(f.generation) FROM seat_fences f WHERE f.show_id = @show_id), 0),
                COALESCE((SELECT max(a.generation) FROM areas a WHERE a.show_id = @show_id), 0))::bigint AS generation;

-- name: SeatFenceGet :one
SELECT generation FROM seat_fences WHERE show_id = @show_id AND seat_id = @seat_id;

-- name: SeatMarkListByShow :many
-- SeatMarkListByShow is what Redis's sold markers must say, for one page of a show's
-- seats after @after (in seat order): every seat a confirmation ever reached, with its
-- fence and whether it is claimed now (sold by the booking of that generation) or not
-- (that booking was cancelled). Seats never booked have no marker.
SELECT f.seat_id, f.generation, (c.seat_id IS NOT NULL)::bool AS claimed
FROM seat_fences f
LEFT JOIN seat_claims c ON c.show_id = f.show_id AND c.seat_id = f.seat_id
WHERE f.show_id = @show_id AND f.seat_id > @after::text AND f.generation > 0
ORDER BY f.seat_id
LIMIT @max_rows::int;

-- name: SeatFencesAdvanceMany :execrows
-- SeatFencesAdvanceMany is SeatFencesAdvance for a batch of confirmations: each (show,
-- seat) pair's fence goes to its generation where it is strictly smaller. It returns how
-- many it raised; fewer than the pairs means one refused.
UPDATE seat_fences f
SET generation = k.generation, updated_at = now()
FROM (SELECT unnest(@show_ids::text[]) AS show_id, unnest(@seat_ids::text[]) AS seat_id,
             unnest(@generations::bigint[]) AS generation) AS k
WHERE f.show_id = k.show_id AND f.seat_id = k.seat_id AND f.generation < k.generation;

-- name: SeatFencesLockSkip :many
-- SeatFencesLockSkip locks the fences of a batch of confirmations' seats, given as (show,
-- seat) pairs, in one global order — show, then seat — skipping those another
-- transaction has locked, and returns those it locked. A batch never waits for a lock:
-- the confirmations touching a skipped fence leave it for a later batch. Read the
-- claims of the same seats after it, in a statement of its own. Each fence is a probe
-- of its key, locked in the pairs' order (LATERAL): PostgreSQL cannot plan it as a
-- scan of the whole table, as it did a join when it planned on a small table.
SELECT f.show_id, f.seat_id, f.generation
FROM (SELECT unnest(@show_ids::text[]) AS show_id, unnest(@seat_ids::text[]) AS seat_id ORDER BY 1, 2) AS k
CROSS JOIN LATERAL (
    SELECT f.show_id, f.seat_id, f.generation FROM seat_fences f
    WHERE f.show_id = k.show_id AND f.seat_id = k.seat_id
    FOR UPDATE SKIP LOCKED) AS f;
