package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// rulesJSON is a show's sale rules on the wire.
type rulesJSON struct {
	Show        string           `json:"show,omitempty"`
	HolderLimit int              `json:"holder_limit"`
	Queue       *waitingRoomJSON `json:"queue"`
}

type waitingRoomJSON struct {
	OpensAt        *time.Time `json:"opens_at"`
	AdmitPerSecond float64    `json:"admit_per_second"`
	AdmissionTTLms int64      `json:"admission_ttl_ms"`
}

// ticketJSON is a holder's place in a waiting room on the wire.
type ticketJSON struct {
	Show            string     `json:"show"`
	Position        int64      `json:"position"`
	Admitted        bool       `json:"admitted"`
	AdmittedUntil   *time.Time `json:"admitted_until"`
	Opened          bool       `json:"opened"`
	SoldOut         bool       `json:"sold_out"`
	Waiting         int64      `json:"waiting"`
	AdmittedTotal   int64      `json:"admitted_total"`
	AdmitRate       float64    `json:"admit_rate"`
	EstimatedWaitMs int64      `json:"estimated_wait_ms"`
}

// queueJSON is a waiting room as a whole, as its event stream sends it.
type queueJSON struct {
	Show          string  `json:"show"`
	Opened        bool    `json:"opened"`
	SoldOut       bool    `json:"sold_out"`
	Waiting       int64   `json:"waiting"`
	AdmittedTotal int64   `json:"admitted_total"`
	AdmitRate     float64 `json:"admit_rate"`
}

func toRulesJSON(show string, r engine.SaleRules) rulesJSON {
	j := rulesJSON{Show: show, HolderLimit: r.HolderLimit}
	if q := r.Queue; q != nil {
		at := q.OpensAt.UTC()
		j.Queue = &waitingRoomJSON{OpensAt: &at, AdmitPerSecond: q.AdmitPerSecond, AdmissionTTLms: q.AdmissionTTL.Milliseconds()}
	}
	return j
}

func toTicketJSON(t engine.Ticket) ticketJSON {
	j := ticketJSON{Show: t.ShowID, Position: t.Position, Admitted: t.Admitted, Opened: t.Opened, SoldOut: t.SoldOut,
		Waiting: t.Waiting, AdmittedTotal: t.AdmittedTotal, AdmitRate: t.AdmitRate, EstimatedWaitMs: t.EstimatedWait.Milliseconds()}
	if t.Admitted {
		u := t.AdmittedUntil.UTC()
		j.AdmittedUntil = &u
	}
	return j
}

// putRules sets a show's sale rules (operator): {"holder_limit": 4, "queue": {"opens_at":
// "…", "admit_per_second": 50, "admission_ttl_ms": 600000}}; "queue": null or left out
// turns the waiting room off.
func (s *Server) putRules(w http.ResponseWriter, r *http.Request) {
	var body rulesJSON
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if body.Show != "" && body.Show != r.PathValue("show") {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "show", Rule: "differs from the show in the path; leave it out"})
		return
	}
	rules := engine.SaleRules{HolderLimit: body.HolderLimit}
	if q := body.Queue; q != nil {
		if q.OpensAt == nil {
			s.fail(w, r, &engine.InvalidArgumentError{Field: "queue.opens_at", Rule: "required: when the waiting room opens (RFC 3339)"})
			return
		}
		if q.AdmissionTTLms < 0 || q.AdmissionTTLms > int64(24*time.Hour/time.Millisecond) {
			s.fail(w, r, &engine.InvalidArgumentError{Field: "queue.admission_ttl_ms", Rule: fmt.Sprintf("%d is out of range [1000, 86400000] (0: the default, 10 minutes)", q.AdmissionTTLms)})
			return
		}
		rules.Queue = &engine.WaitingRoom{OpensAt: *q.OpensAt, AdmitPerSecond: q.AdmitPerSecond,
			AdmissionTTL: time.Duration(q.AdmissionTTLms) * time.Millisecond}
	}
	if err := s.e.SetSaleRules(r.Context(), r.PathValue("show"), rules); err != nil {
		s.fail(w, r, err)
		return
	}
	s.getRules(w, r)
}

// getRules serves a show's sale rules.
func (s *Server) getRules(w http.ResponseWriter, r *http.Request) {
	rules, err := s.e.SaleRules(r.Context(), r.PathValue("show"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, toRulesJSON(r.PathValue("show"), rules))
}

// postQueue puts the holder in the show's waiting room (again: the same place).
func (s *Server) postQueue(w http.ResponseWriter, r *http.Request, holder string) {
	t, err := s.e.Join(r.Context(), r.PathValue("show"), holder)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toTicketJSON(t))
}

// getQueue serves the holder's ticket: 404 if they are not in the room (never joined,
// their admission ran out, or the room was lost with Redis): join again.
func (s *Server) getQueue(w http.ResponseWriter, r *http.Request, holder string) {
	t, err := s.e.Ticket(r.Context(), r.PathValue("show"), holder)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, toTicketJSON(t))
}

// queueEventEvery is how often a waiting room's event stream looks for a change.
const queueEventEvery = time.Second

// getQueueEvents streams a show's waiting room as a whole: an event "queue" with
// queueJSON whenever it changed (at most once a second). A holder's position is the one
// their ticket gave minus the admissions since (admitted_total then and now): no one
// gets ahead of a waiting holder. One stream per show serves every holder.
func (s *Server) getQueueEvents(w http.ResponseWriter, r *http.Request) {
	show := r.PathValue("show")
	q, err := s.e.Queue(r.Context(), show)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.pollStream(w, r, queueEventEvery, func(ctx context.Context, first bool) (string, any, bool) {
		if !first {
			if q, err = s.e.Queue(ctx, show); errors.Is(err, engine.ErrNotFound) {
				return "", nil, false // the room was turned off: the page reloads the rules
			} else if err != nil {
				return "", nil, true // Redis is away for a moment: keep the stream, send the next change
			}
		}
		return "queue", queueJSON{Show: show, Opened: q.Opened, SoldOut: q.SoldOut, Waiting: q.Waiting, AdmittedTotal: q.AdmittedTotal, AdmitRate: q.AdmitRate}, true
	})
}

// pollStream serves an event stream of what read says, polled every period: the event
// read names, with read's value as JSON, whenever the value changed (and on the first
// call, first), a heartbeat comment between, until read says there is no more (after
// sending what it returned with that) or the client leaves. A nil value sends nothing.
func (s *Server) pollStream(w http.ResponseWriter, r *http.Request, period time.Duration, read func(ctx context.Context, first bool) (event string, v any, more bool)) {
	ctx, release, ok := s.openStream(w, r)
	if !ok {
		return
	}
	defer release()
	var buf streamOut
	write := s.startStream(w, &buf)
	tick := time.NewTicker(period)
	defer tick.Stop()
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	var last []byte
	for first := true; ; first = false {
		event, v, more := read(ctx, first)
		if data, _ := json.Marshal(v); v != nil && (first || !bytes.Equal(data, last)) {
			buf.WriteString("event: " + event + "\ndata: ")
			buf.Write(data)
			buf.WriteString("\n\n")
			last = data
		}
		if buf.Len() > 0 && !write() || !more {
			return
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-beat.C:
				buf.WriteString(": heartbeat\n\n")
				if !write() {
					return
				}
			case <-tick.C:
				waiting = false
			}
		}
	}
}
