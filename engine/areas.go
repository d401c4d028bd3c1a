package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Area is general admission: a capacity sold by count, not by seat. Its id shares the
// show's namespace with the seat ids (no seat of the show has an area's id).
type Area struct {
	ID, Section string
	Capacity    int    // places; 1 … 1,000,000
	Category    string // optional, as a seat's
}

// Venue is a show's inventory: its seats (with their layout) and its areas.
type Venue struct {
	Seats []Seat
	Areas []Area
}

// Places is a number of places of one area, in a hold or a booking.
type Places struct {
	AreaID string
	Count  int
}

// maxAreaCapacity bounds an area's places (and a hold's count of one area).
const maxAreaCapacity = 1_000_000

// maxAreasPerShow bounds a show's areas.
const maxAreasPerShow = 1000

// areaBucketBase numbers the marker hashes of areas (<base>sold:<areaBucketBase+i> for
// the i-th area in id order) apart from the seats' buckets.
const areaBucketBase = 1_000_000_000

// A hold's places of one area are, in Redis, one place key "<area>~<count>~<hold id>":
// a hold key like a seat's (the same value, the same expiry, reserved and given back as
// a seat's is) and a marker in its area's marker hash once booked. The hold id is
// derived from the token, so that a presented hold names its place keys and a changed
// count names keys that are not its own (ErrHoldLost). See internal/lua/common.lua.
func placeKey(area string, count int, token string) string {
	return area + "~" + strconv.Itoa(count) + "~" + placeHoldID(token)
}

// placeHoldID is a hold's id in its place keys: 16 hex digits of SHA-256 over the token
// (booking_places.hold_id), which does not reveal the token.
func placeHoldID(token string) string {
	sum := sha256.Sum256([]byte("holdfast place\x00" + token))
	return hex.EncodeToString(sum[:8])
}

