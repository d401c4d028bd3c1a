-- A show's seats carry a venue layout: section, row, position in the row (adjacency),
-- rank (lower is better, for best-available selection) and optional drawing
-- coordinates. Seats that existed before get a derived layout: one unnamed section and
-- row, positions and ranks in seat id order. Like the inventory, a layout is fixed once
-- the show is created.

-- +goose Up
ALTER TABLE seats
    ADD COLUMN section   text             NOT NULL DEFAULT '',
    ADD COLUMN row_label text             NOT NULL DEFAULT '',
    ADD COLUMN position  integer          NOT NULL DEFAULT 0,
    ADD COLUMN rank      integer          NOT NULL DEFAULT 0,
    ADD COLUMN x         double precision NOT NULL DEFAULT 0,
    ADD COLUMN y         double precision NOT NULL DEFAULT 0;

UPDATE seats s SET position = o.n, rank = o.n
FROM (SELECT show_id, seat_id, row_number() OVER (PARTITION BY show_id ORDER BY seat_id) AS n FROM seats) o
WHERE s.show_id = o.show_id AND s.seat_id = o.seat_id;

ALTER TABLE seats
    ADD CONSTRAINT seats_section_format CHECK (section ~ '^([A-Za-z0-9][A-Za-z0-9 ._-]{0,31})?$'),
    ADD CONSTRAINT seats_row_label_format CHECK (row_label ~ '^([A-Za-z0-9][A-Za-z0-9 ._-]{0,31})?$'),
    ADD CONSTRAINT seats_position_range CHECK (position BETWEEN 1 AND 1000000),
    ADD CONSTRAINT seats_rank_range CHECK (rank BETWEEN 0 AND 1000000000),
    -- PostgreSQL orders NaN above every number, so a range excludes it and infinities.
    ADD CONSTRAINT seats_xy_range CHECK (x BETWEEN -1000000 AND 1000000 AND y BETWEEN -1000000 AND 1000000),
    ADD CONSTRAINT seats_position_unique UNIQUE (show_id, section, row_label, position);

-- +goose Down
ALTER TABLE seats
    DROP CONSTRAINT seats_position_unique,
    DROP COLUMN y,
    DROP COLUMN x,
    DROP COLUMN rank,
    DROP COLUMN position,
    DROP COLUMN row_label,
    DROP COLUMN section;
