package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/singleflight"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/flight"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// route is one route: its method, its path pattern and its handler.
type route struct {
	method, path string
	h            http.Handler
}

// routes returns the public and the admin routes, all listed here.
func (s *Server) routes() (public, admin http.Handler) {
	shows := func(fn http.HandlerFunc) http.HandlerFunc { return s.reading(s.showLookups(fn)) }
	pub := []route{
		{"GET", "/v1/shows", s.reading(s.getShows)},
		{"GET", "/v1/shows/{show}/layout", shows(s.getLayout)},
		{"GET", "/v1/shows/{show}/seats", shows(s.getSeats)},
		{"GET", "/v1/shows/{show}/events", shows(s.getEvents)},
		{"POST", "/v1/shows/{show}/holds", s.keyed(s.showLookups(s.limited(s.postHold)))},
		{"POST", "/v1/shows/{show}/holds/reclaim", s.showLookups(s.limited(s.postReclaim))},
		{"GET", "/v1/shows/{show}/rules", shows(s.getRules)},
		{"POST", "/v1/shows/{show}/queue", s.showLookups(s.limited(s.postQueue))},
		{"GET", "/v1/shows/{show}/queue", s.showLookups(s.holderReading(s.getQueue))},
		{"GET", "/v1/shows/{show}/queue/events", shows(s.getQueueEvents)},
		{"POST", "/v1/shows/{show}/waitlist", s.keyed(s.showLookups(s.limited(s.postWaitlist)))},
		{"GET", "/v1/shows/{show}/waitlist", s.showLookups(s.holderReading(s.getWaitlist))},
		{"GET", "/v1/shows/{show}/waitlist/events", s.showLookups(s.holderReading(s.getWaitlistEvents))},
		{"POST", "/v1/holds/extend", s.keyed(s.limited(s.postExtend))},
		{"POST", "/v1/holds/release", s.keyed(s.limited(s.postRelease))},
		{"POST", "/v1/holds/shrink", s.keyed(s.limited(s.postShrink))},
		{"POST", "/v1/holds/transfer", s.keyed(s.limited(s.postTransfer))},
		{"POST", "/v1/bookings", s.keyed(s.limited(s.postBooking))},
		{"GET", "/v1/bookings/{id}", s.holderReading(s.getBooking)},
		{"DELETE", "/v1/bookings/{id}", s.keyed(s.limited(s.deleteBooking))},
		{"POST", "/v1/bookings/{id}/cancel-seats", s.keyed(s.limited(s.postCancelSeats))},
		{"POST", "/v1/bookings/{id}/exchange", s.keyed(s.limited(s.postExchange))},
		{"GET", "/v1/holders/me/bookings", s.holderReading(s.getMyBookings)},
		{"GET", "/v1/holders/me/holds", s.holderReading(s.getMyHolds)},
		{"GET", "/livez", http.HandlerFunc(s.livez)},
		{"GET", "/readyz", http.HandlerFunc(s.readyz)},
		{"GET", "/openapi.yaml", http.HandlerFunc(serveOpenAPI)},
		{"GET", "/{$}", s.reading(s.getIndex)},
		{"GET", "/shows/{show}", shows(s.getShowPage)},
		{"GET", "/static/{file}", http.HandlerFunc(getStatic)},
	}
	if s.opts.DemoIdentity {
		pub = append(pub, route{"POST", "/v1/demo/identity", http.HandlerFunc(s.postDemoIdentity)})
	}
	adm := []route{
		{"PUT", "/v1/shows/{show}", s.operatorOnly(s.putShow)},
		{"DELETE", "/v1/shows/{show}", s.operatorOnly(s.deleteShow)},
		{"GET", "/v1/shows", s.operatorOnly(s.getShows)},
		{"POST", "/v1/shows/{show}/resync", s.operatorOnly(s.postResync)},
		{"PUT", "/v1/shows/{show}/rules", s.operatorOnly(s.putRules)},
		{"GET", "/v1/shows/{show}/rules", s.operatorOnly(s.getRules)},
		{"POST", "/v1/bookings/{id}/transfer", s.operatorOnly(s.keyed(s.postBookingTransfer))},
		{"GET", "/v1/events", s.operatorOnly(s.getFeed)},
		{"GET", "/livez", http.HandlerFunc(s.livez)},
		{"GET", "/readyz", http.HandlerFunc(s.readyzDetailed)},
		{"GET", "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})},
	}
	return s.mux(pub), s.mux(adm)
}

// keyed passes a write's Idempotency-Key header (sent at most once) to the engine in the
// request's context (engine.WithIdempotencyKey): a retry under the key gets the first
// call's answer.
func (s *Server) keyed(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := s.singleHeader(w, r, IdempotencyHeader)
		if !ok {
			return
		}
		if key != "" {
			r = r.WithContext(engine.WithIdempotencyKey(r.Context(), key))
		}
		fn(w, r)
	}
}

