package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's Prometheus collectors. Labels are low-cardinality: an
// operation and a result, never a token, holder or show.
type metrics struct {
	ops               *prometheus.CounterVec
	duration          *prometheus.HistogramVec
	fenceRefusals     prometheus.Counter
	counterRepairs    prometheus.Counter
	markerRepairs     prometheus.Counter
	markerDeferred    prometheus.Counter
	seatMapRebuilds   prometheus.Counter
	seatMapMerges     prometheus.Counter
	admissionRefusals *prometheus.CounterVec
	confirmQueueWait  prometheus.Histogram
	confirmBatchSize  prometheus.Histogram
	groupSize         *prometheus.HistogramVec
	batchRewrites     prometheus.Counter
	feedLag           prometheus.Histogram
	failovers         prometheus.Counter
	stalls            prometheus.Counter
	unproven          prometheus.Counter
	settled           *prometheus.CounterVec
	lostBookings      prometheus.Counter
	reconciled        prometheus.Counter
	backendUp         *prometheus.GaugeVec
	outboxRows        prometheus.Gauge
	outboxOldest      prometheus.Gauge
	webhookSent       *prometheus.CounterVec
	webhookPending    atomic.Int64 // the oldest undelivered event's time (Unix ns), 0 for none: webhooks.go
	children          sync.Map     // opResult -> *opMetrics
}

// newMetrics makes the engine's collectors and registers them with reg (nil: none).
func newMetrics(reg prometheus.Registerer, confirmQueue func() float64) (*metrics, error) {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_operations_total",
			Help: "Engine operations by operation (hold, extend, release, confirm, cancel) and result.",
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_operation_duration_seconds",
			Help:    "Latency of engine operations by operation.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"op"}),
		fenceRefusals: counter("holdfast_fence_refusals_total",
			"Confirmations the PostgreSQL fence refused because it had seen the generation or a larger one."),
		counterRepairs: counter("holdfast_counter_repairs_total",
			"Times a show's Redis generation counter was found below the database's high-water mark and raised."),
		markerRepairs: counter("holdfast_marker_repairs_total",
			"Sold-marker writes repaired: claims Redis did not know about, and outbox rows written by the background loop."),
		markerDeferred: counter("holdfast_marker_writes_deferred_total",
			"Sold-marker writes that failed after COMMIT and were left to the background repair."),
		seatMapRebuilds: counter("holdfast_seatmap_rebuilds_total",
			"Seat-map rebuilds from PostgreSQL and Redis: a show first read, a gap in its change feed, a Resync."),
		seatMapMerges: counter("holdfast_seatmap_watch_merges_total",
			"Times a seat-map watcher that fell behind had its unread events merged into one (or replaced by a snapshot)."),
		admissionRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_confirm_admission_refusals_total",
			Help: "Confirmations refused before the database: queue_full, too_late (the hold would expire first), hold_expired.",
		}, []string{"reason"}),
		confirmQueueWait: histogram("holdfast_confirm_queue_wait_seconds",
			"How long confirmations waited in the queue for a batch to take them.",
			.0001, .0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5),
		batchRewrites: counter("holdfast_confirm_batch_rewrites_total",
			"Batches written again one statement per booking because the database refused the batch's set-based statement (a booking broke an invariant, e.g. the holder limit)."),
		confirmBatchSize: histogram("holdfast_confirm_batch_size",
			"Confirmations per group-committed PostgreSQL transaction.",
			1, 2, 4, 8, 16, 32, 64, 128, 256),
		groupSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_group_call_size",
			Help:    "Calls per group call to Redis, by script (hold): calls of one show that waited while two of its calls were in flight. A lone call is not counted.",
			Buckets: []float64{2, 4, 8, 16, 32, 64},
		}, []string{"script"}),
		feedLag: histogram("holdfast_seatmap_feed_lag_seconds",
			"Time from a change's feed entry in Redis to its application to this engine's seat map.",
			.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5),
		failovers: counter("holdfast_postgres_server_changes_total",
			"Times the engine found PostgreSQL to be another server (another cluster or timeline: a failover); each starts a reconciliation."),
		stalls: counter("holdfast_postgres_stalls_total",
			"Batches whose server stopped answering within a statement's bound (a hung primary, a partition); each empties the pool."),
		unproven: counter("holdfast_commit_durability_unproven_total",
			"Bookings not acknowledged because their durability could not be proven (a COMMIT waiting for a synchronous standby, a barrier that did not return)."),
		lostBookings: counter("holdfast_lost_bookings_total",
			"Bookings Redis had sold markers for that the database no longer has (an asynchronous failover lost them); found by reconciliation."),
		reconciled: counter("holdfast_markers_lowered_total",
			"Sold markers reconciliation lowered to what the database says."),
	}
	m.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_commits_settled_total",
		Help: "Confirmations whose COMMIT's outcome was unknown when their caller was answered, settled later (settle.go): booked (the server had the booking), committed_again (it had not, and could no longer get it: committed there again), refused (committing it again was refused), given_up (still unknown after MaxHoldTTL).",
	}, []string{"outcome"})
	m.backendUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_backend_up",
		Help: "1 when the backend answered the engine's last health probe (every few seconds), 0 when it did not.",
	}, []string{"backend"})
	m.outboxRows = gauge("holdfast_marker_outbox_rows",
		"Sold-marker writes owed to Redis and not yet made (marker_outbox rows), as of the last health probe.")
	m.outboxOldest = gauge("holdfast_marker_outbox_oldest_seconds",
		"Age of the oldest marker_outbox row (0 when none), as of the last health probe: the repair is behind when it grows.")
	m.webhookSent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "holdfast_webhook_attempts_total",
		Help: "Webhook delivery attempts by result: delivered (a 2xx), refused (another status), failed (no answer in time, or none)."}, []string{"result"})
	if reg == nil {
		return m, nil
	}
	return m, m.register(reg, confirmQueue)
}

