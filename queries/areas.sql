-- name: AreasInsert :exec
-- AreasInsert adds a show's areas, one array element per area.
INSERT INTO areas (show_id, area_id, section, capacity, category)
SELECT @show_id, unnest(@area_ids::text[]), unnest(@sections::text[]), unnest(@capacities::int[]),
       unnest(@categories::text[]);

-- name: AreaListByShow :many
-- AreaListByShow is a show's areas in id order, with the places sold now.
SELECT area_id, section, capacity, sold, generation, category FROM areas
WHERE show_id = @show_id ORDER BY area_id;

-- name: AreasLock :many
-- AreasLock locks the areas of a batch of confirmations, given as (show, area) pairs, in
-- one global order (show, then area), waiting for a lock another batch holds: every
-- confirmation of an area needs its one row, so skipping it (as SeatFencesLockSkip
-- skips a seat's fence) would starve them. A batch locks its areas after its seats'
-- fences and never a fence after an area, so no two batches wait for each other.
SELECT a.show_id, a.area_id, a.capacity, a.sold
FROM areas a
JOIN (SELECT unnest(@show_ids::text[]) AS show_id, unnest(@area_ids::text[]) AS area_id) AS k
  ON a.show_id = k.show_id AND a.area_id = k.area_id
ORDER BY a.show_id, a.area_id
FOR UPDATE OF a;

-- name: PlaceMarkListByShow :many
-- PlaceMarkListByShow is what Redis's place markers must say for a show: every booking
-- of places, with its generation, its hold's place key and whether it is claimed now.
SELECT area_id, places, generation, hold_id, claimed FROM booking_places
WHERE show_id = @show_id ORDER BY area_id, generation;
