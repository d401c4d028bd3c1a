package httpapi

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// venueBody is a PUT /v1/shows/{show} body: seats A1 and A2 in section S and a standing
// area FLOOR of capacity places.
func venueBody(capacity int) map[string]any {
	return map[string]any{
		"layout": []map[string]any{
			{"id": "A1", "section": "S", "row": "A", "position": 1, "rank": 1, "x": 0, "y": 0},
			{"id": "A2", "section": "S", "row": "A", "position": 2, "rank": 2, "x": 1, "y": 0},
		},
		"areas": []map[string]any{{"id": "FLOOR", "section": "Floor", "capacity": capacity}},
	}
}

func places(area string, n int) []map[string]any {
	return []map[string]any{{"area": area, "count": n}}
}

// placesCount is the count of area in a hold or booking reply's "places".
func placesCount(r reply, area string) float64 {
	ps, _ := r.body["places"].([]any)
	for _, p := range ps {
		if m, _ := p.(map[string]any); m["area"] == area {
			n, _ := m["count"].(float64)
			return n
		}
	}
	return 0
}

// withBody is a hold reply's body with more members (extend's ttl_ms).
func withBody(r reply, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r.body {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// TestAreaPlacesOverHTTP: a show created with a standing area sells it by count over
// HTTP — a hold of places (with a seat, all or nothing), its refusal naming the area
// and the places left, extend, confirm, the booking, a cancellation giving them back.
func TestAreaPlacesOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	r := a.do("PUT", "/v1/shows/v1", "", "", venueBody(10))
	a.want(r, 201, "")
	if r.body["areas"] != 1.0 || r.body["seats"] != 2.0 {
		t.Fatalf("created %s", r.raw)
	}
	a.want(a.do("PUT", "/v1/shows/v1", "", "", venueBody(10)), 200, "")
	a.want(a.do("PUT", "/v1/shows/v1", "", "", venueBody(11)), 400, "invalid-argument")

	h := a.do("POST", "/v1/shows/v1/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 6)})
	a.want(h, 201, "")
	if placesCount(h, "FLOOR") != 6 {
		t.Fatalf("hold %s, want 6 places of FLOOR", h.raw)
	}
	// 5 more do not fit: the refusal names FLOOR with its 4 places left, and A2 (asked
	// with them) is not held.
	r = a.do("POST", "/v1/shows/v1/holds", "bob", "", map[string]any{"seats": []string{"A2"}, "places": places("FLOOR", 5)})
	a.want(r, 409, "places-unavailable")
	ps, _ := r.body["places"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["area"] != "FLOOR" || ps[0].(map[string]any)["left"] != 4.0 {
		t.Fatalf("refusal %s, want FLOOR with 4 left", r.raw)
	}
	a.want(a.do("POST", "/v1/shows/v1/holds", "carol", "", map[string]any{"seats": []string{"A2"}}), 201, "")

	ext := a.do("POST", "/v1/holds/extend", "alice", "", withBody(h, map[string]any{"ttl_ms": 60000}))
	a.want(ext, 200, "")
	if placesCount(ext, "FLOOR") != 6 {
		t.Fatalf("extended hold %s, want its 6 places", ext.raw)
	}
	b := a.do("POST", "/v1/bookings", "alice", "", ext.body)
	a.want(b, 201, "")
	if placesCount(b, "FLOOR") != 6 {
		t.Fatalf("booking %s, want 6 places of FLOOR", b.raw)
	}
	got := a.do("GET", "/v1/bookings/"+b.body["id"].(string), "alice", "", nil)
	a.want(got, 200, "")
	if placesCount(got, "FLOOR") != 6 {
		t.Fatalf("booking read back %s, want 6 places of FLOOR", got.raw)
	}
	// Places only, no seat: the 4 left, then none.
	four := a.do("POST", "/v1/shows/v1/holds", "dave", "", map[string]any{"places": places("FLOOR", 4)})
	a.want(four, 201, "")
	if s, _ := four.body["seats"].([]any); s == nil || len(s) != 0 {
		t.Fatalf("places-only hold %s, want seats []", four.raw)
	}
	a.want(a.do("POST", "/v1/shows/v1/holds", "erin", "", map[string]any{"places": places("FLOOR", 1)}), 409, "places-unavailable")
	a.want(a.do("POST", "/v1/holds/release", "dave", "", four.body), 204, "")
	// The cancellation gives alice's 6 back: 4 released + 6 = 10 free.
	a.want(a.do("DELETE", "/v1/bookings/"+b.body["id"].(string), "alice", "", nil), 200, "")
	a.want(a.do("POST", "/v1/shows/v1/holds", "erin", "", map[string]any{"places": places("FLOOR", 10)}), 201, "")
}

// TestAreaBadInputOverHTTP: each bad area or places request is a 400 naming its member,
// and changes nothing (no show, no hold).
func TestAreaBadInputOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	bad := []map[string]any{
		{"areas": []map[string]any{{"id": "FLOOR", "section": "F", "capacity": 0}}},
		{"areas": []map[string]any{{"id": "FLOOR", "section": "F", "capacity": 1_000_001}}},
		{"areas": []map[string]any{{"id": "F", "section": "F", "capacity": 5}, {"id": "F", "section": "F", "capacity": 5}}},
		{"areas": []map[string]any{{"id": "A1", "section": "F", "capacity": 5}}, "layout": venueBody(1)["layout"]},
		{"areas": []map[string]any{{"id": "FLOOR", "section": "F", "capacity": 5}}, "seats": []string{"A1"}},
	}
	for i, body := range bad {
		r := a.do("PUT", fmt.Sprintf("/v1/shows/bad%d", i), "", "", body)
		a.want(r, 400, "invalid-argument")
		if f := r.body["field"]; f != "areas" && f != "seats" {
			t.Errorf("body %d: field %v, want areas or seats (%s)", i, f, r.raw)
		}
		a.want(a.do("GET", fmt.Sprintf("/v1/shows/bad%d/layout", i), "", "", nil), 404, "not-found")
	}
	a.want(a.do("PUT", "/v1/shows/v1", "", "", venueBody(3)), 201, "")
	for _, ps := range [][]map[string]any{places("FLOOR", 0), places("FLOOR", -1), places("FLOOR", 1_000_001),
		{{"area": "FLOOR", "count": 1}, {"area": "FLOOR", "count": 1}}} {
		r := a.do("POST", "/v1/shows/v1/holds", "alice", "", map[string]any{"places": ps})
		a.want(r, 400, "invalid-argument")
		if r.body["field"] != "places" {
			t.Errorf("places %v: field %v, want places", ps, r.body["field"])
		}
	}
	nope := a.do("POST", "/v1/shows/v1/holds", "alice", "", map[string]any{"places": places("NOPE", 1)})
	a.want(nope, 404, "not-found")
	if !strings.Contains(nope.raw, `area \"NOPE\"`) || strings.Contains(nope.raw, "~") {
		t.Fatalf("an unknown area names the area, not a hold's place key: %s", nope.raw)
	}
	a.want(a.do("POST", "/v1/shows/v1/holds", "alice", "", map[string]any{"places": places("FLOOR", 1), "count": 1}), 400, "invalid-argument")
	// Nothing was held: all 3 places are free.
	a.want(a.do("POST", "/v1/shows/v1/holds", "bob", "", map[string]any{"places": places("FLOOR", 3)}), 201, "")
}

// TestAreaManyBuyersOverHTTP: 60 buyers at once, each holding and confirming 1 or 2
// places of a 40-place area over HTTP: every place sold at most once, the bookings'
// places add up to what was sold, and every refusal is places-unavailable.
func TestAreaManyBuyersOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/v1", "", "", venueBody(40)), 201, "")
	const n = 60
	var mu sync.Mutex
	booked, refused := 0, 0
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			holder := fmt.Sprintf("b%d", i)
			// A 503 (the shared machine's load) is asked again: it held nothing.
			h := retry503(func() reply {
				return a.do("POST", "/v1/shows/v1/holds", holder, "", map[string]any{"places": places("FLOOR", 1+i%2)})
			})
			if h.status == 409 && h.body["type"] == problemPrefix+"places-unavailable" {
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			if h.status != 201 {
				t.Errorf("hold: %d %s", h.status, h.raw)
				return
			}
			// A 503 may have booked: the same idempotency key asks again and learns which.
			b := retry503(func() reply { return a.do("POST", "/v1/bookings", holder, "k-"+holder, h.body) })
			if b.status == 200 {
				b.status = 201 // a replay of the first call's booking
			}
			if b.status != 201 {
				t.Errorf("confirm: %d %s", b.status, b.raw)
				return
			}
			mu.Lock()
			booked += int(placesCount(b, "FLOOR"))
			mu.Unlock()
		})
	}
	wg.Wait()
	var sold, claimed int
	if err := a.pool.QueryRow(t.Context(), `SELECT a.sold, (SELECT coalesce(sum(places), 0) FROM booking_places p
		WHERE p.show_id = a.show_id AND p.area_id = a.area_id AND p.claimed) FROM areas a
		WHERE a.show_id = 'v1' AND a.area_id = 'FLOOR'`).Scan(&sold, &claimed); err != nil {
		t.Fatal(err)
	}
	if sold > 40 || sold != claimed || sold != booked || refused == 0 {
		t.Fatalf("sold %d (areas.sold), %d claimed, %d in the booking replies, %d refused; want at most 40, all equal, some refused",
			sold, claimed, booked, refused)
	}
	t.Logf("%d places sold to %d buyers, %d refused", sold, n-refused, refused)
}

