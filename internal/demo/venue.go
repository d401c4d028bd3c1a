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

// Arena is an arena of n seats for venue-scale runs: eight sections side by side in
// two tiers of four, each of rows of 50 seats (the last row may be shorter), ranked by
// tier, row and distance from the row's middle, with drawing coordinates.
func Arena(n int) []engine.Seat {
	const sections, perRow = 8, 50
	perSection := (n + sections - 1) / sections
	rows := (perSection + perRow - 1) / perRow
	seats := make([]engine.Seat, 0, n)
	for sec := 0; sec < sections && len(seats) < n; sec++ {
		tier, col := sec/4, sec%4
		for i := 0; i < perSection && len(seats) < n; i++ {
			row, num := i/perRow+1, i%perRow+1
			fromMiddle := num - (perRow+1)/2
			if fromMiddle < 0 {
				fromMiddle = -fromMiddle
			}
			name := string(rune('A' + sec))
			seats = append(seats, engine.Seat{
				ID:       fmt.Sprintf("%s%03d-%02d", name, row, num),
				Section:  name,
				Row:      fmt.Sprintf("%03d", row),
				Position: num,
				Rank:     tier*100_000 + row*100 + fromMiddle*4,
				X:        float64(col*(perRow*12+60) + num*12),
				Y:        float64(tier*(rows*14+60) + row*14),
			})
		}
	}
	return seats
}
