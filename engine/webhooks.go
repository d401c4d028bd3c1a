package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/holdfast/holdfast/db"
)

// Webhooks. DeliverWebhooks posts every event of the feed to one URL, per the Standard
// Webhooks spec (https://www.standardwebhooks.com): the body is
// {"type":<webhookType>,"timestamp":…,"data":<the event>}, the webhook-id header is
// the event's ID (a retry has the same), webhook-timestamp the attempt's time and
// webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>" under the whsec_
// secret. Events go one at a time in feed order, each retried with backoff until the
// endpoint answers 2xx, so a show's events arrive in its order. The cursor of the last
// acknowledged event is kept in PostgreSQL (webhook_deliveries), so a restart resumes
// there: delivery is at least once (an answer lost before the cursor moved means a
// second delivery, under the same webhook-id).
//
// However many engines run it, one delivers: it holds a lease on the endpoint's row
// (WebhookLease), renewed while it works. An engine delivers only while its own clock
// says the lease runs — measured from before it asked, for a fraction of its length —
// and each attempt ends before that, so the next holder, which takes the lease only
// once the database's clock says it ran out, never delivers while the last one still
// does. A cursor moves only under its holder's running lease (WebhookAdvance).

// WebhookConfig says where and how DeliverWebhooks posts.
type WebhookConfig struct {
	URL    string // http or https
	Secret string // "whsec_" and the base64 key, as the Standard Webhooks spec writes it
	// Timeout bounds one attempt (default 10 s).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts at one event, doubled
	// after each failure from MinBackoff (default 1 s) up to MaxBackoff (default 5 min),
	// with jitter.
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long a delivering engine's lease lasts before it must renew it
	// (default 30 s); another engine takes over within about that much after it stops.
	Lease time.Duration
	// Poll is how often the feed is read when there is nothing new (default 1 s).
	Poll time.Duration
	// Client makes the requests (default: a client that follows no redirect).
	Client *http.Client
}

// Validate reports what DeliverWebhooks would refuse in c: an InvalidArgumentError.
func (c WebhookConfig) Validate() error { return c.defaults() }

func (c *WebhookConfig) defaults() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("URL", "must be an http or https URL")
	}
	if _, err := standardwebhooks.NewWebhook(c.Secret); err != nil || len(c.Secret) < len("whsec_")+1 {
		return invalid("Secret", "must be whsec_ and a base64 key")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Timeout, 10*time.Second)
	def(&c.MinBackoff, time.Second)
	def(&c.MaxBackoff, 5*time.Minute)
	def(&c.Lease, 30*time.Second)
	def(&c.Poll, time.Second)
	if c.Lease < 3*c.Timeout {
		return invalid("Lease", "must be at least 3 times Timeout (%s), not %s", c.Timeout, c.Lease)
	}
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return nil
}

// webhookPage is how many events the delivering engine reads at once.
const webhookPage = 100

// DeliverWebhooks delivers the feed to cfg.URL until ctx ends (then it returns nil,
// having given up its lease), as described at the top of this file. A bad cfg is an
// InvalidArgumentError, returned at once.
func (e *Engine) DeliverWebhooks(ctx context.Context, cfg WebhookConfig) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	wh, _ := standardwebhooks.NewWebhook(cfg.Secret)
	sum := sha256.Sum256([]byte(cfg.URL))
	d := &deliverer{e: e, cfg: cfg, wh: wh, endpoint: hex.EncodeToString(sum[:]), holder: uuid.New()}
	defer d.release()
	for ctx.Err() == nil {
		if !d.renew(ctx) {
			d.notePending(ctx)
			sleepCtx(ctx, cfg.Poll)
			continue
		}
		if n := d.deliverPage(ctx); n == 0 {
			sleepCtx(ctx, cfg.Poll)
		}
	}
	return nil
}

// deliverer is one engine's delivery loop for one endpoint.
type deliverer struct {
	e        *Engine
	cfg      WebhookConfig
	wh       *standardwebhooks.Webhook
	endpoint string    // the SHA-256 of the URL, hex
	holder   uuid.UUID // this loop, in the lease
	cursor   string    // the last event the endpoint acknowledged, as of the lease
	until    time.Time // by this engine's clock, when its lease may have run out; zero: none
}

// renew takes or renews the lease, reading the cursor, and reports whether this loop
// holds it.
func (d *deliverer) renew(ctx context.Context) bool {
	asked := time.Now()
	cursor, err := d.e.q.WebhookLease(ctx, db.WebhookLeaseParams{Endpoint: d.endpoint, Holder: uuid.NullUUID{UUID: d.holder, Valid: true},
		Seconds: d.cfg.Lease.Seconds()})
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			d.e.log.WarnContext(ctx, "webhook lease not renewed", "error", err)
		}
		d.until = time.Time{}
		return false
	}
	d.cursor, d.until = cursor, asked.Add(d.cfg.Lease*4/5)
	return true
}

