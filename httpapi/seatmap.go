package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/holdfast/holdfast/engine"
)

// The seat map on the wire. GET /v1/shows/{show}/seats answers, for a show of more
// than compactAbove seats (or with ?format=compact), the compact form: one character
// per seat in layout order (the layout is GET /v1/shows/{show}/layout, cacheable for
// good) — 'f' free, 'h' held, 's' sold. Smaller shows (or ?format=json) get one JSON
// object per seat, with hold expiries. Both carry the map's version, as ETag too, and
// its freshness: as_of and stale in the per-seat form, the Holdfast-As-Of and
// Holdfast-Stale headers in both.
//
// GET /v1/shows/{show}/events streams the changes as Server-Sent Events: "snapshot"
// (the compact map, to start from) and "changes" (seats' new states: layout index,
// state character, hold expiry in Unix ms), each with an id
// "<epoch>.<version>.<position>" that Last-Event-ID resumes after — on this server by
// version, on another replica of the same Redis by the feed position — and a comment
// line as heartbeat.

// compactAbove is the seat count above which the compact form is the default.
const compactAbove = 1000

// statusChar is a state's character in the compact form.
func statusChar(s engine.SeatStatus) byte {
	switch s {
	case engine.SeatHeld:
		return 'h'
	case engine.SeatSold:
		return 's'
	}
	return 'f'
}

func compactStates(states []engine.SeatStatus) string {
	b := make([]byte, len(states))
	for i, s := range states {
		b[i] = statusChar(s)
	}
	return string(b)
}

// compactJSON is the compact seat map on the wire.
type compactJSON struct {
	Show    string `json:"show"`
	Version string `json:"version"`
	Format  string `json:"format"` // "compact"
	Seats   int    `json:"seats"`
	States  string `json:"states"`
	// Areas is the show's standing areas with their places (none: omitted).
	Areas []areaStateJSON `json:"areas,omitempty"`
}

// areaStateJSON is a standing area's places on the seat map.
type areaStateJSON struct {
	ID       string `json:"id"`
	Capacity int    `json:"capacity"`
	Free     int    `json:"free"`
	Held     int    `json:"held"`
	Sold     int    `json:"sold"`
}

func toAreaStatesJSON(as []engine.AreaState) []areaStateJSON {
	var out []areaStateJSON
	for _, a := range as {
		out = append(out, areaStateJSON{ID: a.AreaID, Capacity: a.Capacity, Free: a.Free, Held: a.Held, Sold: a.Sold})
	}
	return out
}

// seatMapJSON is the per-seat seat map on the wire.
type seatMapJSON struct {
	Show    string          `json:"show"`
	Version string          `json:"version"`
	Format  string          `json:"format"` // "json"
	AsOf    time.Time       `json:"as_of"`
	Stale   bool            `json:"stale"`
	Seats   []seatJSON      `json:"seats"`
	Areas   []areaStateJSON `json:"areas,omitempty"`
}

// encoded is a response body encoded once for every reader: its ETag, the body and
// (for larger bodies) its gzip.
type encoded struct {
	etag string
	body []byte
	gz   []byte
}

// gzipAbove is the body size from which an encoded body is gzipped too.
const gzipAbove = 1024

func newEncoded(etag string, body []byte, compress bool) *encoded {
	e := &encoded{etag: etag, body: body}
	if compress && len(body) >= gzipAbove {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		_, _ = zw.Write(body)
		_ = zw.Close()
		e.gz = buf.Bytes()
	}
	return e
}