// retry503 makes a request again while it answers 503, up to 5 times.
func retry503(do func() reply) reply {
	r := do()
	for i := 0; i < 5 && r.status == 503; i++ {
		time.Sleep(100 * time.Millisecond)
		r = do()
	}
	return r
}

// TestShowOfAreasOnlyOverHTTP: docs/HTTP.md offers "standing areas with or
// without a layout"; a PUT with areas and no layout must create a show that sells places.
func TestShowOfAreasOnlyOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	r := a.do("PUT", "/v1/shows/ga", "", "", map[string]any{"areas": []map[string]any{{"id": "FLOOR", "section": "Floor", "capacity": 10}}})
	t.Logf("PUT areas only: %d %s", r.status, r.raw)
	h := a.do("POST", "/v1/shows/ga/holds", "alice", "", map[string]any{"places": []map[string]any{{"area": "FLOOR", "count": 2}}})
	t.Logf("hold places: %d %s", h.status, h.raw)
	if r.status != 201 || h.status != 201 {
		t.Fatalf("a show of standing areas only: PUT %d, hold %d", r.status, h.status)
	}
	a.want(a.do("POST", "/v1/shows/ga/holds", "bob", "", map[string]any{"count": 1}), 404, "not-found")
	b := a.do("POST", "/v1/bookings", "alice", "", h.body)
	a.want(b, 201, "")
	a.want(a.do("GET", "/v1/shows/ga/seats", "", "", nil), 200, "")
	a.want(a.do("GET", "/v1/shows/ga/layout", "", "", nil), 200, "")
	a.want(a.do("POST", "/v1/shows/ga/resync", "", "", nil), 200, "")
}

