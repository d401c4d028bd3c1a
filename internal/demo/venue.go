package demo

import (
	"fmt"

	"github.com/holdfast/holdfast/engine"
)

// rowSeats is how many seats a row of the demo venue has.
const rowSeats = 25

// Venue is the demo venue of n seats: rows of 25 seats named R01-001, R01-002, … in
// three sections — Stalls (rows 1–8), Circle (9–14) and Balcony (the rest) — with
// ranks that favour the front rows and the middle of a row, and drawing coordinates
// (the stage at the top).
func Venue(n int) []engine.Seat {
	seats := make([]engine.Seat, n)
	for i := range seats {
		row, num := i/rowSeats+1, i%rowSeats+1
		section, gap := "Stalls", 0
		switch {
		case row > 14:
			section, gap = "Balcony", 2
		case row > 8:
			section, gap = "Circle", 1
		}
		fromMiddle := num - (rowSeats+1)/2
		if fromMiddle < 0 {
			fromMiddle = -fromMiddle
		}
		seats[i] = engine.Seat{
			ID:       fmt.Sprintf("R%02d-%03d", row, num),
			Section:  section,
			Row:      fmt.Sprintf("R%02d", row),
			Position: num,
			Rank:     row*100 + fromMiddle*4,
			X:        float64(num*12 + 6),
			Y:        float64(row*14 + gap*20 + 40),
		}
	}
	return seats
}