// mux serves routes; a listed path asked with another method is a 405 problem naming
// the allowed ones, any other path a 404 problem.
func (s *Server) mux(routes []route) http.Handler {
	mux := http.NewServeMux()
	allowed := map[string][]string{} // path -> methods, for 405 answers
	var paths []string
	for _, r := range routes {
		mux.Handle(r.method+" "+r.path, r.h)
		if allowed[r.path] == nil {
			paths = append(paths, r.path)
		}
		allowed[r.path] = append(allowed[r.path], r.method)
	}
	// A path with another method is a 405 problem naming the allowed ones (the
	// method-less pattern is less specific, so it only catches the rest); any other
	// path is a 404 problem.
	for _, p := range paths {
		methods := allowed[p]
		if slices.Contains(methods, "GET") {
			methods = append(methods, "HEAD")
		}
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			sampleLog(r, logUnmatched)
			w.Header().Set("Allow", allow)
			writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
				r.Method+" is not allowed here; use "+allow)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		sampleLog(r, logUnmatched)
		writeProblem(w, http.StatusNotFound, "no-such-route", "No such route", "no route matches "+r.URL.Path)
	})
	return s.observe(mux)
}

// holdJSON is a hold on the wire.
type holdJSON struct {
	Show       string    `json:"show"`
	Seats      []string  `json:"seats"`
	Token      string    `json:"token"`
	Generation int64     `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Places is the places of standing areas the hold has (none: omitted).
	Places []placesJSON `json:"places,omitempty"`
	// Offer is the hold's offer (none: omitted). Presented back, it is not read: the
	// booking takes the hold's own.
	Offer string `json:"offer,omitempty"`
}

// bookingJSON is a booking on the wire.
type bookingJSON struct {
	ID          uuid.UUID    `json:"id"`
	Show        string       `json:"show"`
	Seats       []string     `json:"seats"`
	Generation  int64        `json:"generation"`
	Status      string       `json:"status"`
	ConfirmedAt time.Time    `json:"confirmed_at"`
	CancelledAt *time.Time   `json:"cancelled_at"`
	Places      []placesJSON `json:"places,omitempty"`
	Offer       string       `json:"offer,omitempty"`
}

type seatJSON struct {
	Seat      string     `json:"seat"`
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func toHoldJSON(h engine.Hold) holdJSON {
	return holdJSON{Show: h.ShowID, Seats: nonNil(h.SeatIDs), Token: h.Token, Generation: h.Generation, ExpiresAt: h.ExpiresAt.UTC(),
		Places: toPlacesJSON(h.Places), Offer: h.Offer}
}

func toBookingJSON(b engine.Booking) bookingJSON {
	return bookingJSON{ID: b.ID, Show: b.ShowID, Seats: nonNil(b.SeatIDs), Generation: b.Generation,
		Status: string(b.Status), ConfirmedAt: b.ConfirmedAt.UTC(), CancelledAt: b.CancelledAt, Places: toPlacesJSON(b.Places),
		Offer: b.Offer}
}

// holdFromJSON turns a presented hold back into an engine Hold of this holder.
func holdFromJSON(j holdJSON, holder string) engine.Hold {
	// The expiry the client sent back is a hint (the engine checks the hold in Redis
	// either way): with it, a confirmation skips a Redis check before its batch.
	return engine.Hold{ShowID: j.Show, SeatIDs: j.Seats, Token: j.Token, Generation: j.Generation, ExpiresAt: j.ExpiresAt, HolderID: holder,
		Places: fromPlacesJSON(j.Places)}
}

// layoutSeatJSON is one seat of a layout on the wire.
type layoutSeatJSON struct {
	ID       string  `json:"id"`
	Section  string  `json:"section"`
	Row      string  `json:"row"`
	Position int     `json:"position"`
	Rank     int     `json:"rank"`
	X        float64 `json:"x"`
	Y        float64 `json:"y"`
	Category string  `json:"category,omitempty"`
}

func (s *Server) putShow(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Seats  []string         `json:"seats"`
		Layout []layoutSeatJSON `json:"layout"`
		Areas  []areaJSON       `json:"areas"`
	}
	if !s.decode(w, r, s.opts.MaxShowBodyBytes, &body) {
		return
	}
	var created bool
	var err error
	var layout []engine.Seat
	if body.Layout != nil {
		layout = make([]engine.Seat, len(body.Layout))
		for i, l := range body.Layout {
			layout[i] = engine.Seat{ID: l.ID, Section: l.Section, Row: l.Row, Position: l.Position, Rank: l.Rank, X: l.X, Y: l.Y, Category: l.Category}
		}
	}
	switch {
	case body.Areas != nil:
		created, err = s.ensureVenue(r, body.Seats, layout, body.Areas)
	case (body.Seats == nil) == (body.Layout == nil):
		err = &engine.InvalidArgumentError{Field: "seats", Rule: `give exactly one of "seats" (seat ids) and "layout" (seats with their places)`}
	case body.Layout != nil:
		created, err = s.e.EnsureShowLayout(r.Context(), r.PathValue("show"), layout)
	default:
		created, err = s.e.EnsureShow(r.Context(), r.PathValue("show"), body.Seats)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"show": r.PathValue("show"), "seats": len(body.Seats) + len(body.Layout), "areas": len(body.Areas)})
}

// compactLayoutJSON is a layout by column (?format=compact): the seats' ids, positions,
// ranks and coordinates in layout order, their sections, rows and categories as indices
// into the names listed once (categories only when a seat has one). A 100,000-seat arena
// is about 3.4 MB instead of 8.8 MB (before gzip).
type compactLayoutJSON struct {
	Show     string    `json:"show"`
	Format   string    `json:"format"` // "compact"
	Sections []string  `json:"sections"`
	Rows     []string  `json:"rows"`
	IDs      []string  `json:"ids"`
	Section  []int     `json:"section"`
	Row      []int     `json:"row"`
	Position []int     `json:"position"`
	Rank     []int     `json:"rank"`
	X        []float64 `json:"x"`
	Y        []float64 `json:"y"`
	// Categories and Category are present when a seat has a category.
	Categories []string `json:"categories,omitempty"`
	Category   []int    `json:"category,omitempty"`
}

func compactLayout(show string, seats []engine.Seat) compactLayoutJSON {
	out := compactLayoutJSON{Show: show, Format: "compact", Sections: []string{}, Rows: []string{}}
	secs, rows, cats := map[string]int{}, map[string]int{}, map[string]int{}
	at := func(m map[string]int, names *[]string, name string) int {
		i, ok := m[name]
		if !ok {
			i = len(*names)
			m[name] = i
			*names = append(*names, name)
		}
		return i
	}
	for _, st := range seats {
		out.IDs = append(out.IDs, st.ID)
		out.Section = append(out.Section, at(secs, &out.Sections, st.Section))
		out.Row = append(out.Row, at(rows, &out.Rows, st.Row))
		out.Position = append(out.Position, st.Position)
		out.Rank = append(out.Rank, st.Rank)
		out.X = append(out.X, st.X)
		out.Y = append(out.Y, st.Y)
		out.Category = append(out.Category, at(cats, &out.Categories, st.Category))
	}
	if len(out.Categories) == 1 && out.Categories[0] == "" {
		out.Categories, out.Category = nil, nil
	}
	return out
}

// getLayout serves a show's venue layout, by seat or by column (?format=compact),
// encoded (and gzipped) once per show and form. A layout never changes, so it is
// cacheable for good, and revalidation by ETag answers 304 without touching the
// engine's layout again.
func (s *Server) getLayout(w http.ResponseWriter, r *http.Request) {
	show := r.PathValue("show")
	format, ok := s.formatParam(w, r)
	if !ok {
		return
	}
	key := show
	if format == "compact" {
		key = show + "?compact" // a show id has no '?'
	}
	enc := s.layouts.get(key)
	if enc == nil {
		seats, err := s.e.Layout(r.Context(), show)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		var v any
		if format == "compact" {
			v = compactLayout(show, seats)
		} else {
			out := make([]layoutSeatJSON, len(seats))
			for i, st := range seats {
				out[i] = layoutSeatJSON{ID: st.ID, Section: st.Section, Row: st.Row, Position: st.Position, Rank: st.Rank, X: st.X, Y: st.Y, Category: st.Category}
			}
			v = map[string]any{"show": show, "seats": out}
		}
		body, err := json.Marshal(v)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		sum := sha256.Sum256(body)
		enc = newEncoded(`"`+hex.EncodeToString(sum[:12])+`"`, append(body, '\n'), true)
		s.layouts.put(key, enc)
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	writeEncoded(w, r, enc)
}

func (s *Server) postResync(w http.ResponseWriter, r *http.Request) {
	if err := s.e.Resync(r.Context(), r.PathValue("show")); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"show": r.PathValue("show"), "resynced": true})
}

// postHold holds named seats ({"seats": [...]}) or the best available ones
// ({"count": 4, "section": "B", "category": "A", "adjacent": true}): exactly one of
// seats and count. Either takes an "offer" the hold and its booking carry.
func (s *Server) postHold(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		Seats    []string     `json:"seats"`
		Places   []placesJSON `json:"places"`
		TTLms    *int64       `json:"ttl_ms"`
		Count    *int         `json:"count"`
		Section  *string      `json:"section"`
		Category *string      `json:"category"`
		Adjacent *bool        `json:"adjacent"`
		Offer    string       `json:"offer"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	var ttl time.Duration
	if body.TTLms != nil {
		d, err := ttlFromMillis(*body.TTLms)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ttl = d
	}
	best := body.Count != nil || body.Section != nil || body.Category != nil || body.Adjacent != nil
	if best == (body.Seats != nil || body.Places != nil) {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "seats", Rule: `send exactly one of "seats" and "places" (named seats, places of areas) and "count" (the best available, with "section", "category" and "adjacent")`})
		return
	}
	if best && body.Count == nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "count", Rule: "missing: how many seats"})
		return
	}
	n := len(body.Seats) + placesTotal(body.Places)
	if best {
		n = max(*body.Count, 0)
	}
	done, ok := s.addrHolds.reserve(r.PathValue("show"), clientAddrOf(r), n)
	if !ok {
		s.addressSeatsRefused(w)
		return
	}
	var h engine.Hold
	var err error
	if best {
		req := engine.BestRequest{ShowID: r.PathValue("show"), Count: *body.Count, TTL: ttl, HolderID: holder, Offer: body.Offer}
		if body.Section != nil {
			req.Section = *body.Section
		}
		if body.Category != nil {
			req.Category = *body.Category
		}
		if body.Adjacent != nil {
			req.Adjacent = *body.Adjacent
		}
		h, err = s.e.HoldBest(r.Context(), req)
	} else {
		h, err = s.e.Hold(r.Context(), engine.HoldRequest{ShowID: r.PathValue("show"), SeatIDs: body.Seats, HolderID: holder, TTL: ttl,
			Places: fromPlacesJSON(body.Places), Offer: body.Offer})
	}
	done(h.Generation, h.ExpiresAt, err == nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toHoldJSON(h))
}

