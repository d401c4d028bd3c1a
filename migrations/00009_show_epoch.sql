-- A show's identity (engine/shows.go): epoch is drawn from one sequence when the show
-- is created, so a show deleted and created again under the same show_id is another
-- show, with a larger epoch than any earlier show of that id. Engines carry it in
-- their caches and in Redis's copy of the sale rules, and compare rules_version only
-- within one epoch.

-- +goose Up
ALTER TABLE shows
    ADD COLUMN epoch bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
    ADD CONSTRAINT shows_epoch_key UNIQUE (epoch);

-- +goose Down
ALTER TABLE shows DROP COLUMN epoch;