// held reports whether the lease runs for at least need more by this engine's clock,
// renewing it when less is left.
func (d *deliverer) held(ctx context.Context, need time.Duration) bool {
	if time.Until(d.until) >= need {
		return true
	}
	return d.renew(ctx) && time.Until(d.until) >= need
}

// release gives the lease up, so that another engine takes over at once.
func (d *deliverer) release() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.e.viewCtx), d.e.cfg.StatementTimeout)
	defer cancel()
	_ = d.e.q.WebhookRelease(ctx, db.WebhookReleaseParams{Endpoint: d.endpoint, Holder: uuid.NullUUID{UUID: d.holder, Valid: true}})
}

// notePending sets the metric of the oldest undelivered event on an engine that does
// not deliver: from the cursor the delivering one keeps.
func (d *deliverer) notePending(ctx context.Context) {
	cursor, err := d.e.q.WebhookCursor(ctx, d.endpoint)
	if err != nil {
		return
	}
	if events, _, err := d.e.Events(ctx, cursor, 1); err == nil {
		d.setPending(events)
	}
}

func (d *deliverer) setPending(events []Event) {
	var at int64
	if len(events) > 0 {
		at = events[0].At.UnixNano()
	}
	d.e.m.webhookPending.Store(at)
}

// deliverPage delivers the events after the cursor, in order, while the lease runs,
// and returns how many it read.
func (d *deliverer) deliverPage(ctx context.Context) int {
	events, _, err := d.e.Events(ctx, d.cursor, webhookPage)
	if err != nil {
		if ctx.Err() == nil {
			d.e.log.WarnContext(ctx, "webhook deliveries: feed not read", "error", err)
		}
		return 0
	}
	d.setPending(events)
	for i, ev := range events {
		if !d.deliver(ctx, ev) {
			return len(events)
		}
		n, err := d.e.q.WebhookAdvance(ctx, db.WebhookAdvanceParams{Endpoint: d.endpoint, Delivered: ev.ID,
			Holder: uuid.NullUUID{UUID: d.holder, Valid: true}})
		if err != nil || n != 1 {
			d.until = time.Time{} // the lease ran out, or the cursor cannot be kept: from the lease again
			return len(events)
		}
		d.cursor = ev.ID
		d.setPending(events[i+1:])
	}
	return len(events)
}

// deliver posts ev until the endpoint acknowledges it (true), or the lease is lost or
// ctx ends (false).
func (d *deliverer) deliver(ctx context.Context, ev Event) bool {
	body, err := webhookBody(ev)
	if err != nil {
		d.e.log.ErrorContext(ctx, "webhook body not encoded", "event", ev.ID, "error", err)
		return false
	}
	wait := d.cfg.MinBackoff
	for attempt := 1; ctx.Err() == nil; attempt++ {
		if !d.held(ctx, d.cfg.Timeout) {
			return false
		}
		status, err := d.post(ctx, ev.ID, body)
		switch {
		case err == nil && status/100 == 2:
			d.e.m.webhookSent.WithLabelValues("delivered").Inc()
			return true
		case err == nil:
			d.e.m.webhookSent.WithLabelValues("refused").Inc()
			err = fmt.Errorf("status %d", status)
		default:
			d.e.m.webhookSent.WithLabelValues("failed").Inc()
		}
		if ctx.Err() != nil {
			return false
		}
		d.e.log.WarnContext(ctx, "webhook not acknowledged; trying again", "event", ev.ID, "attempt", attempt, "in", wait, "error", err)
		sleepCtx(ctx, wait/2+rand.N(wait/2+1))
		wait = min(2*wait, d.cfg.MaxBackoff)
	}
	return false
}

// post makes one attempt, signed now, that ends by Timeout and before the lease may
// run out, and returns the endpoint's status.
func (d *deliverer) post(ctx context.Context, id string, body []byte) (int, error) {
	by := time.Now().Add(d.cfg.Timeout)
	if d.until.Before(by) {
		by = d.until
	}
	actx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, d.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if err := signWebhook(req.Header, d.wh, id, time.Now(), body); err != nil {
		return 0, err
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, errors.New("no answer: " + redactURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}

// signWebhook sets the Standard Webhooks headers of a delivery of body under id, sent
// at now.
func signWebhook(h http.Header, wh *standardwebhooks.Webhook, id string, now time.Time, body []byte) error {
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		return err
	}
	h.Set("Content-Type", "application/json")
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return nil
}

// webhookBody is ev as the Standard Webhooks spec's payload structure has it.
func webhookBody(ev Event) ([]byte, error) {
	return json.Marshal(struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      Event     `json:"data"`
	}{webhookType(ev.Kind), ev.At.UTC(), ev})
}

// webhookType is the type of a delivery of an event of kind: "booking.<kind>" for a
// booking's event, "hold.reclaimed" and "hold.transferred" for a hold's.
func webhookType(kind string) string {
	if move, ok := strings.CutPrefix(kind, "hold_"); ok {
		return "hold." + move
	}
	return "booking." + kind
}

// redactURL is a request error without its URL, which may carry a secret.
func redactURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