// writeEncoded answers with an encoded body: 304 when If-None-Match names its ETag,
// else the body, gzipped when the client takes it.
func writeEncoded(w http.ResponseWriter, r *http.Request, e *encoded) {
	h := w.Header()
	h.Set("ETag", e.etag)
	h.Set("Vary", "Accept-Encoding")
	if etagMatches(r.Header.Values("If-None-Match"), e.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	body := e.body
	if e.gz != nil && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = e.gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// mapCache keeps each show's last encoded seat maps (compact and per seat), by
// version; layoutCache keeps shows' layouts (they never change). Both are bounded.
type mapCache struct {
	mu sync.Mutex
	m  map[mapKey]*encodedMap
}

type mapKey struct {
	show, format string
	stale        bool
}

type encodedMap struct {
	version uint64
	at      time.Time // when it was encoded
	asOf    time.Time // the map's
	*encoded
}

// perSeatEvery is how often the per-seat form of a large show (above compactAbove
// seats: megabytes of JSON) is encoded again while its map keeps changing; readers in
// between get the last one, which names its own version and as_of.
const perSeatEvery = time.Second

// maxCachedMaps bounds the maps (and the layouts) kept encoded; past it they are all
// dropped, and encoded again by their next reader.
const maxCachedMaps = 2048

func (c *mapCache) get(k mapKey, version uint64) *encoded {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[k]; e != nil && e.version == version {
		return e.encoded
	}
	return nil
}

// recent returns the last encoding of k, whatever its version, if it is younger than
// maxAge.
func (c *mapCache) recent(k mapKey, maxAge time.Duration) *encodedMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[k]; e != nil && time.Since(e.at) < maxAge {
		return e
	}
	return nil
}

func (c *mapCache) put(k mapKey, version uint64, asOf time.Time, e *encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedMaps {
		c.m = map[mapKey]*encodedMap{}
	}
	if old := c.m[k]; old == nil || old.version < version {
		c.m[k] = &encodedMap{version: version, at: time.Now(), asOf: asOf, encoded: e}
	}
}

type layoutCache struct {
	mu sync.Mutex
	m  map[string]*encoded
}

func (c *layoutCache) get(show string) *encoded {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[show]
}

func (c *layoutCache) put(show string, e *encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedMaps {
		c.m = map[string]*encoded{}
	}
	c.m[show] = e
}

// eventID is the SSE id (and ETag body) of a version of this server's engine.
func (s *Server) eventID(version uint64) string {
	return s.epoch + "." + strconv.FormatUint(version, 10)
}

// seatMapWait bounds a seat-map read over HTTP.
const seatMapWait = 1500 * time.Millisecond

// formatParam is the request's ?format= ("", "compact" or "json"); ok is false when it
// is anything else, which it has answered with a 400.
func (s *Server) formatParam(w http.ResponseWriter, r *http.Request) (format string, ok bool) {
	format = r.URL.Query().Get("format")
	if format != "" && format != "compact" && format != "json" {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "format", Rule: "must be compact or json"})
		return "", false
	}
	return format, true
}

func (s *Server) getSeats(w http.ResponseWriter, r *http.Request) {
	format, ok := s.formatParam(w, r)
	if !ok {
		return
	}
	// Bounded: a map this server has not built yet (a show it never read, a backend
	// that hangs) is a 503 with Retry-After after seatMapWait, not a request that waits
	// out an outage; the build goes on, and the retry finds it.
	ctx, cancel := context.WithTimeout(r.Context(), seatMapWait)
	m, err := s.e.SeatMap(ctx, r.PathValue("show"))
	cancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if format == "" {
		format = "json"
		if len(m.Layout) > compactAbove {
			format = "compact"
		}
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	asOf := m.AsOf
	h.Set("Holdfast-Stale", strconv.FormatBool(m.Stale))
	k := mapKey{show: m.ShowID, format: format, stale: m.Stale}
	enc := s.maps.get(k, m.Version)
	if enc == nil && format == "json" && len(m.Layout) > compactAbove {
		if e := s.maps.recent(k, perSeatEvery); e != nil {
			enc, asOf = e.encoded, e.asOf // a second old at most: as of then
		}
	}
	h.Set("Holdfast-As-Of", asOf.UTC().Format(time.RFC3339Nano))
	if enc == nil {
		var v any
		if format == "compact" {
			v = compactJSON{Show: m.ShowID, Version: s.eventID(m.Version), Format: "compact",
				Seats: len(m.States), States: compactStates(m.States), Areas: toAreaStatesJSON(m.Areas)}
		} else {
			out := seatMapJSON{Show: m.ShowID, Version: s.eventID(m.Version), Format: "json", AsOf: m.AsOf, Stale: m.Stale,
				Seats: make([]seatJSON, len(m.Layout)), Areas: toAreaStatesJSON(m.Areas)}
			for i, st := range m.Layout {
				out.Seats[i] = seatJSON{Seat: st.ID, Status: string(m.States[i])}
				if m.States[i] == engine.SeatHeld {
					out.Seats[i].ExpiresAt = &m.Expires[i]
				}
			}
			v = out
		}
		body, err := json.Marshal(v)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		enc = newEncoded(`"`+s.eventID(m.Version)+"-"+format+`"`, append(body, '\n'), true)
		s.maps.put(k, m.Version, m.AsOf, enc)
	}
	writeEncoded(w, r, enc)
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
				return true
			}
		}
	}
	return false
}

