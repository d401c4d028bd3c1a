-- name: SeatClaimListByShow :many
SELECT seat_id, booking_id, generation FROM seat_claims WHERE show_id = @show_id ORDER BY seat_id;

-- name: SeatClaimListBySeats :many
SELECT seat_id, booking_id, generation FROM seat_claims
WHERE show_id = @show_id AND seat_id = ANY(@seat_ids::text[])
ORDER BY seat_id;

-- name: SeatClaimsDeleteByBooking :execrows
DELETE FROM seat_claims WHERE show_id = @show_id AND booking_id = @booking_id;

-- name: SeatClaimsDeleteBySeats :execrows
-- SeatClaimsDeleteBySeats drops the claims of some of a booking's seats (a partial
-- cancellation), then their booking_seats rows go (BookingSeatsDelete).
DELETE FROM seat_claims WHERE show_id = @show_id AND booking_id = @booking_id AND seat_id = ANY(@seat_ids::text[]);

-- name: BookingSeatsDelete :execrows
-- BookingSeatsDelete takes unclaimed seats out of a booking (a partial cancellation).
DELETE FROM booking_seats WHERE show_id = @show_id AND booking_id = @booking_id AND seat_id = ANY(@seat_ids::text[]);

-- name: BookingPlacesLower :execrows
-- BookingPlacesLower lowers a booking's claimed places of an area to @places (a partial
-- cancellation; migration 00012): the area's sold and the holder's count follow.
UPDATE booking_places SET places = @places::int
WHERE show_id = @show_id AND booking_id = @booking_id AND area_id = @area_id AND claimed AND places > @places::int;

-- name: BookingPlacesUnclaim :execrows
-- BookingPlacesUnclaim cancels all of a booking's places of an area (a partial
-- cancellation): they are sellable again.
UPDATE booking_places SET claimed = false
WHERE show_id = @show_id AND booking_id = @booking_id AND area_id = @area_id AND claimed;

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
