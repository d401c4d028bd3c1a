-- A confirmation whose generation the fence refused asks whether its hold was consumed
-- already (a booking with the same request fingerprint) before it may re-issue the
-- generation; this index answers that without scanning the show's bookings.

-- +goose Up
CREATE INDEX bookings_fingerprint_idx ON bookings (show_id, fingerprint);

-- +goose Down
DROP INDEX bookings_fingerprint_idx;
