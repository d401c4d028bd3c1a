package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/oapiclient"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestGeneratedClient drives a sale with the Go client oapi-codegen generates from the
// document (internal/oapiclient, `make generate`; `make verify` fails when it drifts),
// used as generated: create a show, hold by seat ids, confirm, read the booking, be
// refused a booked seat (the declared 409, decoded), hold the best available seat,
// extend and release that hold (a confirmed one cannot be released), then hold the
// released seat again.
func TestGeneratedClient(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := oapiclient.NewClientWithResponses(a.admin.URL, oapiclient.WithRequestEditorFn(
		func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+testOperatorToken)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	show := testsvc.RandomName("oapi")
	var create oapiclient.ShowCreate
	if err := create.FromShowCreate0(oapiclient.ShowCreate0{Seats: oapiclient.SeatIDs{"A1", "A2", "A3"}}); err != nil {
		t.Fatal(err)
	}
	created, err := admin.PutShowWithResponse(ctx, show, create)
	if err != nil || created.JSON201 == nil || created.JSON201.Seats != 3 {
		t.Fatalf("put show: %v %s", err, oapiReply(created))
	}

	c, err := oapiclient.NewClientWithResponses(a.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	holder := "oapi-holder"
	seats := seatsHold(t, oapiclient.SeatIDs{"A1", "A2"})
	held, err := c.PostHoldWithResponse(ctx, show, &oapiclient.PostHoldParams{HolderId: &holder}, seats)
	if err != nil || held.JSON201 == nil {
		t.Fatalf("hold by seat ids: %v %s", err, oapiReply(held))
	}
	hj := *held.JSON201
	booked, err := c.PostBookingWithResponse(ctx, &oapiclient.PostBookingParams{HolderId: &holder}, oapiclient.HoldConfirm{
		ExpiresAt: hj.ExpiresAt, Generation: hj.Generation, Places: hj.Places, Seats: hj.Seats, Show: hj.Show, Token: hj.Token})
	if err != nil || booked.JSON201 == nil || booked.JSON201.Status != oapiclient.Confirmed {
		t.Fatalf("confirm: %v %s", err, oapiReply(booked))
	}
	got, err := c.GetBookingWithResponse(ctx, booked.JSON201.Id.String(), &oapiclient.GetBookingParams{HolderId: &holder})
	if err != nil || got.JSON200 == nil || got.JSON200.Id != booked.JSON201.Id || len(got.JSON200.Seats) != 2 {
		t.Fatalf("get booking: %v %s", err, oapiReply(got))
	}

	taken, err := c.PostHoldWithResponse(ctx, show, &oapiclient.PostHoldParams{HolderId: &holder}, seatsHold(t, oapiclient.SeatIDs{"A1"}))
	if err != nil || taken.ApplicationproblemJSON409 == nil || taken.ApplicationproblemJSON409.Type != oapiclient.UrnHoldfastProblemSeatsUnavailable {
		t.Fatalf("hold a booked seat: want the declared 409 problem, got %v %s", err, oapiReply(taken))
	}

	best := bestHold(t, 1)
	other, err := c.PostHoldWithResponse(ctx, show, &oapiclient.PostHoldParams{HolderId: &holder}, best)
	if err != nil || other.JSON201 == nil || len(other.JSON201.Seats) != 1 || other.JSON201.Seats[0] != "A3" {
		t.Fatalf("hold the best available: %v %s", err, oapiReply(other))
	}
	h := *other.JSON201
	extended, err := c.ExtendHoldWithResponse(ctx, &oapiclient.ExtendHoldParams{HolderId: &holder}, oapiclient.HoldExtend{
		Show: h.Show, Seats: h.Seats, Token: h.Token, Generation: h.Generation, TtlMs: 60_000})
	if err != nil || extended.JSON200 == nil || extended.JSON200.Token != h.Token {
		t.Fatalf("extend: %v %s", err, oapiReply(extended))
	}
	released, err := c.ReleaseHoldWithResponse(ctx, &oapiclient.ReleaseHoldParams{HolderId: &holder}, *extended.JSON200)
	if err != nil || released.StatusCode() != http.StatusNoContent {
		t.Fatalf("release: %v %s", err, oapiReply(released))
	}
	again, err := c.PostHoldWithResponse(ctx, show, &oapiclient.PostHoldParams{HolderId: &holder}, best)
	if err != nil || again.JSON201 == nil || again.JSON201.Seats[0] != "A3" {
		t.Fatalf("hold the released seat again: %v %s", err, oapiReply(again))
	}
}

// oapiReply is a generated response's status and body, for a failure message.
func oapiReply[R interface {
	StatusCode() int
	GetBody() []byte
}](r *R) string {
	if r == nil {
		return "(no response)"
	}
	return http.StatusText((*r).StatusCode()) + " " + string((*r).GetBody())
}

// seatsHold and bestHold are the two forms of a hold request.
func seatsHold(t *testing.T, seats oapiclient.SeatIDs) oapiclient.HoldRequest {
	var b oapiclient.HoldRequest
	if err := b.FromHoldSeats(oapiclient.HoldSeats{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	return b
}

func bestHold(t *testing.T, count int) oapiclient.HoldRequest {
	var b oapiclient.HoldRequest
	if err := b.FromHoldBest(oapiclient.HoldBest{Count: count}); err != nil {
		t.Fatal(err)
	}
	return b
}