// parsePlaceKey splits a place key; ok is false for a seat id.
func parsePlaceKey(s string) (area string, count int, holdID string, ok bool) {
	parts := strings.Split(s, "~")
	if len(parts) != 3 {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 1 {
		return "", 0, "", false
	}
	return parts[0], n, parts[2], true
}

// isPlaceKey reports whether a script's seat argument is a place key.
func isPlaceKey(s string) bool { return strings.Contains(s, "~") }

// fencedSeats is the seats of a script's seat arguments, without the place keys: what
// the database fences and claims seat by seat.
func fencedSeats(all []string) []string {
	return slices.DeleteFunc(slices.Clone(all), isPlaceKey)
}

// validAreas checks a venue's areas against its seats and returns them in id order.
func validAreas(areas []Area, seats []Seat) ([]Area, error) {
	if len(areas) > maxAreasPerShow {
		return nil, invalid("Venue.Areas", "%d areas, at most %d", len(areas), maxAreasPerShow)
	}
	seatIDs := make(map[string]bool, len(seats))
	for _, s := range seats {
		seatIDs[s.ID] = true
	}
	out := slices.Clone(areas)
	slices.SortFunc(out, func(a, b Area) int { return strings.Compare(a.ID, b.ID) })
	for i, a := range out {
		switch {
		case !validID(a.ID):
			return nil, invalid("Venue.Areas", "area %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", a.ID)
		case i > 0 && out[i-1].ID == a.ID:
			return nil, invalid("Venue.Areas", "area %q appears twice", a.ID)
		case seatIDs[a.ID]:
			return nil, invalid("Venue.Areas", "area %q is also a seat id", a.ID)
		case !validLabel(a.Section):
			return nil, invalid("Venue.Areas", "area %q: section %q is not a valid label", a.ID, a.Section)
		case a.Capacity < 1 || a.Capacity > maxAreaCapacity:
			return nil, invalid("Venue.Areas", "area %q: capacity %d, must be from 1 to %d", a.ID, a.Capacity, maxAreaCapacity)
		case !validLabel(a.Category):
			return nil, invalid("Venue.Areas", "area %q: category %q must be empty or match ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$", a.ID, a.Category)
		}
	}
	return out, nil
}

// validPlaces checks a request's places (an area at most once, each count from 1) and
// returns them in area order with their total.
func validPlaces(field string, places []Places) ([]Places, int, error) {
	out := slices.Clone(places)
	slices.SortFunc(out, func(a, b Places) int { return strings.Compare(a.AreaID, b.AreaID) })
	total := 0
	for i, p := range out {
		switch {
		case !validID(p.AreaID):
			return nil, 0, invalid(field, "area %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", p.AreaID)
		case i > 0 && out[i-1].AreaID == p.AreaID:
			return nil, 0, invalid(field, "area %q appears twice", p.AreaID)
		case p.Count < 1 || p.Count > maxAreaCapacity:
			return nil, 0, invalid(field, "area %q: count %d, must be from 1 to %d", p.AreaID, p.Count, maxAreaCapacity)
		}
		total += p.Count
	}
	return out, total, nil
}

// holdInventory checks what a hold names: its seats (sorted; none is fine when it names
// places) and its places (in area order).
func holdInventory(field string, seatIDs []string, places []Places, max int) ([]string, []Places, error) {
	ps, _, err := validPlaces(field+".Places", places)
	if err != nil {
		return nil, nil, err
	}
	if len(seatIDs) == 0 && len(ps) > 0 {
		return nil, ps, nil
	}
	seats, err := sortedSeatIDs(field+".SeatIDs", seatIDs, max)
	if err != nil {
		return nil, nil, err
	}
	return seats, ps, nil
}

// withPlaces is a hold's script seat arguments: its seats, then one place key per area.
func withPlaces(seats []string, places []Places, token string) []string {
	all := slices.Clip(slices.Clone(seats))
	for _, p := range places {
		all = append(all, placeKey(p.AreaID, p.Count, token))
	}
	return all
}

// placesOf is the places a hold's script seat arguments name.
func placesOf(all []string) []Places {
	var out []Places
	for _, s := range all {
		if a, n, _, ok := parsePlaceKey(s); ok {
			out = append(out, Places{AreaID: a, Count: n})
		}
	}
	return out
}

// setAreas gives the show's copy its areas (in id order).
func (sh *show) setAreas(areas []Area) {
	sh.areas = areas
	sh.areaIndex = make(map[string]int, len(areas))
	for i, a := range areas {
		sh.areaIndex[a.ID] = i
	}
}

// placeKeys are a place key's hold key and marker hash, ok false when it is not a place
// key of one of the show's areas.
func (sh *show) placeKeys(s string) (hold, sold string, ok bool) {
	a, _, _, isPlace := parsePlaceKey(s)
	if !isPlace {
		return "", "", false
	}
	i, known := sh.areaIndex[a]
	if !known {
		return "", "", false
	}
	return sh.k.hold(s), sh.k.sold(areaBucketBase + i), true
}

// PlacesUnavailableError is the refusal of a hold whose areas have fewer places free
// than it asks for (nothing changed). It matches [ErrSeatsUnavailable].
type PlacesUnavailableError struct {
	ShowID  string
	AreaIDs []string
	// Left is, for a refused hold, the places each area (in AreaIDs' order) had free
	// when the hold was refused; nil for a refused confirmation (the area was sold out
	// under the hold).
	Left []int
}

func (e *PlacesUnavailableError) Error() string {
	if e.Left == nil {
		return fmt.Sprintf("engine: not enough places free in show %s: %s", e.ShowID, strings.Join(e.AreaIDs, ", "))
	}
	free := make([]string, len(e.AreaIDs))
	for i, a := range e.AreaIDs {
		free[i] = fmt.Sprintf("%s (%d free)", a, e.Left[i])
	}
	return fmt.Sprintf("engine: not enough places free in show %s: %s", e.ShowID, strings.Join(free, ", "))
}

// Is reports whether target is [ErrSeatsUnavailable].
func (e *PlacesUnavailableError) Is(target error) bool { return target == ErrSeatsUnavailable }

// unavailableIn is the refusal of a hold whose script answered TAKEN with these seats
// and place keys (each place key followed by its area's places free): the seats taken,
// else the areas short of places.
func unavailableIn(showID string, taken []any) error {
	var seats []string
	short := &PlacesUnavailableError{ShowID: showID, Left: []int{}}
	for i, v := range taken {
		s, _ := v.(string)
		if a, _, _, ok := parsePlaceKey(s); ok {
			free, _ := taken[min(i+1, len(taken)-1)].(int64)
			short.AreaIDs, short.Left = append(short.AreaIDs, a), append(short.Left, int(free))
		} else if s != "" {
			seats = append(seats, s)
		}
	}
	if len(seats) > 0 {
		return &SeatsUnavailableError{ShowID: showID, SeatIDs: seats}
	}
	return short
}

// CreateShowVenue creates a show with its seats and areas. CreateShowLayout(s) is
// CreateShowVenue(Venue{Seats: s}). Creating a show that exists with the same venue does
// nothing; with another it is ErrInvalidArgument (a show's inventory is fixed).
func (e *Engine) CreateShowVenue(ctx context.Context, showID string, v Venue) error {
	_, err := e.EnsureShowVenue(ctx, showID, v)
	return err
}

// EnsureShowVenue is CreateShowVenue that also reports whether it created the show.
func (e *Engine) EnsureShowVenue(ctx context.Context, showID string, v Venue) (created bool, err error) {
	if len(v.Areas) == 0 {
		return e.EnsureShowLayout(ctx, showID, v.Seats)
	}
	if err := validateID("showID", showID); err != nil {
		return false, err
	}
	seats := v.Seats
	if len(seats) > 0 {
		if seats, err = validLayout("Venue.Seats", seats, e.cfg.MaxSeatsPerShow); err != nil {
			return false, err
		}
	}
	areas, err := validAreas(v.Areas, seats)
	if err != nil {
		return false, err
	}
	return e.ensureShow(ctx, showID, seats, areas)
}

// insertAreas adds a new show's areas in its creating transaction.
func insertAreas(ctx context.Context, q *db.Queries, showID string, areas []Area) error {
	if len(areas) == 0 {
		return nil
	}
	p := db.AreasInsertParams{ShowID: showID}
	for _, a := range areas {
		p.AreaIds, p.Sections, p.Capacities = append(p.AreaIds, a.ID), append(p.Sections, a.Section), append(p.Capacities, int32(a.Capacity))
		p.Categories = append(p.Categories, a.Category)
	}
	return q.AreasInsert(ctx, p)
}

// areasFromRows is a show's areas as the database has them, in id order.
func areasFromRows(rows []db.AreaListByShowRow) []Area {
	out := make([]Area, len(rows))
	for i, r := range rows {
		out[i] = Area{ID: r.AreaID, Section: r.Section, Capacity: int(r.Capacity), Category: r.Category}
	}
	return out
}

// pushAreas gives Redis the show's areas (areas.lua) and the place markers the database
// says (sold, or free again after a cancellation), for a rebuild: like the seats'
// markers they only move forward. The areas are written only while Redis has the copy's
// show's rules: a copy of a show deleted and created again since is found replaced
// (*showChanged) and writes nothing of its areas.
func (e *Engine) pushAreas(ctx context.Context, sh *show) error {
	if len(sh.areas) == 0 {
		return nil
	}
	args := make([]any, 0, 1+2*len(sh.areas))
	args = append(args, sh.epoch)
	for _, a := range sh.areas {
		args = append(args, a.ID, a.Capacity)
	}
	res, err := lua.Areas.Run(ctx, e.scripts, []string{sh.k.gen()}, args...).Slice()
	if err != nil {
		return e.redisErr(err)
	}
	switch status, _ := res[0].(string); status {
	case "OK":
	case "STALE", "CLOSED":
		return e.metChange(ctx, sh, status)
	case "NORULES":
		return fmt.Errorf("%w: redis lost the rules of show %s while its areas were written", ErrUnavailable, sh.id)
	default:
		return fmt.Errorf("%w: unexpected areas script reply %v", ErrUnavailable, res)
	}
	rows, err := e.q.PlaceMarkListByShow(ctx, sh.id)
	if err != nil {
		return e.pgErr(err)
	}
	keys, marks := make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.AreaID + "~" + strconv.Itoa(int(r.Places)) + "~" + r.HoldID
		marks[i] = marker(r.Generation, r.Claimed)
	}
	for lo := 0; lo < len(keys); lo += markChunk {
		hi := min(lo+markChunk, len(keys))
		if _, _, err := e.writeMarkers(ctx, sh, keys[lo:hi], marks[lo:hi], "-"); err != nil {
			return err
		}
	}
	return nil
}

