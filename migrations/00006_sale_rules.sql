-- Sale rules (engine/sale.go): a show's limit of seats per holder across orders and its
-- waiting room, and the seats each holder has booked in each show, kept by triggers so
-- that the limit is checked by the database at confirmation whatever Redis says.
--
-- rules_version goes up with every change of a show's rules: Redis keeps the rules it
-- was given with their version, and the engine gives newer ones (a Redis that lost them,
-- or missed a change in a failover, gets them back before the next hold).

-- +goose Up
ALTER TABLE shows
    ADD COLUMN holder_limit integer NOT NULL DEFAULT 0,
    ADD COLUMN queue_opens_at timestamptz,
    ADD COLUMN queue_admit_per_second double precision NOT NULL DEFAULT 0,
    ADD COLUMN queue_admission_ttl_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN rules_version bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT shows_holder_limit_range CHECK (holder_limit BETWEEN 0 AND 1000000),
    ADD CONSTRAINT shows_queue_admit_range CHECK (queue_admit_per_second >= 0 AND queue_admit_per_second <= 1000000),
    ADD CONSTRAINT shows_queue_ttl_range CHECK (queue_admission_ttl_ms >= 0 AND queue_admission_ttl_ms <= 86400000),
    ADD CONSTRAINT shows_queue_whole CHECK (queue_opens_at IS NOT NULL OR (queue_admit_per_second = 0 AND queue_admission_ttl_ms = 0));

-- holder_seats: the seats of a holder's confirmed bookings in a show (cancelled ones
-- given back). Written only by the triggers below.
CREATE TABLE holder_seats (
    show_id   text    NOT NULL,
    holder_id text    NOT NULL,
    seats     integer NOT NULL DEFAULT 0,
    version   bigint  NOT NULL DEFAULT 1,
    CONSTRAINT holder_seats_pkey PRIMARY KEY (show_id, holder_id),
    CONSTRAINT holder_seats_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id) ON DELETE CASCADE,
    CONSTRAINT holder_seats_nonnegative CHECK (seats >= 0)
);

INSERT INTO holder_seats (show_id, holder_id, seats)
SELECT b.show_id, b.holder_id, count(*)
FROM bookings b JOIN booking_seats s ON s.show_id = b.show_id AND s.booking_id = b.booking_id
WHERE b.status = 'confirmed' AND b.holder_id <> ''
GROUP BY b.show_id, b.holder_id;

-- A confirmed booking adds its seats to its holder's count and, when the show has a
-- holder limit, is refused past it (holder_seats_within_limit); a cancellation gives
-- them back. The triggers run after the statement that wrote the booking and its seats.
-- +goose StatementBegin
CREATE FUNCTION holder_seats_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    total integer;
    lim integer;
BEGIN
    IF NEW.holder_id = '' THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO n FROM booking_seats WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id;
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'confirmed' THEN
            RETURN NULL;
        END IF;
        INSERT INTO holder_seats AS h (show_id, holder_id, seats) VALUES (NEW.show_id, NEW.holder_id, n)
        ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
        RETURNING seats INTO total;
        SELECT holder_limit INTO lim FROM shows WHERE show_id = NEW.show_id;
        IF lim > 0 AND total > lim THEN
            RAISE EXCEPTION 'holder % would have % seats of show %, past its limit of %', NEW.holder_id, total, NEW.show_id, lim
                USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
        END IF;
    ELSIF OLD.status = 'confirmed' AND NEW.status = 'cancelled' THEN
        UPDATE holder_seats SET seats = seats - n, version = version + 1
        WHERE show_id = NEW.show_id AND holder_id = NEW.holder_id;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER holder_seats_count
    AFTER INSERT OR UPDATE OF status ON bookings
    FOR EACH ROW EXECUTE FUNCTION holder_seats_count();

-- +goose Down
DROP TRIGGER holder_seats_count ON bookings;
DROP FUNCTION holder_seats_count();
DROP TABLE holder_seats;
ALTER TABLE shows
    DROP CONSTRAINT shows_queue_whole,
    DROP CONSTRAINT shows_queue_ttl_range,
    DROP CONSTRAINT shows_queue_admit_range,
    DROP CONSTRAINT shows_holder_limit_range,
    DROP COLUMN rules_version,
    DROP COLUMN queue_admission_ttl_ms,
    DROP COLUMN queue_admit_per_second,
    DROP COLUMN queue_opens_at,
    DROP COLUMN holder_limit;
