-- Set-based writes. A batch of confirmations writes each table in one statement
-- (BookingCreateMany); the per-row checks that came with every booking and every seat
-- are now checked once per statement, over the statement's rows (transition tables),
-- and the foreign keys that locked a shared row for every booking are gone. Every rule
-- of migration 00003 and 00006 still holds, under the same constraint names:
--
--   * seat_claims_at_fence: a claim carries its seat's fence (a statement trigger after
--     the insert, was a row trigger before it);
--   * bookings_claims_whole: a confirmed booking claims every one of its seats, now
--     checked at the end of the statement that inserts it (the engine writes a
--     booking, its seats and its claims in one statement); cancelling and deleting
--     claims keep the check at COMMIT;
--   * holder_seats_within_limit: one upsert per statement, per (show, holder);
--   * bookings_show_fkey, booking_events_show_fkey, marker_outbox_show_fkey: a row
--     names a show that exists. These foreign keys locked the show's row (FOR KEY
--     SHARE) for every booking, event and outbox row, so that every transaction of an
--     on-sale shared one row lock (a MultiXact, its WAL and its SLRU); a statement
--     trigger checks the shows once per statement without a lock, and deleting a show
--     that still has any of those rows is refused under the same names. A show is
--     deleted only through its seats' fences, which every confirmation locks: a
--     booking cannot slip in while its show goes.
--   * seat_claims_booking_fkey, seat_claims_booking_seat_fkey, booking_seats_booking_fkey:
--     a claim names a confirmed booking of its generation and a seat of that booking, and
--     a booking's seat names its booking. As foreign keys they locked, per seat, the rows
--     the same statement had just inserted (a WAL record each) and needed an index of
--     their own on bookings (bookings_claim_key); now a statement trigger checks the
--     inserted rows with one join each, and row triggers refuse, under the same names,
--     the updates and deletes the keys refused (none of which the engine makes).
--   * bookings_idempotency_key_unique is a partial unique index of the bookings that
--     have a key (the constraint indexed every booking, keyed or not).
--   * booking_seats_seat_fkey is gone: a booking's seats are its claims' seats when it
--     is created (bookings_claims_whole), and a claim's seat has a fence
--     (seat_claims_fence_fkey), whose seat exists (seat_fences_seat_fkey).

-- +goose Up


-- +goose StatementBegin
CREATE FUNCTION bookings_claims_whole_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT b.show_id, b.booking_id INTO bad
    FROM new_bookings b
    WHERE b.status = 'confirmed'
      AND (NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id)
           OR EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id
                        AND NOT EXISTS (SELECT 1 FROM seat_claims c
                                        WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id)))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of its seats', bad.booking_id, bad.show_id
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER bookings_claims_whole ON bookings;
CREATE TRIGGER bookings_claims_whole
    AFTER INSERT ON bookings
    REFERENCING NEW TABLE AS new_bookings
    FOR EACH STATEMENT EXECUTE FUNCTION bookings_claims_whole_all();
-- A status changed back to confirmed, or claims deleted: checked at COMMIT, per row
-- (cancellations and repairs, not the on-sale).
CREATE CONSTRAINT TRIGGER bookings_claims_whole_status
    AFTER UPDATE OF status ON bookings
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION bookings_claims_whole();

-- +goose StatementBegin
CREATE FUNCTION holder_seats_count_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    WITH added AS (
        SELECT b.show_id, b.holder_id, count(*)::integer AS n
        FROM new_bookings b
        JOIN booking_seats s ON s.show_id = b.show_id AND s.booking_id = b.booking_id
        WHERE b.holder_id <> '' AND b.status = 'confirmed'
        GROUP BY b.show_id, b.holder_id
    ), counted AS (
        INSERT INTO holder_seats AS h (show_id, holder_id, seats)
        SELECT show_id, holder_id, n FROM added
        ORDER BY show_id, holder_id
        ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
        RETURNING h.show_id, h.holder_id, h.seats
    )
    SELECT c.show_id, c.holder_id, c.seats, sh.holder_limit INTO bad
    FROM counted c JOIN shows sh ON sh.show_id = c.show_id
    WHERE sh.holder_limit > 0 AND c.seats > sh.holder_limit
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'holder % would have % seats of show %, past its limit of %', bad.holder_id, bad.seats, bad.show_id, bad.holder_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER holder_seats_count ON bookings;
CREATE TRIGGER holder_seats_count
    AFTER INSERT ON bookings
    REFERENCING NEW TABLE AS new_bookings
    FOR EACH STATEMENT EXECUTE FUNCTION holder_seats_count_all();
