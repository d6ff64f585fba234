package job

import (
	"slices"
	"time"
)

// Deliveries (notifications' third part: notify.go records the events,
// endpoint.go says where they go): one event on its way to one endpoint,
// tried on the retry schedule, and what its answers make of the endpoint.

// DeliveryState is where a delivery stands.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryFailed: every try of the schedule failed.
	DeliveryFailed DeliveryState = "failed"
	// DeliveryEndpointDisabled: the endpoint answered 410, failed for
	// days, or was disabled before this delivery's turn.
	DeliveryEndpointDisabled DeliveryState = "endpoint_disabled"
	// DeliveryDropped: never queued, its endpoint's backlog being full
	// when the event was fanned out (DecideQueue); never tried.
	DeliveryDropped DeliveryState = "dropped"
)

// Delivery is one event on its way to one endpoint.
type Delivery struct {
	JobID      string
	Owner      string
	MessageID  string
	EndpointID string
	Type       EventType
	// Body is the exact bytes every try sends (and signs).
	Body      []byte
	State     DeliveryState
	Tries     []Try
	NextAt    time.Time // when the next try is due; zero once settled
	CreatedAt time.Time
	// From counts the tries before the last redelivery: the schedule
	// starts again from there.
	From      int
	Revision  int64
	ExpiresAt time.Time
	// Trace is its job's trace context (Job.Trace), the parent of each
	// try's span, which its request carries: only a traced job's
	// deliveries keep one.
	Trace TraceContext
}

// Key names the delivery among its job's: "<message>-<endpoint>" (both IDs
// are lower-case hex behind a prefix, so the key is safe in a URL path).
func (d Delivery) Key() string { return d.MessageID + "-" + d.EndpointID }

// Try is one HTTP request of a delivery.
type Try struct {
	At time.Time
	// Status is the endpoint's HTTP status, 0 when none came (Error says why).
	Status  int
	Latency time.Duration
	// Error is why no status came: "timeout", "connect", "refused_address", …
	Error string
}

// TryResult is what one request to an endpoint got.
type TryResult struct {
	Status  int
	Latency time.Duration
	Error   string
	// RetryAfter is the endpoint's Retry-After, 0 when none.
	RetryAfter time.Duration
}

// RetrySchedule is the wait before each retry, after a failed try: the
// Standard Webhooks schedule. A delivery fails after its last.
type RetrySchedule []time.Duration