// sameAreas refuses an existing show whose areas are not these (a show's inventory is
// fixed).
func sameAreas(ctx context.Context, q *db.Queries, showID string, areas []Area) error {
	rows, err := q.AreaListByShow(ctx, showID)
	if err != nil {
		return err
	}
	if have := areasFromRows(rows); !slices.Equal(have, areas) && (len(have) > 0 || len(areas) > 0) {
		return invalid("areas", "show %q exists with other areas (%d); a show's inventory is fixed", showID, len(have))
	}
	return nil
}

// loadAreas reads a show's areas and its identity (from its seats' rows when it has
// seats).
func (e *Engine) loadAreas(ctx context.Context, showID string, seats []db.SeatLayoutListByShowRow) ([]Area, int64, error) {
	rows, err := e.q.AreaListByShow(ctx, showID)
	if err != nil {
		return nil, 0, unavailable("postgres", err)
	}
	if len(seats) > 0 {
		return areasFromRows(rows), seats[0].Epoch, nil
	}
	if len(rows) == 0 {
		return nil, 0, nil
	}
	epoch, err := e.q.ShowEpochGet(ctx, showID)
	if err != nil {
		return nil, 0, unavailable("postgres", err)
	}
	return areasFromRows(rows), epoch, nil
}

// markedKey reports whether s is a key a sold marker of the show may name: one of its
// seats, or a place key of one of its areas.
func (sh *show) markedKey(s string) bool {
	if _, ok := sh.soldKeys[s]; ok {
		return true
	}
	_, _, ok := sh.placeKeys(s)
	return ok
}
