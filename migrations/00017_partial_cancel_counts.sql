-- Partial cancellations of seats (engine.CancelSeats), two rules:
--
--   * A seat that leaves a confirmed booking leaves its holder's count: the seats of a
--     statement's deleted booking_seats rows are taken off holder_seats per (show,
--     holder), with the version raised so that Redis's count follows (counts.lua keeps
--     the higher version). A cancelled booking's seats left the count with its status.
--     The counts a partial cancellation left too high are set to what the bookings
--     have: the seats of confirmed bookings and their claimed places. Redis's copies
--     follow at the holder's next confirmation or cancellation, or at once with
--     `holdfast resync` of the show (docs/DEPLOY.md, "Upgrading").
--   * bookings_claims_whole, checked at COMMIT when claims are deleted, accepts a
--     confirmed booking with no seat left that keeps claimed places, as the statement
--     check of new bookings (bookings_claims_whole_all) does.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION booking_seats_uncount() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
    WITH gone AS (
        SELECT b.show_id, b.holder_id, count(*)::integer AS n
        FROM gone_seats s
        JOIN bookings b ON b.show_id = s.show_id AND b.booking_id = s.booking_id
        WHERE b.status = 'confirmed' AND b.holder_id <> ''
        GROUP BY b.show_id, b.holder_id
    )
    UPDATE holder_seats h SET seats = h.seats - gone.n, version = h.version + 1
    FROM gone
    WHERE h.show_id = gone.show_id AND h.holder_id = gone.holder_id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER booking_seats_uncount
    AFTER DELETE ON booking_seats
    REFERENCING OLD TABLE AS gone_seats
    FOR EACH STATEMENT EXECUTE FUNCTION booking_seats_uncount();

UPDATE holder_seats h SET seats = t.n, version = h.version + 1
FROM (
    SELECT h2.show_id, h2.holder_id,
           (SELECT count(*) FROM bookings b
            JOIN booking_seats s ON s.show_id = b.show_id AND s.booking_id = b.booking_id
            WHERE b.show_id = h2.show_id AND b.holder_id = h2.holder_id AND b.status = 'confirmed')
           + (SELECT coalesce(sum(p.places), 0) FROM bookings b
              JOIN booking_places p ON p.show_id = b.show_id AND p.booking_id = b.booking_id AND p.claimed
              WHERE b.show_id = h2.show_id AND b.holder_id = h2.holder_id AND b.status = 'confirmed') AS n
    FROM holder_seats h2
) AS t
WHERE h.show_id = t.show_id AND h.holder_id = t.holder_id AND h.seats <> t.n;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION bookings_claims_whole() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    sid text;
    bid uuid;
    st text;
    missing int;
BEGIN
    IF TG_OP = 'DELETE' THEN
        sid := OLD.show_id; bid := OLD.booking_id;
    ELSE
        sid := NEW.show_id; bid := NEW.booking_id;
    END IF;
    SELECT status INTO st FROM bookings WHERE show_id = sid AND booking_id = bid;
    IF st IS DISTINCT FROM 'confirmed' THEN
        RETURN NULL; -- cancelled (the foreign key keeps its claims away) or gone
    END IF;
    SELECT count(*) INTO missing FROM booking_seats s
    WHERE s.show_id = sid AND s.booking_id = bid
      AND NOT EXISTS (SELECT 1 FROM seat_claims c
                      WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id);
    IF missing > 0 OR (NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = sid AND s.booking_id = bid)
                       AND NOT EXISTS (SELECT 1 FROM booking_places p WHERE p.show_id = sid AND p.booking_id = bid AND p.claimed)) THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of % of its seats, or has neither a seat nor a place', bid, sid, missing
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION bookings_claims_whole() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    sid text;
    bid uuid;
    st text;
    missing int;
BEGIN
    IF TG_OP = 'DELETE' THEN
        sid := OLD.show_id; bid := OLD.booking_id;
    ELSE
        sid := NEW.show_id; bid := NEW.booking_id;
    END IF;
    SELECT status INTO st FROM bookings WHERE show_id = sid AND booking_id = bid;
    IF st IS DISTINCT FROM 'confirmed' THEN
        RETURN NULL; -- cancelled (the foreign key keeps its claims away) or gone
    END IF;
    SELECT count(*) INTO missing FROM booking_seats s
    WHERE s.show_id = sid AND s.booking_id = bid
      AND NOT EXISTS (SELECT 1 FROM seat_claims c
                      WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id);
    IF missing > 0 OR NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = sid AND s.booking_id = bid) THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of % of its seats', bid, sid, missing
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER booking_seats_uncount ON booking_seats;
DROP FUNCTION booking_seats_uncount();