// DefaultRetrySchedule: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h,
// 10 h, 10 h (Svix's).
func DefaultRetrySchedule() RetrySchedule {
	return RetrySchedule{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
}

// Scaled is the schedule with every wait divided by f (make run's, so a
// whole schedule passes in seconds); at least a millisecond each.
func (s RetrySchedule) Scaled(f int) RetrySchedule {
	if f <= 1 {
		return s
	}
	out := make(RetrySchedule, len(s))
	for i, d := range s {
		out[i] = max(d/time.Duration(f), time.Millisecond)
	}
	return out
}

// MaxRetryAfter bounds how far an endpoint's Retry-After may push a retry.
const MaxRetryAfter = 24 * time.Hour

// DeliveryRetention: a delivery's record is kept this long after it
// was created (a job's own retention is at least a day too).
const DeliveryRetention = 30 * 24 * time.Hour

// NewDelivery is the delivery of notice n to endpoint e, due at once.
func NewDelivery(j Job, n Notice, e Endpoint, body []byte, now time.Time) Delivery {
	now = now.UTC()
	return Delivery{JobID: j.ID, Owner: j.Owner, MessageID: n.ID, EndpointID: e.ID, Type: n.Type, Body: body,
		State: DeliveryPending, NextAt: now, CreatedAt: now, Revision: 1, ExpiresAt: now.Add(DeliveryRetention).Truncate(time.Second),
		Trace: j.Trace}
}

// Delivered reports whether a status counts as delivered: 2xx only (3xx
// is a failure, and no redirect is followed).
func Delivered(status int) bool { return status >= 200 && status <= 299 }

// DecideClaim leases a due delivery to one sender until lease passes: a
// crashed sender's delivery is tried again then, under the same ID.
// ok is false when it is not due or not pending.
func DecideClaim(d Delivery, lease time.Duration, now time.Time) (Delivery, bool) {
	if d.State != DeliveryPending || d.NextAt.IsZero() || now.Before(d.NextAt) {
		return d, false
	}
	after := d
	after.NextAt = now.UTC().Add(lease)
	after.Revision++
	return after, true
}

// DecideTry records a try and decides what follows: delivered on 2xx;
// the endpoint disabled on 410; otherwise a retry after the schedule's
// next wait (or the endpoint's Retry-After, if longer, up to
// MaxRetryAfter), or failed after the schedule's last.
func DecideTry(d Delivery, r TryResult, s RetrySchedule, now time.Time) Delivery {
	now = now.UTC()
	after := d
	after.Tries = append(slices.Clone(d.Tries), Try{At: now.Add(-r.Latency), Status: r.Status, Latency: r.Latency, Error: r.Error})
	after.Revision++
	switch {
	case Delivered(r.Status):
		after.State, after.NextAt = DeliveryDelivered, time.Time{}
	case r.Status == 410:
		after.State, after.NextAt = DeliveryEndpointDisabled, time.Time{}
	default:
		failed := len(after.Tries) - d.From
		if failed > len(s) {
			after.State, after.NextAt = DeliveryFailed, time.Time{}
			break
		}
		wait := s[failed-1]
		if r.RetryAfter > wait {
			wait = min(r.RetryAfter, MaxRetryAfter)
		}
		after.NextAt = now.Add(wait)
	}
	return after
}

// DecideSkip settles a pending delivery whose endpoint is disabled or gone.
func DecideSkip(d Delivery, now time.Time) Delivery {
	after := d
	after.State, after.NextAt = DeliveryEndpointDisabled, time.Time{}
	after.Revision++
	return after
}

// DecideDrop settles a delivery its endpoint's full backlog refused
// (DecideQueue): recorded, so its owner and the operators see it, but
// never tried.
func DecideDrop(d Delivery) Delivery {
	after := d
	after.State, after.NextAt = DeliveryDropped, time.Time{}
	after.Revision++
	return after
}

// DecideRedeliver starts a settled or pending delivery's schedule again,
// due now (an operator's or owner's request). Its tries are kept.
func DecideRedeliver(d Delivery, now time.Time) Delivery {
	after := d
	after.State, after.NextAt, after.From = DeliveryPending, now.UTC(), len(d.Tries)
	after.Revision++
	return after
}

// DefaultDisableAfter: an endpoint that has failed every try for this
// long is disabled (Svix: 5 days).
const DefaultDisableAfter = 5 * 24 * time.Hour

// Disable reasons.
const (
	DisabledGone    = "gone"    // it answered 410
	DisabledFailing = "failing" // it failed every try for DisableAfter
)

// FailureGap: failures further apart than this are not one run of
// failures; the endpoint's clock towards being disabled starts again.
const FailureGap = 24 * time.Hour

// DecideEndpointAfter updates an endpoint's health after a try of d (as
// DecideTry left it): a delivery clears FailingSince, a 410 disables it; a
// failure starts a run of failures (FailingSince) unless one is under way
// (the last failure within FailureGap), and once the run has lasted
// disableAfter, disables it. changed is false when nothing needs writing.
func DecideEndpointAfter(e Endpoint, d Delivery, disableAfter time.Duration, now time.Time) (Endpoint, bool) {
	if e.Disabled() || len(d.Tries) == 0 {
		return e, false
	}
	now = now.UTC()
	after := e
	last := d.Tries[len(d.Tries)-1]
	switch slow := last.Latency >= SlowAfter; {
	case Delivered(last.Status):
		if e.FailingSince.IsZero() && slow == !e.SlowSince.IsZero() {
			return e, false
		}
		after.FailingSince, after.LastFailureAt = time.Time{}, time.Time{}
		if !slow {
			// Answering promptly again: what it had queued drains.
			after.SlowSince, after.Backlog = time.Time{}, 0
		} else if e.SlowSince.IsZero() {
			after.SlowSince = last.At
		}
	case last.Status == 410:
		after.DisabledAt, after.DisabledReason = now, DisabledGone
	case e.FailingSince.IsZero() || now.Sub(e.LastFailureAt) > FailureGap:
		after.FailingSince, after.LastFailureAt = last.At, last.At
	case now.Sub(e.FailingSince) >= disableAfter:
		after.DisabledAt, after.DisabledReason = now, DisabledFailing
	case now.Sub(e.LastFailureAt) > FailureGap/2:
		after.LastFailureAt = last.At
	default:
		return e, false
	}
	after.UpdatedAt = now
	after.Revision++
	return after, true
}
