package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
)

// singleHeader reads a header that may be sent at most once: a second one is refused
// rather than one of them silently chosen.
func (s *Server) singleHeader(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	vs := r.Header.Values(name)
	if len(vs) > 1 {
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument",
			name+": sent "+strconv.Itoa(len(vs))+" times; send it once")
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}

// holder reads the caller's identity; a request without one is refused.
func (s *Server) holder(w http.ResponseWriter, r *http.Request) (string, bool) {
	h, ok := s.singleHeader(w, r, HolderHeader)
	if !ok {
		return "", false
	}
	if h == "" {
		writeProblem(w, http.StatusBadRequest, "missing-holder", "Missing holder", "the "+HolderHeader+" header is required")
		return "", false
	}
	if len(h) > 128 { // also bounds the rate limiter's keys
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument", HolderHeader+": at most 128 bytes")
		return "", false
	}
	return h, true
}

// operatorOnly guards an operator route: off (403) without a configured token, 401
// without the right bearer token. Attempts count against the caller's read limit.
func (s *Server) operatorOnly(fn http.HandlerFunc) http.HandlerFunc {
	return s.reading(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.OperatorToken == "" {
			writeProblem(w, http.StatusForbidden, "operator-routes-off", "Operator routes are off",
				"start holdfast serve with --operator-token (or HOLDFAST_OPERATOR_TOKEN) to create shows and resync over HTTP")
			return
		}
		if !s.isOperator(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast-operator"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized",
				"this route needs the operator token: Authorization: Bearer <token>")
			return
		}
		fn(w, r)
	})
}

// isOperator reports whether the request carries the operator token (compared in
// constant time, as hashes).
func (s *Server) isOperator(r *http.Request) bool {
	if s.opts.OperatorToken == "" {
		return false
	}
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 || !strings.HasPrefix(vs[0], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimPrefix(vs[0], "Bearer ")))
	return subtle.ConstantTimeCompare(got[:], s.operator[:]) == 1
}
