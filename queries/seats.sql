-- name: SeatsInsert :exec
-- SeatsInsert adds a show's inventory and a zero fence for each seat.
WITH inserted AS (
    INSERT INTO seats (show_id, seat_id)
    SELECT @show_id, s FROM unnest(@seat_ids::text[]) AS s
    RETURNING show_id, seat_id
)
INSERT INTO seat_fences (show_id, seat_id)
SELECT show_id, seat_id FROM inserted;

-- name: SeatListByShow :many
SELECT seat_id FROM seats WHERE show_id = @show_id ORDER BY seat_id;
