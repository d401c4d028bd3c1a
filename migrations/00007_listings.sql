-- +goose Up
-- A holder's bookings, newest first (GET /v1/holders/me/bookings): one index entry per
-- booking, not per seat.
CREATE INDEX bookings_holder_idx ON bookings (holder_id, confirmed_at DESC, booking_id DESC);

-- Shows newest first (GET /v1/shows, the index page).
CREATE INDEX shows_created_idx ON shows (created_at DESC, show_id DESC);

-- +goose Down
DROP INDEX shows_created_idx;
DROP INDEX bookings_holder_idx;
