// Package oapiclient is the Go client that oapi-codegen generates from the HTTP API's
// OpenAPI document (httpapi/openapi.yaml), committed as generated: `make generate`
// writes client.gen.go, `make verify` fails when it differs from what the document
// generates, and httpapi's TestGeneratedClient drives a real server with it. It is
// internal: a check that the document makes a working client, not a public API.
package oapiclient
