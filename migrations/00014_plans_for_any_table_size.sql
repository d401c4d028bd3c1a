-- Plans that stay right whatever the tables' sizes. Every connection of the engine plans
-- each statement once (generic plans, engine/backends.go) and keeps the plan until an
-- ANALYZE or a VACUUM of one of its tables. On a new database the booking tables are
-- empty when the first confirmations are planned: PostgreSQL then joined a batch's
-- rows to a scan of the whole table (a hash join) — in the claims read of the batch and
-- in the lookups of the statement triggers that check every batch's rows — and kept
-- scanning while the first sale grew the tables, until autovacuum analyzed them (0.5–1
-- ms of PostgreSQL CPU per sold seat instead of about 0.3).
--
-- The trigger functions below look rows up by key only: they run with sequential
-- scans, hash joins and merge joins disabled, so that each lookup is an index probe
-- whatever the table's size or statistics, empty or analyzed. (The engine's own batch
-- statements probe by key too: queries/seat_claims.sql, queries/shows.sql,
-- queries/marker_outbox.sql.) The cost is a configuration change and its undo per
-- call.

-- +goose Up
ALTER FUNCTION seat_claims_check_all() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION booking_seats_check_all() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bookings_claims_whole_all() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION holder_seats_count_all() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION holdfast_show_exists() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION booking_places_claim() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bookings_claims_whole() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION holder_seats_count() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bookings_keep_referenced() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION booking_seats_keep_claimed() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bookings_unclaim_places() SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

-- +goose Down
ALTER FUNCTION bookings_unclaim_places() RESET ALL;
ALTER FUNCTION booking_seats_keep_claimed() RESET ALL;
ALTER FUNCTION bookings_keep_referenced() RESET ALL;
ALTER FUNCTION holder_seats_count() RESET ALL;
ALTER FUNCTION bookings_claims_whole() RESET ALL;
ALTER FUNCTION booking_places_claim() RESET ALL;
ALTER FUNCTION holdfast_show_exists() RESET ALL;
ALTER FUNCTION holder_seats_count_all() RESET ALL;
ALTER FUNCTION bookings_claims_whole_all() RESET ALL;
ALTER FUNCTION booking_seats_check_all() RESET ALL;
ALTER FUNCTION seat_claims_check_all() RESET ALL;
