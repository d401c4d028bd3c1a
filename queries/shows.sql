-- name: ShowInsert :execrows
-- ShowInsert creates a show; 0 rows when it exists already.
INSERT INTO shows (show_id) VALUES (@show_id)
ON CONFLICT (show_id) DO NOTHING;

-- name: ShowExists :one
SELECT EXISTS (SELECT 1 FROM shows WHERE show_id = @show_id);