-- A cancellation gives its seats back, per row (holder_seats_count's UPDATE branch).
CREATE TRIGGER holder_seats_count_status
    AFTER UPDATE OF status ON bookings
    FOR EACH ROW EXECUTE FUNCTION holder_seats_count();

-- The shows a statement's rows name exist; TG_ARGV[0] is the rule's name.
-- +goose StatementBegin
CREATE FUNCTION holdfast_show_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    SELECT n.show_id INTO missing
    FROM (SELECT DISTINCT show_id FROM new_rows) n
    WHERE NOT EXISTS (SELECT 1 FROM shows s WHERE s.show_id = n.show_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: show % does not exist', TG_TABLE_NAME, missing
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_ARGV[0];
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
ALTER TABLE bookings DROP CONSTRAINT bookings_show_fkey;
ALTER TABLE booking_events DROP CONSTRAINT booking_events_show_fkey;
ALTER TABLE marker_outbox DROP CONSTRAINT marker_outbox_show_fkey;
ALTER TABLE booking_seats DROP CONSTRAINT booking_seats_seat_fkey;
CREATE TRIGGER bookings_show_exists
    AFTER INSERT ON bookings REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast_show_exists('bookings_show_fkey');
CREATE TRIGGER booking_events_show_exists
    AFTER INSERT ON booking_events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast_show_exists('booking_events_show_fkey');
CREATE TRIGGER marker_outbox_show_exists
    AFTER INSERT ON marker_outbox REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast_show_exists('marker_outbox_show_fkey');

-- A show with bookings, events or owed markers is not deleted (what the foreign keys
-- refused).
-- +goose StatementBegin
CREATE FUNCTION shows_delete_unused() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM bookings WHERE show_id = OLD.show_id) THEN
        RAISE EXCEPTION 'show % has bookings', OLD.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'bookings_show_fkey';
    END IF;
    IF EXISTS (SELECT 1 FROM booking_events WHERE show_id = OLD.show_id) THEN
        RAISE EXCEPTION 'show % has events', OLD.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_events_show_fkey';
    END IF;
    IF EXISTS (SELECT 1 FROM marker_outbox WHERE show_id = OLD.show_id) THEN
        RAISE EXCEPTION 'show % has marker writes owed to Redis', OLD.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'marker_outbox_show_fkey';
    END IF;
    RETURN OLD;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER shows_delete_unused
    BEFORE DELETE ON shows
    FOR EACH ROW EXECUTE FUNCTION shows_delete_unused();

-- Claims and booking seats name their bookings (what three foreign keys did).
-- +goose StatementBegin
CREATE FUNCTION seat_claims_check_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.show_id, n.seat_id, n.generation, f.generation AS fence INTO bad
    FROM new_claims n
    LEFT JOIN seat_fences f ON f.show_id = n.show_id AND f.seat_id = n.seat_id
    WHERE f.generation IS DISTINCT FROM n.generation
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% with generation % but the seat''s fence is %',
            bad.show_id, bad.seat_id, bad.generation, bad.fence
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'seat_claims_at_fence';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = n.show_id AND s.booking_id = n.booking_id AND s.seat_id = n.seat_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names booking %, which does not have that seat', bad.show_id, bad.seat_id, bad.booking_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_seat_fkey';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id, n.generation INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM bookings b
                      WHERE b.show_id = n.show_id AND b.booking_id = n.booking_id
                        AND b.generation = n.generation AND b.status = n.booking_status)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names no confirmed booking % of generation %', bad.show_id, bad.seat_id, bad.booking_id, bad.generation
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_fkey';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION booking_seats_check_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.show_id, n.booking_id INTO bad
    FROM new_seats n
    WHERE NOT EXISTS (SELECT 1 FROM bookings b WHERE b.show_id = n.show_id AND b.booking_id = n.booking_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'booking_seats: booking % of show % does not exist', bad.booking_id, bad.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_seats_booking_fkey';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- A booking whose claims or seats name it keeps the key they name; a booking deleted
-- takes its seats with it (the old ON DELETE CASCADE), not its claims.
-- +goose StatementBegin
CREATE FUNCTION bookings_keep_referenced() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.show_id, NEW.booking_id, NEW.generation, NEW.status)
            IS NOT DISTINCT FROM (OLD.show_id, OLD.booking_id, OLD.generation, OLD.status) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM seat_claims c WHERE c.show_id = OLD.show_id AND c.booking_id = OLD.booking_id) THEN
        RAISE EXCEPTION 'bookings: booking % of show % still has claims', OLD.booking_id, OLD.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_fkey';
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM booking_seats WHERE show_id = OLD.show_id AND booking_id = OLD.booking_id;
        RETURN NULL;
    END IF;
    IF (NEW.show_id, NEW.booking_id) IS DISTINCT FROM (OLD.show_id, OLD.booking_id)
            AND EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = OLD.show_id AND s.booking_id = OLD.booking_id) THEN
        RAISE EXCEPTION 'bookings: booking % of show % has seats', OLD.booking_id, OLD.show_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_seats_booking_fkey';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- A booking's seat is not rewritten, nor deleted while claimed.
-- +goose StatementBegin
CREATE FUNCTION booking_seats_keep_claimed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'booking_seats are never updated'
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'booking_seats_immutable';
    END IF;
    IF EXISTS (SELECT 1 FROM seat_claims c
               WHERE c.show_id = OLD.show_id AND c.seat_id = OLD.seat_id AND c.booking_id = OLD.booking_id) THEN
        RAISE EXCEPTION 'booking_seats: seat % of booking % is claimed', OLD.seat_id, OLD.booking_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_seat_fkey';
    END IF;
    RETURN OLD;
