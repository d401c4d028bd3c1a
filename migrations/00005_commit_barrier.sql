-- The durability barrier (engine/failover.go): before the engine acknowledges a booking
-- whose COMMIT did not return normally, or replays one to a retry, it commits a write
-- of its own here. A COMMIT waits for the synchronous standbys only when its
-- transaction wrote WAL, so the barrier must write a row: once its COMMIT returns,
-- every commit record before it is as durable as the server's settings promise. 64
-- rows, one picked at random, so that barriers rarely wait for each other's row lock.
-- Nothing reads the counts.

-- +goose Up
CREATE TABLE commit_barrier (
    slot   integer PRIMARY KEY CHECK (slot BETWEEN 0 AND 63),
    writes bigint  NOT NULL DEFAULT 0
);
INSERT INTO commit_barrier (slot) SELECT generate_series(0, 63);

-- +goose Down
DROP TABLE commit_barrier;