func (s *Server) postExtend(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		holdJSON `json:",inline"`
		TTLms    *int64 `json:"ttl_ms"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if body.TTLms == nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "ttl_ms", Rule: "required: how long the hold is extended by, in milliseconds"})
		return
	}
	ttl, err := ttlFromMillis(*body.TTLms)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h, err := s.e.Extend(r.Context(), holdFromJSON(body.holdJSON, holder), ttl)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.addrHolds.update(h.ShowID, clientAddrOf(r), h.Generation, h.ExpiresAt)
	writeJSON(w, http.StatusOK, toHoldJSON(h))
}

func (s *Server) postRelease(w http.ResponseWriter, r *http.Request, holder string) {
	var body holdJSON
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if err := s.e.Release(r.Context(), holdFromJSON(body, holder)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.addrHolds.update(body.Show, clientAddrOf(r), body.Generation, time.Time{})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) postBooking(w http.ResponseWriter, r *http.Request, holder string) {
	var body confirmJSON
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	key, ok := s.singleHeader(w, r, IdempotencyHeader)
	if !ok {
		return
	}
	b, err := s.e.Confirm(r.Context(), holdFromJSON(body.holdJSON, holder), body.options(key))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.addrHolds.update(body.Show, clientAddrOf(r), body.Generation, time.Time{}) // sold, no longer held
	status := http.StatusCreated
	if b.Replayed {
		status = http.StatusOK
	}
	writeJSON(w, status, toBookingJSON(b))
}

// ownBooking reads the booking named in the path if it belongs to the caller; another
// holder's booking is reported as not found.
func (s *Server) ownBooking(w http.ResponseWriter, r *http.Request, holder string) (engine.Booking, bool) {
	id, ok := s.bookingID(w, r)
	if !ok {
		return engine.Booking{}, false
	}
	b, err := s.e.Booking(r.Context(), id)
	if err == nil && b.HolderID != holder {
		err = engine.ErrNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return engine.Booking{}, false
	}
	return b, true
}

// bookingID is the booking id named in the path.
func (s *Server) bookingID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "id", Rule: "must be a UUID"})
		return uuid.UUID{}, false
	}
	return id, true
}

// asHolder makes a write on a booking the caller's (engine.AsHolder): the engine finds,
// under the booking's lock, only a booking of theirs — another's is not found — and a
// retry under the key of a write they made gets its answer even once the booking has
// moved to another holder.
func asHolder(r *http.Request, holder string) context.Context {
	return engine.AsHolder(r.Context(), holder)
}

func (s *Server) getBooking(w http.ResponseWriter, r *http.Request, holder string) {
	if b, ok := s.ownBooking(w, r, holder); ok {
		writeJSON(w, http.StatusOK, toBookingJSON(b))
	}
}

func (s *Server) deleteBooking(w http.ResponseWriter, r *http.Request, holder string) {
	id, ok := s.bookingID(w, r)
	if !ok {
		return
	}
	if err := s.e.Cancel(asHolder(r, holder), id); err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.e.Booking(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBookingJSON(b))
}

func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	sampleLog(r, logProbe)
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz tells anyone only whether this server is ready, from a check at most a second
// old: a flood of probes costs one check a second.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	sampleLog(r, logProbe)
	if s.draining.Load() {
		writeProblem(w, http.StatusServiceUnavailable, "draining", "Draining", "the server is shutting down")
		return
	}
	if err := s.ready.check(r.Context(), s.checkReady); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable", "not ready")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// readyzDetailed, on the admin listener, checks now and says why it is not ready.
func (s *Server) readyzDetailed(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeProblem(w, http.StatusServiceUnavailable, "draining", "Draining", "the server is shutting down")
		return
	}
	if err := s.checkReady(r.Context()); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) checkReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := s.e.Ready(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "not ready", "error", err)
	}
	return err
}

// readyTimeout bounds a readiness check.
const readyTimeout = 2 * time.Second

// readyCache keeps the last readiness check for a second; concurrent probes share one
// (internal/flight: bounded by readyTimeout, each probe waits for it until its request
// ends).
type readyCache struct {
	g   singleflight.Group
	mu  sync.Mutex
	at  time.Time
	err error
}

func (c *readyCache) check(ctx context.Context, check func(context.Context) error) error {
	c.mu.Lock()
	at, err := c.at, c.err
	c.mu.Unlock()
	if time.Since(at) < time.Second {
		return err
	}
	_, _, err = flight.Do(ctx, &c.g, "", readyTimeout, func(ctx context.Context) (struct{}, error) {
		err := check(ctx)
		c.mu.Lock()
		c.at, c.err = time.Now(), err
		c.mu.Unlock()
		return struct{}{}, err
	})
	return err
}

// addressSeatsRefused answers a hold or a waitlist join past the address's seats of the
// show (Options.MaxSeatsPerAddress).
func (s *Server) addressSeatsRefused(w http.ResponseWriter) {
	s.refused.WithLabelValues("address-seats").Inc()
	writeProblem(w, http.StatusConflict, "address-limit", "Address seat limit reached",
		"this address holds too many seats of the show already ("+strconv.Itoa(s.opts.MaxSeatsPerAddress)+" at most); confirm or release some")
}
