package provider

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Work is an asynchronous provider's account of work it accepted under ID:
// its status in the provider's words, the attempt key the provider keeps
// with it (its metadata), whether it ended, and how it ended (Outcome).
type Work struct {
	ID     string
	Status string
	// Key is the attempt key (Request.IdempotencyKey) the provider keeps
	// with the work; empty when it keeps none.
	Key   string
	Ended bool
	// Cancelled: the work ended cancelled.
	Cancelled bool
	// Usage is what the provider billed for the work so far (also when it
	// failed or was cancelled); nil when it reported nothing.
	Usage *Usage
	// outcome maps ended work to the attempt's answer or failure.
	outcome func(Request) (Response, error)
}

// NewWork is the account an adapter gives; outcome maps the ended work to
// the attempt's answer or failure for the attempt's request.
func NewWork(id, status, key string, ended, cancelled bool, usage *Usage, outcome func(Request) (Response, error)) Work {
	return Work{ID: id, Status: status, Key: key, Ended: ended, Cancelled: cancelled, Usage: usage, outcome: outcome}
}

// ErrWorkOpen is Outcome's answer for work that has not ended.
var ErrWorkOpen = errors.New("the work has not ended")

// ErrForeignWork is Outcome's answer for work the provider keeps under
// another attempt's key than the request's: it is never applied to it.
var ErrForeignWork = errors.New("the work belongs to another attempt")

// Outcome is the ended work's answer for req (checked as Call's would be),
// or its failure: a *CallError.
func (w Work) Outcome(req Request) (Response, error) {
	if !w.Ended || w.outcome == nil {
		return Response{}, ErrWorkOpen
	}
	if w.Key != req.IdempotencyKey {
		return Response{}, ErrForeignWork
	}
	return w.outcome(req)
}

// Async is a provider that runs an attempt as work it accepts at once and
// finishes later: Submit is the only call whose answer can be lost; after
// it the work has an ID onejob asks about (Retrieve), cancels (Cancel, safe
// to repeat) and hears of by the provider's webhook (Event). Nothing of
// onejob runs while the work does.
type Async interface {
	Provider
	// Submit hands the attempt's request to the provider under tier (a
	// job.Tier: "now", "2h", "8h"). Its errors are Call's: an ambiguous
	// one means the work may exist.
	Submit(ctx context.Context, req Request, tier string) (Work, error)
	// Retrieve reads the work by its ID.
	Retrieve(ctx context.Context, id string) (Work, error)
	// Cancel asks the provider to cancel the work; the answer says how it
	// stands (it may have ended otherwise first).
	Cancel(ctx context.Context, id string) (Work, error)
	// Event verifies an inbound webhook delivery (body: the exact bytes
	// received) with the provider's signing scheme and returns what it
	// reports: the work (its outcome is read with Retrieve) and the
	// delivery's own id and life. A delivery it refuses (forged, stale,
	// malformed, not about work) is an *EventError.
	Event(header http.Header, body []byte, now time.Time) (EventDelivery, error)
}

// EventDelivery is a verified webhook delivery.
type EventDelivery struct {
	// ID is the delivery's own id, the same on each retry of it (Standard
	// Webhooks' webhook-id, its idempotency key).
	ID string
	// WorkID names the work the event reports.
	WorkID string
	// Expires is when its signature stops verifying: a copy of it sent
	// later is refused as stale, so a receiver need remember ID only
	// until then to know every copy.
	Expires time.Time
}

// EventError refuses an inbound webhook delivery: Fault is a stable word
// (forged, stale, malformed, ignored).
type EventError struct {
	Fault string
	Err   error
}

func (e *EventError) Error() string { return "provider event " + e.Fault + ": " + e.Err.Error() }

func (e *EventError) Unwrap() error { return e.Err }
