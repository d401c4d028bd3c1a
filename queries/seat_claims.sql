-- name: SeatClaimListByShow :many
SELECT seat_id, booking_id, generation FROM seat_claims WHERE show_id = @show_id ORDER BY seat_id;

-- name: SeatClaimListBySeats :many
SELECT seat_id, booking_id, generation FROM seat_claims
WHERE show_id = @show_id AND seat_id = ANY(@seat_ids::text[])
ORDER BY seat_id;

-- name: SeatClaimsDeleteByBooking :execrows
DELETE FROM seat_claims WHERE show_id = @show_id AND booking_id = @booking_id;

-- name: SeatClaimsFind :many
-- SeatClaimsFind returns which of the (show, seat) pairs are claimed: a probe of the
-- claims' key per pair (LATERAL … LIMIT 1), which PostgreSQL cannot turn into a join
-- with a scan of the whole table, as it did when it planned on an empty table.
SELECT c.show_id, c.seat_id
FROM (SELECT unnest(@show_ids::text[]) AS show_id, unnest(@seat_ids::text[]) AS seat_id) AS k
CROSS JOIN LATERAL (
    SELECT c.show_id, c.seat_id FROM seat_claims c
    WHERE c.show_id = k.show_id AND c.seat_id = k.seat_id
    LIMIT 1) AS c;
