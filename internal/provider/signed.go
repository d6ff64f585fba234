package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// Asynchronous providers that sign their webhooks per Standard Webhooks
// (OpenAI's response.* events, a webhook-async receiver's work.ended) are
// verified here, once, so that every Async.Event refuses the same
// deliveries the same way.

// EventTolerance is how far a signed delivery's timestamp may be from the
// receiver's clock, either way: the Standard Webhooks reference libraries'
// and OpenAI's SDKs' 5 minutes.
const EventTolerance = webhooks.DefaultTolerance

// Faults of an *EventError.
const (
	// FaultForged: headers missing, a timestamp that is no number, or no
	// signature that matches the body under the secret.
	FaultForged = "forged"
	// FaultStale: signed, but its timestamp is more than EventTolerance
	// from now (a replay, or a clock far off).
	FaultStale = "stale"
	// FaultMalformed: signed and fresh, but not an event of the provider's.
	FaultMalformed = "malformed"
	// FaultIgnored: a genuine event about no work's end.
	FaultIgnored = "ignored"
)

// ErrEventSecret: the configured signing secret is no "whsec_" secret.
var ErrEventSecret = errors.New("webhook signing secret is no whsec_ secret")

// CheckEventSecret reports whether secret can verify deliveries (an
// adapter's constructor refuses one that cannot).
func CheckEventSecret(secret string) error {
	if _, err := webhooks.NewVerifier(secret); err != nil {
		return fmt.Errorf("%w: %w", ErrEventSecret, err)
	}
	return nil
}

// VerifySigned checks a delivery signed per Standard Webhooks v1
// (HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>", keyed with
// the base64-decoded part of the "whsec_" secret, any of the
// space-separated signatures matching) and its timestamp within
// EventTolerance of now. body must be the exact bytes received. A refused
// delivery is an *EventError (FaultForged, FaultStale) wrapping
// clients/go/webhooks' error; a secret that cannot verify is
// ErrEventSecret.
func VerifySigned(secret string, header http.Header, body []byte, now time.Time) error {
	v, err := webhooks.NewVerifier(secret)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEventSecret, err)
	}
	v.NowFunc = func() time.Time { return now }
	v.Tolerance = EventTolerance
	if err := v.Verify(header, body); err != nil {
		fault := FaultForged
		if errors.Is(err, webhooks.ErrTooOld) || errors.Is(err, webhooks.ErrTooNew) {
			fault = FaultStale
		}
		return &EventError{Fault: fault, Err: err}
	}
	return nil
}

// SignedDelivery is the delivery VerifySigned accepted, reporting work
// workID: its webhook-id, and its expiry, EventTolerance after its
// webhook-timestamp (past it, VerifySigned refuses every copy as stale).
func SignedDelivery(header http.Header, workID string) EventDelivery {
	ts, _ := strconv.ParseInt(header.Get(webhooks.HeaderTimestamp), 10, 64) // VerifySigned parsed it
	return EventDelivery{ID: header.Get(webhooks.HeaderID), WorkID: workID, Expires: time.Unix(ts, 0).UTC().Add(EventTolerance)}
}
