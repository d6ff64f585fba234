// Package webhooks signs and verifies onejob's webhook deliveries, which
// follow the Standard Webhooks scheme (v1, HMAC-SHA256): headers
// webhook-id, webhook-timestamp and webhook-signature, the signed content
// "<id>.<timestamp>.<body>" over the exact bytes sent, keyed with the
// base64-decoded part of a "whsec_" secret. Receivers use Verifier; the
// notifier uses Sign. Standard library only, so a receiver can import it
// without the rest of onejob.
package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names (Standard Webhooks).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// W3C Trace Context headers: a delivery of a traced job carries the
// traceparent (and tracestate) of the span that sent it, beside the
// Standard Webhooks headers (which define none), so a receiver that traces
// can make its handling a child of it and join the job's trace. They are
// not signed: use them to correlate, never to decide.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// TraceContext returns a delivery's traceparent and tracestate header
// values ("" when the job was not traced), for the receiver's own tracing
// (an OpenTelemetry propagator reads them from the headers as they are).
func TraceContext(h http.Header) (traceparent, tracestate string) {
	return h.Get(HeaderTraceparent), h.Get(HeaderTracestate)
}

// SecretPrefix starts every symmetric secret.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way (the reference libraries' 5 minutes).
const DefaultTolerance = 5 * time.Minute

// Errors Verify reports; match them with errors.Is.
var (
	ErrMissingHeaders   = errors.New("webhooks: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrInvalidTimestamp = errors.New("webhooks: invalid webhook-timestamp")
	ErrTooOld           = errors.New("webhooks: timestamp too old")
	ErrTooNew           = errors.New("webhooks: timestamp too new")
	ErrNoMatch          = errors.New("webhooks: no signature matches")
	ErrBadSecret        = errors.New("webhooks: secret must be whsec_ and base64 of 24 to 64 bytes")
)

// DecodeSecret returns the key of a "whsec_" secret.
func DecodeSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return nil, ErrBadSecret
	}
	return key, nil
}

// NewSecret makes a secret of 32 random bytes.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Sign is the signature "v1,<base64 HMAC-SHA256>" of body sent as message
// id at ts.
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := DecodeSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, ts.Unix(), body)), nil
}

func mac(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

// Headers are the three headers of a delivery signed with each of secrets
// (several during a rotation's overlap: space-separated signatures).
func Headers(secrets []string, id string, ts time.Time, body []byte) (http.Header, error) {
	var sigs []string
	for _, s := range secrets {
		sig, err := Sign(s, id, ts, body)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return h, nil
}

// Verifier checks deliveries against a secret.
type Verifier struct {
	key []byte
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// Tolerance: DefaultTolerance when 0.
	Tolerance time.Duration
}

// NewVerifier checks the secret.
func NewVerifier(secret string) (*Verifier, error) {
	key, err := DecodeSecret(secret)
	if err != nil {
		return nil, err
	}
	return &Verifier{key: key}, nil
}

// Verify checks a delivery's headers and its exact body: a timestamp
// within the tolerance and a v1 signature that matches (any of several).
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrInvalidTimestamp
	}
	now := time.Now
	if v.NowFunc != nil {
		now = v.NowFunc
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	at, n := time.Unix(ts, 0), now()
	switch {
	case n.Sub(at) > tol:
		return fmt.Errorf("%w (%s)", ErrTooOld, n.Sub(at).Round(time.Second))
	case at.Sub(n) > tol:
		return fmt.Errorf("%w (%s)", ErrTooNew, at.Sub(n).Round(time.Second))
	}
	want := mac(v.key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrNoMatch
}