// changeJSON is one seat's change in an SSE "changes" event, as compact as the map:
// its layout index, its state character (f, h, s) and, when held, the hold's expiry
// in Unix milliseconds.
type changeJSON struct {
	Index   int    `json:"i"`
	State   string `json:"s"`
	Expires int64  `json:"x,omitempty"`
}

// getEvents streams a show's seat-map changes as Server-Sent Events.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	after, position, err := s.lastEventID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, release, ok := s.openStream(w, r)
	if !ok {
		return
	}
	defer release()
	var events <-chan engine.SeatMapEvent
	if position != 0 {
		// Its first event (changes to bring it from that position to this server's map)
		// is its own: not shared with other streams through the event cache.
		events, err = s.e.WatchSeatMapFrom(ctx, r.PathValue("show"), position)
	} else {
		events, err = s.e.WatchSeatMap(ctx, r.PathValue("show"), after)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var buf streamOut
	write := s.startStream(w, &buf)
	if !write() {
		return
	}
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			buf.WriteString(": heartbeat\n\n")
		case ev, ok := <-events:
			if !ok {
				return // the engine closed or stopped watching: the client reconnects
			}
			own := position != 0
			position = 0
			if !s.writeEvent(&buf, r.PathValue("show"), ev, !own && shareable(ev)) {
				return
			}
			// What else is waiting goes out in the same write.
		more:
			for n := 0; n < 64; n++ {
				select {
				case ev, ok := <-events:
					if !ok {
						_ = write()
						return
					}
					if !s.writeEvent(&buf, r.PathValue("show"), ev, shareable(ev)) {
						return
					}
				default:
					break more
				}
			}
		}
		if !write() {
			return
		}
	}
}

// lastEventID is where a stream resumes, from its Last-Event-ID: after a version of
// this server's map, or from a feed position. An id is "<epoch>.<version>.<position>":
// the version resumes on this server (its epoch), the feed position on any server of
// the same Redis (another replica, a restarted one); "<epoch>.<version>" (older
// servers) resumes here only. None is (0, 0).
func (s *Server) lastEventID(r *http.Request) (after, position uint64, err error) {
	ids := r.Header.Values("Last-Event-ID")
	if len(ids) > 1 {
		return 0, 0, &engine.InvalidArgumentError{Field: "Last-Event-ID", Rule: "must appear once"}
	}
	if len(ids) == 0 || ids[0] == "" {
		return 0, 0, nil
	}
	epoch, rest, ok := strings.Cut(ids[0], ".")
	v, p, hasPos := strings.Cut(rest, ".")
	n, err := strconv.ParseUint(v, 10, 64)
	var perr error
	if hasPos {
		position, perr = strconv.ParseUint(p, 10, 64)
	}
	if !ok || err != nil || perr != nil || len(epoch) != len(s.epoch) {
		return 0, 0, &engine.InvalidArgumentError{Field: "Last-Event-ID", Rule: "must be an event id this API sent: <epoch>.<version>.<position>"}
	}
	if epoch == s.epoch {
		return n, 0, nil
	}
	return 0, position, nil
}

