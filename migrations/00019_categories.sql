-- A seat and an area carry an optional category (a price band, a seating class: "A",
-- "Premium"); best-available holds can ask for one (engine.BestRequest.Category). The
-- empty string is no category; a label is as a section's
-- (^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$, checked by the engine).

-- +goose Up
ALTER TABLE seats ADD COLUMN category text NOT NULL DEFAULT '';
ALTER TABLE areas ADD COLUMN category text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE areas DROP COLUMN category;
ALTER TABLE seats DROP COLUMN category;
