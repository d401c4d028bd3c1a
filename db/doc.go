// Package db is holdfast's access to PostgreSQL: sqlc generates every file here from
// queries/*.sql and the schema in migrations/ (make generate; make verify fails on
// drift), except doc.go and pipeline.go, which sends sqlc's own queries in one pipelined
// round trip. The engine is its only user.
package db
