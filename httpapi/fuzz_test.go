package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecode: any body either decodes into the request type or is refused with 400 or
// 413 with a problem document; the decoder never panics.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"show":"s1","seats":["A1"],"token":"00000000000000000000000000000000","generation":1,"expires_at":"2026-01-01T00:00:00Z"}`,
		`{"seats":["A1"],"ttl_ms":1000}`, `{}`, `[]`, `null`, `{"seats":["A1"]} {}`, `{"nope":1}`, `{"seats":`, "",
		`{"generation":1e400}`, `{"seats":[1,2]}`, strings.Repeat("[", 10000),
	} {
		f.Add(s)
	}
	s := &Server{opts: Options{MaxBodyBytes: 4096}}
	f.Fuzz(func(t *testing.T, body string) {
		for _, target := range []any{&holdJSON{}, &struct {
			Seats []string `json:"seats"`
			TTLms *int64   `json:"ttl_ms"`
		}{}} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
			ok := s.decode(rec, req, s.opts.MaxBodyBytes, target)
			switch {
			case ok && rec.Code != http.StatusOK:
				t.Fatalf("decode accepted but wrote %d", rec.Code)
			case !ok && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge:
				t.Fatalf("decode refused with %d", rec.Code)
			case !ok && rec.Header().Get("Content-Type") != "application/problem+json":
				t.Fatalf("refusal is not a problem document")
			}
		}
	})
}