END;
$$;
-- +goose StatementEnd

ALTER TABLE seat_claims DROP CONSTRAINT seat_claims_booking_fkey;
ALTER TABLE seat_claims DROP CONSTRAINT seat_claims_booking_seat_fkey;
ALTER TABLE booking_seats DROP CONSTRAINT booking_seats_booking_fkey;
ALTER TABLE bookings DROP CONSTRAINT bookings_claim_key;
ALTER TABLE bookings DROP CONSTRAINT bookings_idempotency_key_unique;
CREATE UNIQUE INDEX bookings_idempotency_key_unique ON bookings (show_id, holder_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP TRIGGER seat_claims_at_fence ON seat_claims;
CREATE TRIGGER seat_claims_at_fence
    AFTER INSERT ON seat_claims
    REFERENCING NEW TABLE AS new_claims
    FOR EACH STATEMENT EXECUTE FUNCTION seat_claims_check_all();
CREATE TRIGGER booking_seats_booking_exists
    AFTER INSERT ON booking_seats
    REFERENCING NEW TABLE AS new_seats
    FOR EACH STATEMENT EXECUTE FUNCTION booking_seats_check_all();
CREATE TRIGGER bookings_keep_referenced
    AFTER UPDATE OR DELETE ON bookings
    FOR EACH ROW EXECUTE FUNCTION bookings_keep_referenced();
CREATE TRIGGER booking_seats_keep_claimed
    BEFORE UPDATE OR DELETE ON booking_seats
    FOR EACH ROW EXECUTE FUNCTION booking_seats_keep_claimed();

-- +goose Down
DROP TRIGGER booking_seats_keep_claimed ON booking_seats;
DROP TRIGGER bookings_keep_referenced ON bookings;
DROP TRIGGER booking_seats_booking_exists ON booking_seats;
DROP TRIGGER seat_claims_at_fence ON seat_claims;
DROP FUNCTION booking_seats_keep_claimed();
DROP FUNCTION bookings_keep_referenced();
DROP FUNCTION booking_seats_check_all();
DROP FUNCTION seat_claims_check_all();
ALTER TABLE bookings ADD CONSTRAINT bookings_claim_key UNIQUE (show_id, booking_id, generation, status);
DROP INDEX bookings_idempotency_key_unique;
ALTER TABLE bookings ADD CONSTRAINT bookings_idempotency_key_unique UNIQUE (show_id, holder_id, idempotency_key);
ALTER TABLE booking_seats ADD CONSTRAINT booking_seats_booking_fkey FOREIGN KEY (show_id, booking_id) REFERENCES bookings (show_id, booking_id) ON DELETE CASCADE;
ALTER TABLE seat_claims ADD CONSTRAINT seat_claims_booking_seat_fkey FOREIGN KEY (show_id, booking_id, seat_id) REFERENCES booking_seats (show_id, booking_id, seat_id);
ALTER TABLE seat_claims ADD CONSTRAINT seat_claims_booking_fkey
    FOREIGN KEY (show_id, booking_id, generation, booking_status)
    REFERENCES bookings (show_id, booking_id, generation, status);
DROP TRIGGER shows_delete_unused ON shows;
DROP FUNCTION shows_delete_unused();
DROP TRIGGER marker_outbox_show_exists ON marker_outbox;
DROP TRIGGER booking_events_show_exists ON booking_events;
DROP TRIGGER bookings_show_exists ON bookings;
DROP FUNCTION holdfast_show_exists();
ALTER TABLE booking_seats ADD CONSTRAINT booking_seats_seat_fkey FOREIGN KEY (show_id, seat_id) REFERENCES seats (show_id, seat_id);
ALTER TABLE marker_outbox ADD CONSTRAINT marker_outbox_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id);
ALTER TABLE booking_events ADD CONSTRAINT booking_events_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id);
ALTER TABLE bookings ADD CONSTRAINT bookings_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id);
DROP TRIGGER holder_seats_count_status ON bookings;
DROP TRIGGER holder_seats_count ON bookings;
DROP FUNCTION holder_seats_count_all();
CREATE TRIGGER holder_seats_count
    AFTER INSERT OR UPDATE OF status ON bookings
    FOR EACH ROW EXECUTE FUNCTION holder_seats_count();
DROP TRIGGER bookings_claims_whole_status ON bookings;
DROP TRIGGER bookings_claims_whole ON bookings;
DROP FUNCTION bookings_claims_whole_all();
CREATE CONSTRAINT TRIGGER bookings_claims_whole
    AFTER INSERT OR UPDATE OF status ON bookings
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION bookings_claims_whole();
CREATE TRIGGER seat_claims_at_fence
    BEFORE INSERT ON seat_claims
    FOR EACH ROW EXECUTE FUNCTION seat_claims_at_fence();
