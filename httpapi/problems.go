package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/holdfast/holdfast/engine"
)

// etagMatches reports whether an If-None-Match header names etag (weakly, as RFC 9110
// asks for If-None-Match), or is "*".
func etagMatches(headers []string, etag string) bool {
	for _, h := range headers {
		for _, t := range strings.Split(h, ",") {
			t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
			if t == etag || t == "*" {
				return true
			}
		}
	}
	return false
}

// ttlFromMillis turns a request's ttl_ms into a duration, refusing what is not
// positive or would overflow one.
func ttlFromMillis(ms int64) (time.Duration, error) {
	if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, &engine.InvalidArgumentError{Field: "ttl_ms", Rule: strconv.FormatInt(ms, 10) + " is not a positive number of milliseconds that fits a duration"}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// decode reads one JSON object of at most limit bytes. Strict means strict: unknown
// fields, field names in another case, duplicate names and trailing data are refused,
// and the refusal says where.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request-too-large", "Request too large",
				"the body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
			return false
		}
		writeProblem(w, http.StatusBadRequest, "malformed-request", "Malformed request", "the body could not be read")
		return false
	}
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		writeProblem(w, http.StatusBadRequest, "malformed-request", "Malformed request",
			"the body is not the expected JSON object: "+describeDecodeError(err))
		return false
	}
	return true
}

// describeDecodeError says where a body went wrong (a JSON pointer) and what JSON was
// expected there, in the client's terms: never a Go type or a decoder's internals.
func describeDecodeError(err error) string {
	at := func(p jsontext.Pointer) string {
		if p == "" {
			return "at the top level"
		}
		return "at " + string(p)
	}
	var se *jsonv2.SemanticError
	if errors.As(err, &se) {
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			return at(se.JSONPointer) + ": unknown member"
		}
		if want := jsonType(se.GoType); want != "" {
			return at(se.JSONPointer) + ": want " + want
		}
		return at(se.JSONPointer) + ": a value of the wrong type"
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		switch {
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return "the body ends before its JSON does"
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return at(syn.JSONPointer) + ": a member sent twice"
		}
		return at(syn.JSONPointer) + " (byte " + strconv.FormatInt(syn.ByteOffset, 10) + "): not valid JSON"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "the body ends before its JSON does"
	}
	return "not valid JSON"
}

// jsonType names the JSON a Go type is decoded from.
func jsonType(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "a string with an RFC 3339 time"
	case t == reflect.TypeFor[uuid.UUID]():
		return "a string with a UUID"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer (at most 2^53-1 in magnitude)"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return ""
}

