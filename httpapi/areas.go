package httpapi

import (
	"errors"
	"net/http"

	"github.com/holdfast/holdfast/engine"
)

// areaJSON is a standing area of a show on the wire: a capacity sold by count.
type areaJSON struct {
	ID       string `json:"id"`
	Section  string `json:"section"`
	Capacity int    `json:"capacity"`
	Category string `json:"category,omitempty"`
}

// placesJSON is a number of places of one area, in a hold request, a hold or a booking.
type placesJSON struct {
	Area  string `json:"area"`
	Count int    `json:"count"`
}

// placesLeftJSON is an area a hold asked too many places of, with the places it had
// free then (places-unavailable).
type placesLeftJSON struct {
	Area string `json:"area"`
	Left *int   `json:"left,omitempty"`
}

func toPlacesJSON(ps []engine.Places) []placesJSON {
	if len(ps) == 0 {
		return nil
	}
	out := make([]placesJSON, len(ps))
	for i, p := range ps {
		out[i] = placesJSON{Area: p.AreaID, Count: p.Count}
	}
	return out
}

func fromPlacesJSON(ps []placesJSON) []engine.Places {
	if len(ps) == 0 {
		return nil
	}
	out := make([]engine.Places, len(ps))
	for i, p := range ps {
		out[i] = engine.Places{AreaID: p.Area, Count: p.Count}
	}
	return out
}

// placesTotal is the places a request asks for, for the per-address cap (a place counts
// as a seat). A count out of range counts as none: the engine refuses it as an invalid
// argument, not the cap.
func placesTotal(ps []placesJSON) int {
	n := 0
	for _, p := range ps {
		if p.Count >= 1 && p.Count <= maxPlaces {
			n += p.Count
		}
	}
	return n
}

// maxPlaces is an area's largest capacity, and so the most places of one area a hold
// may ask for.
const maxPlaces = 1_000_000

// ensureVenue creates a show with areas: its seats from "layout" (or none) and its
// areas. Seat ids alone ("seats") have no sections to lay areas out beside.
func (s *Server) ensureVenue(r *http.Request, seatIDs []string, layout []engine.Seat, areas []areaJSON) (bool, error) {
	if seatIDs != nil {
		return false, &engine.InvalidArgumentError{Field: "seats", Rule: `a show with "areas" takes its seats as "layout" (seats with their places), not "seats"`}
	}
	v := engine.Venue{Seats: layout, Areas: make([]engine.Area, len(areas))}
	for i, a := range areas {
		v.Areas[i] = engine.Area{ID: a.ID, Section: a.Section, Capacity: a.Capacity, Category: a.Category}
	}
	return s.e.EnsureShowVenue(r.Context(), r.PathValue("show"), v)
}

// placesProblem fills a places-unavailable problem: the areas short of places and, for a
// refused hold, how many each had left.
func placesProblem(p *problemJSON, err error) {
	var pue *engine.PlacesUnavailableError
	if !errors.As(err, &pue) {
		return
	}
	p.Places = make([]placesLeftJSON, len(pue.AreaIDs))
	for i, a := range pue.AreaIDs {
		p.Places[i].Area = a
		if pue.Left != nil {
			left := pue.Left[i]
			p.Places[i].Left = &left
		}
	}
}

// nonNil is a hold's or a booking's seats on the wire: [] rather than null when it has
// only places.
func nonNil(seats []string) []string {
	if seats == nil {
		return []string{}
	}
	return seats
}
