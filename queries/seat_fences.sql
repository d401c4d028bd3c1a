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
-- SeatFenceMaxByShow is the show's high-water mark: the largest generation ever accepted.
SELECT COALESCE(max(generation), 0)::bigint AS generation
FROM seat_fences WHERE show_id = @show_id;

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