// problem maps an engine error to its status and stable type.
func problem(err error) (status int, typ, title string) {
	switch {
	case errors.Is(err, engine.ErrInvalidArgument):
		return http.StatusBadRequest, "invalid-argument", "Invalid argument"
	case errors.Is(err, engine.ErrNotFound):
		return http.StatusNotFound, "not-found", "Not found"
	case errors.As(err, new(*engine.PlacesUnavailableError)):
		return http.StatusConflict, "places-unavailable", "Places unavailable"
	case errors.Is(err, engine.ErrSeatsUnavailable):
		return http.StatusConflict, "seats-unavailable", "Seats unavailable"
	case errors.Is(err, engine.ErrStaleGeneration):
		return http.StatusConflict, "stale-generation", "Stale generation"
	case errors.Is(err, engine.ErrHolderLimit):
		return http.StatusConflict, "holder-limit", "Holder seat limit reached"
	case errors.Is(err, engine.ErrNotAdmitted):
		return http.StatusForbidden, "not-admitted", "Not admitted"
	case errors.Is(err, engine.ErrOfferExpired):
		return http.StatusGone, "offer-expired", "Waitlist offer expired"
	case errors.Is(err, engine.ErrHoldLost):
		return http.StatusGone, "hold-lost", "Hold lost"
	case errors.Is(err, engine.ErrIdempotencyKeyReused):
		return http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency key reused"
	case errors.Is(err, engine.ErrExtendLimit):
		return http.StatusUnprocessableEntity, "extend-limit", "Hold extend limit reached"
	case errors.Is(err, engine.ErrShowInUse):
		return http.StatusConflict, "show-in-use", "Show in use"
	case errors.Is(err, engine.ErrUnavailable):
		return http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable"
	case errors.Is(err, engine.ErrOverloaded):
		return http.StatusServiceUnavailable, "overloaded", "Overloaded"
	default:
		return http.StatusInternalServerError, "internal", "Internal error"
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, title := problem(err)
	// The engine's errors say "engine: …" for Go callers; a client of the API is told
	// what happened, not which package said it.
	detail := strings.ReplaceAll(err.Error(), "engine: ", "")
	switch {
	case typ == "overloaded": // shed on purpose: say why, log quietly
		w.Header().Set("Retry-After", "1")
		s.log.InfoContext(r.Context(), "request shed", "route", r.Pattern, "error", err)
	case status >= 500:
		s.log.ErrorContext(r.Context(), "request failed", "route", r.Pattern, "error", err)
		w.Header().Set("Retry-After", "1")
		detail = "a backend failed; retry later"
		if status == http.StatusInternalServerError {
			detail = "internal error"
		}
	}
	p := problemJSON{Type: problemPrefix + typ, Title: title, Status: status, Detail: detail}
	var iae *engine.InvalidArgumentError
	if errors.As(err, &iae) {
		// Name what the client sent, not the Go field it became.
		p.Field = iae.Field
		if name, ok := wireNames[iae.Field]; ok {
			p.Field = name
		}
		p.Detail = p.Field + ": " + iae.Rule
	}
	var lost *engine.HoldLostError
	if errors.As(err, &lost) {
		p.Cause = string(lost.Cause)
		if !lost.At.IsZero() {
			at := lost.At.UTC()
			p.At = &at
		}
	}
	var spent *engine.HoldSpentError
	if errors.As(err, &spent) && spent.BookingID != uuid.Nil {
		p.Booking = "/v1/bookings/" + spent.BookingID.String() // the caller's own booking
	}
	var sue *engine.SeatsUnavailableError
	if errors.As(err, &sue) {
		p.Seats = sue.SeatIDs
		if len(sue.SeatIDs) == 0 {
			p.Available = &sue.Available
		}
	}
	placesProblem(&p, err)
	writeJSONType(w, status, "application/problem+json", p)
}

// wireNames maps the engine's field names in an InvalidArgumentError to what an HTTP
// client sends: a JSON member, a path segment or a header.
var wireNames = map[string]string{
	"HoldRequest.ShowID": "show", "Hold.ShowID": "show", "showID": "show",
	"HoldRequest.SeatIDs": "seats", "Hold.SeatIDs": "seats", "seatIDs": "seats",
	"HoldRequest.TTL": "ttl_ms", "ttl": "ttl_ms",
	"BestRequest.ShowID": "show", "BestRequest.Count": "count", "BestRequest.TTL": "ttl_ms", "BestRequest.Section": "section", "BestRequest.Category": "category",
	"HoldRequest.Places": "places", "Hold.Places": "places", "Venue.Areas": "areas", "Venue.Seats": "layout",
	"Hold.Token": "token", "Hold.Generation": "generation",
	"HolderID": HolderHeader, "ConfirmOptions.IdempotencyKey": IdempotencyHeader,
	"IdempotencyKey": IdempotencyHeader, "HoldRequest.IdempotencyKey": IdempotencyHeader, "BestRequest.IdempotencyKey": IdempotencyHeader,
	"HoldRequest.Offer": "offer", "BestRequest.Offer": "offer",
	"toHolderID": "to", "bookingID": "id",
}

// problemPrefix starts every problem type; the rest is stable per error.
const problemPrefix = "urn:holdfast:problem:"

// problemJSON is an RFC 9457 problem.
type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Field  string `json:"field,omitempty"` // the member, path segment or header at fault
	// Cause says why a presented hold is not current (hold-lost): expired, released,
	// confirmed or not_current; At is when it expired or was released.
	Cause string     `json:"cause,omitempty"`
	At    *time.Time `json:"at,omitempty"`
	// Booking points at the booking a presented hold made already (to its holder).
	Booking string   `json:"booking,omitempty"`
	Seats   []string `json:"seats,omitempty"`
	// Available is, when a best-available hold found nothing, how many seats the best
	// section still had free.
	Available *int `json:"available,omitempty"`
	// Places names the areas a hold asked too many places of (places-unavailable) and,
	// for a refused hold, the places each had left.
	Places []placesLeftJSON `json:"places,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	writeJSONType(w, status, "application/problem+json", problemJSON{Type: problemPrefix + typ, Title: title, Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONType(w, status, "application/json", v)
}

func writeJSONType(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
