-- name: SeatsInsert :exec
-- SeatsInsert adds a show's inventory with a derived layout (one unnamed section and
-- row, positions and ranks in the given order) and a zero fence for each seat.
WITH inserted AS (
    INSERT INTO seats (show_id, seat_id, position, rank)
    SELECT @show_id, s, n, n FROM unnest(@seat_ids::text[]) WITH ORDINALITY AS t(s, n)
    RETURNING show_id, seat_id
)
INSERT INTO seat_fences (show_id, seat_id)
SELECT show_id, seat_id FROM inserted;

-- name: SeatsInsertLayout :exec
-- SeatsInsertLayout adds a show's inventory with its layout, one array element per
-- seat, and a zero fence for each seat.
WITH inserted AS (
    INSERT INTO seats (show_id, seat_id, section, row_label, position, rank, x, y, category)
    SELECT @show_id, unnest(@seat_ids::text[]), unnest(@sections::text[]), unnest(@row_labels::text[]),
           unnest(@positions::int[]), unnest(@ranks::int[]), unnest(@xs::float8[]), unnest(@ys::float8[]),
           unnest(@categories::text[])
    RETURNING show_id, seat_id
)
INSERT INTO seat_fences (show_id, seat_id)
SELECT show_id, seat_id FROM inserted;

-- name: SeatLayoutListByShow :many
-- SeatLayoutListByShow is a show's seats with their layout, in seat id order, each
-- with the show's identity (one statement: the seats are that show's).
SELECT sh.epoch, s.seat_id, s.section, s.row_label, s.position, s.rank, s.x, s.y, s.category
FROM seats s JOIN shows sh ON sh.show_id = s.show_id
WHERE s.show_id = @show_id ORDER BY s.seat_id;