// openStream admits an event stream under the stream limits (connects per second,
// streams per server and per address) and shrinks its send buffer; release gives its
// slot back. The stream runs until ctx ends: it ends early when a newcomer evicts it
// (see streamSlots), and its connection is then closed. When it refuses, it has
// answered.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) (ctx context.Context, release func(), ok bool) {
	if !s.streamConnects.Allow() {
		s.refusal(w, r, "stream-connects", http.StatusServiceUnavailable, "2", "too-many-streams", "Too many event streams",
			connectDetail)
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(r.Context())
	rc := http.NewResponseController(w)
	var evicted atomic.Bool
	evict := func() {
		evicted.Store(true)
		cancel()
		_ = rc.SetWriteDeadline(time.Now()) // a write waiting on a reader that does not read ends now
	}
	give, refusal, made := s.streams.take(clientAddrOf(r), s.opts.MaxStreams, s.opts.MaxStreamsPerAddress, evict)
	switch refusal {
	case "server":
		cancel()
		s.refusal(w, r, "streams", http.StatusServiceUnavailable, "5", "too-many-streams", "Too many event streams",
			fmt.Sprintf("this server has %d event streams open, its limit", s.opts.MaxStreams))
		return nil, nil, false
	case "address":
		cancel()
		s.refuse(w, r, "address-streams", fmt.Sprintf("this address has %d event streams open, its limit", s.opts.MaxStreamsPerAddress))
		return nil, nil, false
	}
	if made {
		s.refused.WithLabelValues("stream-evicted").Inc()
	}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		// A small send buffer: a client that stops reading fills it fast, the next
		// write waits, and the write deadline cuts it (instead of the kernel buffering
		// hundreds of KB per stalled reader).
		if tc := tcpConn(c); tc != nil {
			_ = tc.SetWriteBuffer(s.opts.StreamSendBuffer)
		}
	}
	return ctx, func() {
		give()
		cancel()
		if evicted.Load() {
			_ = rc.SetWriteDeadline(time.Now()) // the end of the response fails: the connection closes
		}
	}, true
}

// streamOut is what an event stream sends next, in order: text in a buffer, and
// events formatted once for every stream (eventCache) by reference. A snapshot of a
// 100,000-seat show is about 100 KB: copied into a buffer per stream, a reconnect storm
// allocated — and the collector scanned the show's whole heap for — megabytes a second.
type streamOut struct {
	buf   bytes.Buffer
	parts [][]byte // sent before buf: shared events, and the text that came before each
}

func (o *streamOut) WriteString(s string) { o.buf.WriteString(s) }
func (o *streamOut) Write(b []byte)       { o.buf.Write(b) }
func (o *streamOut) Len() int {
	n := o.buf.Len()
	for _, p := range o.parts {
		n += len(p)
	}
	return n
}

// share queues b, which other streams send too: it is not copied.
func (o *streamOut) share(b []byte) {
	if o.buf.Len() > 0 {
		o.parts = append(o.parts, bytes.Clone(o.buf.Bytes()))
		o.buf.Reset()
	}
	o.parts = append(o.parts, b)
}

// writeTo writes what o holds to w and empties it.
func (o *streamOut) writeTo(w io.Writer) error {
	parts := o.parts
	o.parts = o.parts[:0]
	defer func() {
		clear(parts) // a long-lived stream keeps no shared event alive
		o.buf.Reset()
	}()
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	_, err := w.Write(o.buf.Bytes())
	return err
}

// startStream writes an event stream's headers and returns the function that writes
// what out holds (first the reconnect delay), each write bounded by StreamWriteTimeout;
// it reports whether the client took it.
func (s *Server) startStream(w http.ResponseWriter, out *streamOut) (write func() bool) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out.WriteString("retry: 2000\n\n")
	return func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.StreamWriteTimeout))
		err := out.writeTo(w)
		return err == nil && rc.Flush() == nil
	}
}

