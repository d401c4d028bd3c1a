package engine

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// A confirmation of places (areas.go) is fenced per area as a seat's is per seat: its
// batch locks the areas' rows (AreasLock, after the seats' fences), its
// check in Redis (reserve.lua) finds the hold's place keys as presented and reserves
// them, and the booking's claim of the places (booking_places) adds them to the area's
// sold, which a CHECK keeps within the capacity (areas_sold_within_capacity): a
// confirmation past it is refused (errAreaFull) and changes nothing.

// errAreaFull: the database found an area without the places the hold names (Redis
// granted them from a count the database does not have: it lost data).
var errAreaFull = errors.New("an area has not the places the hold names")

// areaKey names an area of a show in a batch.
type areaKey struct{ show, area string }

// lockAreas locks the areas of batch's confirmations, in one order, waiting for a batch
// that holds one (AreasLock: the areas come after the fences, so batches never wait for
// each other in a cycle).
func (e *Engine) lockAreas(ctx context.Context, tx pgx.Tx, batch []*confirmReq) error {
	var keys []areaKey
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		for _, p := range r.c.places {
			keys = append(keys, areaKey{r.c.sh.id, p.AreaID})
		}
		if r.c.swap != nil { // the areas its booking gives places of
			for _, a := range r.c.swap.areas {
				keys = append(keys, areaKey{r.c.sh.id, a})
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b areaKey) int {
		if c := strings.Compare(a.show, b.show); c != 0 {
			return c
		}
		return strings.Compare(a.area, b.area)
	})
	keys = slices.Compact(keys)
	p := db.AreasLockParams{}
	for _, k := range keys {
		p.ShowIds, p.AreaIds = append(p.ShowIds, k.show), append(p.AreaIds, k.area)
	}
	if _, err := db.New(tx).AreasLock(ctx, p); err != nil {
		return e.txErr(err)
	}
	return nil
}

// placeParams adds r's places to its booking's row (BookingCreate).
func (r *confirmReq) placeParams(p *db.BookingCreateParams) {
	p.PlaceAreas, p.PlaceCounts, p.PlaceHolds, p.PlaceKeys = []string{}, []int32{}, []string{}, []string{}
	for _, pl := range r.c.places {
		p.PlaceAreas, p.PlaceCounts = append(p.PlaceAreas, pl.AreaID), append(p.PlaceCounts, int32(pl.Count))
		p.PlaceHolds = append(p.PlaceHolds, placeHoldID(r.c.h.Token))
		p.PlaceKeys = append(p.PlaceKeys, placeKey(pl.AreaID, pl.Count, r.c.h.Token))
	}
}

// placesMany adds booking i's places (its row p) to a batch's BookingCreateMany.
func placesMany(m *db.BookingCreateManyParams, i int, p db.BookingCreateParams) {
	if m.PlaceBookings == nil {
		m.PlaceBookings, m.PlaceAreas, m.PlaceCounts, m.PlaceHolds, m.PlaceKeys = []int64{}, []string{}, []int32{}, []string{}, []string{}
	}
	for j := range p.PlaceAreas {
		m.PlaceBookings = append(m.PlaceBookings, int64(i+1))
		m.PlaceAreas, m.PlaceCounts = append(m.PlaceAreas, p.PlaceAreas[j]), append(m.PlaceCounts, p.PlaceCounts[j])
		m.PlaceHolds, m.PlaceKeys = append(m.PlaceHolds, p.PlaceHolds[j]), append(m.PlaceKeys, p.PlaceKeys[j])
	}
}

// areaFull answers a confirmation the database refused for an area's capacity.
func (e *Engine) areaFull(ctx context.Context, c *confirmation, gen int64) (Booking, error) {
	if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
		return b, err
	}
	e.event(ctx, e.q, c.sh.id, "refused_taken", gen, c.seats, c.h.HolderID)
	areas := make([]string, len(c.places))
	for i, p := range c.places {
		areas[i] = p.AreaID
	}
	return Booking{}, &PlacesUnavailableError{ShowID: c.sh.id, AreaIDs: areas}
}