// TestAreasOnTheSeatMapOverHTTP: GET …/seats (both forms) and the event stream carry
// each area's places free, held and sold: the stream's first event has them, and a hold
// and a confirmation of places come as "areas" in a changes event.
func TestAreasOnTheSeatMapOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/am", "", "", venueBody(50)), 201, "")
	st, _ := a.openEvents("am", "")
	first := st.next(5 * time.Second)
	if first.event != "snapshot" || fmt.Sprint(first.data["areas"]) != "[map[capacity:50 free:50 held:0 id:FLOOR sold:0]]" {
		t.Fatalf("first event: %+v", first)
	}
	h := a.do("POST", "/v1/shows/am/holds", "alice", "", map[string]any{"places": places("FLOOR", 7)})
	a.want(h, 201, "")
	a.want(a.do("POST", "/v1/bookings", "alice", "", map[string]any{"show": "am", "seats": []string{}, "token": h.body["token"],
		"generation": h.body["generation"], "places": h.body["places"], "only_places": places("FLOOR", 5)}), 201, "")
	// areaOf is FLOOR as the stream's events bring it, once it reads want.
	want := "[map[capacity:50 free:45 held:0 id:FLOOR sold:5]]"
	for seen := ""; seen != want; {
		ev := st.next(5 * time.Second)
		if ev.event == "changes" && ev.data["areas"] != nil {
			seen = fmt.Sprint(ev.data["areas"])
		}
	}
	for _, format := range []string{"json", "compact"} {
		r := a.do("GET", "/v1/shows/am/seats?format="+format, "", "", nil)
		a.want(r, 200, "")
		if got := fmt.Sprint(r.body["areas"]); got != want {
			t.Fatalf("GET seats?format=%s: areas %s, want %s", format, got, want)
		}
	}
}
