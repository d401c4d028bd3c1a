package httpapi

import (
	"net/http"
)

// postReclaim gives the caller's live holds of the show fresh tokens (another device of
// the same holder): POST /v1/shows/{show}/holds/reclaim, no body. The old tokens stop
// working at once.
func (s *Server) postReclaim(w http.ResponseWriter, r *http.Request, holder string) {
	hs, err := s.e.Reclaim(r.Context(), r.PathValue("show"), holder)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Holds []holdJSON `json:"holds"`
	}{Holds: make([]holdJSON, len(hs))}
	for i, h := range hs {
		out.Holds[i] = toHoldJSON(h)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}
