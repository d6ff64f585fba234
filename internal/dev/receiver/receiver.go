// Package receiver is a loopback webhook receiver for tests and drills: it
// verifies every delivery over the exact bytes it received (Standard
// Webhooks, clients/go/webhooks), records it, and answers each path as its
// script says (a status per try of a message, then 204).
package receiver

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// Delivery is one request received.
type Delivery struct {
	Path      string
	ID        string
	Timestamp string
	Signature string
	Body      []byte
	// Verified is nil when the signature verified over Body.
	Verified error
	// Status is what the receiver answered.
	Status int
	At     time.Time
	// Traceparent is the delivery's W3C traceparent ("" for an untraced job).
	Traceparent string
}

// Receiver serves on 127.0.0.1.
type Receiver struct {
	// URL is its base URL; an endpoint is URL + a path.
	URL string

	srv     *http.Server
	mu      sync.Mutex
	secrets map[string]string
	scripts map[string][]int
	delays  map[string]time.Duration
	tries   map[string]int // by path and message ID
	got     []Delivery
	changed chan struct{}
}

// Start listens on a loopback port.
func Start() (*Receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{URL: "http://" + l.Addr().String(), secrets: map[string]string{}, scripts: map[string][]int{},
		delays: map[string]time.Duration{}, tries: map[string]int{}, changed: make(chan struct{})}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// Close stops it.
func (r *Receiver) Close() error { return r.srv.Close() }

// Expect sets path's secret (to verify with) and its script: the status
// of each try of a message, in order; 204 after the script.
func (r *Receiver) Expect(path, secret string, script ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets[path], r.scripts[path] = secret, script
}

// Delay makes path answer each delivery d after receiving it (recorded
// at once): a slow endpoint.
func (r *Receiver) Delay(path string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delays[path] = d
}

// ServeHTTP records and answers one delivery.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	d := Delivery{Path: req.URL.Path, ID: req.Header.Get(webhooks.HeaderID), Timestamp: req.Header.Get(webhooks.HeaderTimestamp),
		Signature: req.Header.Get(webhooks.HeaderSignature), Body: body, At: time.Now()}
	d.Traceparent, _ = webhooks.TraceContext(req.Header)
	r.mu.Lock()
	secret, ok := r.secrets[d.Path]
	d.Verified = webhooks.ErrBadSecret
	if ok {
		if v, err := webhooks.NewVerifier(secret); err == nil {
			d.Verified = v.Verify(req.Header, body)
		}
	}
	key := d.Path + " " + d.ID
	n := r.tries[key]
	r.tries[key] = n + 1
	d.Status = http.StatusNoContent
	if script := r.scripts[d.Path]; n < len(script) {
		d.Status = script[n]
	}
	r.got = append(r.got, d)
	close(r.changed)
	r.changed = make(chan struct{})
	delay := r.delays[d.Path]
	r.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
		}
	}
	w.WriteHeader(d.Status)
}

// Deliveries lists what path received (every path when empty), in order.
func (r *Receiver) Deliveries(path string) []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Delivery
	for _, d := range r.got {
		if path == "" || d.Path == path {
			out = append(out, d)
		}
	}
	return out
}

// Await waits until cond holds on path's deliveries, or ctx ends (its
// error then). It wakes on each delivery, never on a timer.
func (r *Receiver) Await(ctx context.Context, path string, cond func([]Delivery) bool) error {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond(r.Deliveries(path)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Delivered is the distinct message IDs path answered 2xx to.
func Delivered(ds []Delivery) map[string]Delivery {
	out := map[string]Delivery{}
	for _, d := range ds {
		if d.Status >= 200 && d.Status <= 299 {
			if _, seen := out[d.ID]; !seen {
				out[d.ID] = d
			}
		}
	}
	return out
}