// register registers m's collectors with reg, and the gauges read when scraped: the
// confirmation queue's length (confirmQueue) and the oldest undelivered webhook event.
func (m *metrics) register(reg prometheus.Registerer, confirmQueue func() float64) error {
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "holdfast_confirm_queue_length",
		Help: "Confirmations waiting in the queue for a batch now.",
	}, confirmQueue)
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdfast_webhook_oldest_undelivered_seconds",
		Help: "Age of the oldest event the webhook endpoint has not acknowledged (0 when none, or when no --webhook-url), as this engine last read it."}, m.webhookAge)
	for _, c := range []prometheus.Collector{queue, pending, m.webhookSent, m.ops, m.duration, m.fenceRefusals, m.counterRepairs, m.markerRepairs, m.markerDeferred, m.seatMapRebuilds, m.seatMapMerges, m.feedLag, m.admissionRefusals, m.confirmQueueWait, m.confirmBatchSize, m.groupSize, m.batchRewrites,
		m.failovers, m.stalls, m.unproven, m.settled, m.lostBookings, m.reconciled, m.backendUp, m.outboxRows, m.outboxOldest} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// counter, histogram and gauge make the collectors of their kind, unregistered.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func histogram(name, help string, buckets ...float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// webhookAge is the age in seconds of the oldest event the webhook endpoint has not
// acknowledged, 0 when none.
func (m *metrics) webhookAge() float64 {
	at := m.webhookPending.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at)).Seconds()
}

// observe records one finished operation. The labelled children are resolved once per
// (op, result) and cached: no label hashing on the hot path.
func (m *metrics) observe(op string, start time.Time, result string) {
	d := time.Since(start).Seconds()
	k := opResult{op, result}
	c, ok := m.children.Load(k)
	if !ok {
		c, _ = m.children.LoadOrStore(k, &opMetrics{count: m.ops.WithLabelValues(op, result), latency: m.duration.WithLabelValues(op)})
	}
	om := c.(*opMetrics)
	om.count.Inc()
	om.latency.Observe(d)
}

type opResult struct{ op, result string }

type opMetrics struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// resultOf names an operation's outcome for the result label.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrSeatsUnavailable):
		return "taken"
	case errors.Is(err, ErrHoldLost):
		return "lost"
	case errors.Is(err, ErrStaleGeneration):
		return "stale"
	case errors.Is(err, ErrIdempotencyKeyReused):
		return "key_reused"
	case errors.Is(err, ErrExtendLimit), errors.Is(err, ErrHolderLimit):
		return "limit"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}