// eventCache keeps the last events formatted (by show and version), for every other
// stream of the show: each stream gets the same events at the same versions.
type eventCache struct {
	mu      sync.Mutex
	m       map[eventKey][]byte
	order   []eventKey
	bytes   int          // of the events in m
	encodes atomic.Int64 // snapshots encoded (a reconnect storm at one version: one)
}

type eventKey struct {
	show     string
	version  uint64
	snapshot bool
}

const eventCacheSize = 512

// eventCacheBytes bounds the formatted events kept, whatever their number: a snapshot
// of a 100,000-seat show is ~100 KB.
const eventCacheBytes = 8 << 20

func (c *eventCache) get(k eventKey) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *eventCache) put(k eventKey, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[eventKey][]byte{}
	}
	if _, ok := c.m[k]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.order) >= eventCacheSize || c.bytes+len(b) > eventCacheBytes) {
		c.bytes -= len(c.m[c.order[0]])
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[k] = b
	c.bytes += len(b)
	c.order = append(c.order, k)
}

// shareable reports whether ev is the event every stream of its show gets at its
// version: a snapshot, or one batch of changes (not a lagging stream's merged ones).
func shareable(ev engine.SeatMapEvent) bool { return ev.Snapshot != nil || ev.Merged <= 1 }

// writeEvent formats one SSE event into buf, once per show and version when shared
// (an event of one stream alone, a resume's catch-up, is not).
func (s *Server) writeEvent(buf *streamOut, show string, ev engine.SeatMapEvent, shared bool) bool {
	k := eventKey{show: show, version: ev.Version, snapshot: ev.Snapshot != nil}
	if b := s.events.get(k); shared && b != nil {
		buf.share(b)
		return true
	}
	var data []byte
	var err error
	kind := "changes"
	if ev.Snapshot != nil {
		kind = "snapshot"
		s.events.encodes.Add(1)
		data, err = json.Marshal(compactJSON{Show: show, Version: s.eventID(ev.Version), Format: "compact",
			Seats: len(ev.Snapshot.States), States: compactStates(ev.Snapshot.States), Areas: toAreaStatesJSON(ev.Snapshot.Areas)})
	} else {
		cs := make([]changeJSON, len(ev.Changes))
		for i, c := range ev.Changes {
			cs[i] = changeJSON{Index: c.Index, State: string(statusChar(c.Status))}
			if c.Status == engine.SeatHeld {
				cs[i].Expires = c.ExpiresAt.UnixMilli()
			}
		}
		body := map[string]any{"version": s.eventID(ev.Version), "changes": cs}
		if len(ev.Areas) > 0 {
			body["areas"] = toAreaStatesJSON(ev.Areas)
		}
		data, err = json.Marshal(body)
	}
	if err != nil {
		return false
	}
	b := []byte("id: " + s.eventID(ev.Version) + "." + strconv.FormatUint(ev.Position, 10) + "\nevent: " + kind + "\ndata: " + string(data) + "\n\n")
	if shared {
		s.events.put(k, b)
		buf.share(b)
		return true
	}
	buf.Write(b)
	return true
}

// tcpConn finds the TCP connection under a listener's wrappers (a connection limit
// embeds the net.Conn it wraps), or nil.
func tcpConn(c net.Conn) *net.TCPConn {
	for range 4 {
		switch x := c.(type) {
		case *net.TCPConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
			continue
		}
		v := reflect.ValueOf(c)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return nil
		}
		f := v.Elem().FieldByName("Conn") // an embedded net.Conn (netutil.LimitListener's)
		if !f.IsValid() || f.Kind() != reflect.Interface || f.IsNil() {
			return nil
		}
		inner, ok := f.Interface().(net.Conn)
		if !ok {
			return nil
		}
		c = inner
	}
	return nil
}
