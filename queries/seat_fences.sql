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
