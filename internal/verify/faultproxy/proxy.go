// Package faultproxy is a loopback HTTP reverse proxy for the DynamoDB API
// (dynalite locally) that injects the faults a real network and a real
// DynamoDB produce: 500s, throttling, connections reset before the request
// reached the database, connections reset after the database applied it, and
// latency. Every fault is one the AWS SDK's default retryer retries, so the
// code under test sees what production sees: requests that were applied
// although the client saw an error, and retries of them.
//
// Faults fire with a fixed probability per request. The decision for the
// i-th request the proxy receives is a pure function of (Seed, i), so a run
// with one client goroutine is reproducible; with many, the sequence of
// decisions is, and only which request draws which one depends on timing.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is one kind of fault.
type Kind int

// Fault kinds. "Before" kinds never reach the database; "After" kinds are
// applied by it and then lost on the way back — the dangerous ones.
const (
	None Kind = iota
	// InternalError answers 500 InternalServerError without forwarding.
	InternalError
	// Throttle answers 400 ProvisionedThroughputExceededException without forwarding.
	Throttle
	// ResetBefore resets the connection without forwarding the request.
	ResetBefore
	// ResetAfter forwards the request, lets the database apply it, then
	// resets the connection instead of answering.
	ResetAfter
	// InternalErrorAfter forwards the request, lets the database apply it,
	// then answers 500 instead of its response (DynamoDB may do this).
	InternalErrorAfter
	// Latency delays the request by up to Config.Latency, then forwards it.
	Latency
	numKinds
)

func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case InternalError:
		return "internal_error"
	case Throttle:
		return "throttle"
	case ResetBefore:
		return "reset_before"
	case ResetAfter:
		return "reset_after"
	case InternalErrorAfter:
		return "internal_error_after"
	case Latency:
		return "latency"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds lists every fault kind.
func Kinds() []Kind {
	return []Kind{InternalError, Throttle, ResetBefore, ResetAfter, InternalErrorAfter, Latency}
}

// Request is what a fault decision sees of one request.
type Request struct {
	Seq       uint64 // arrival order, from 0
	Operation string // "PutItem", "UpdateItem", … (from X-Amz-Target)
	Attempt   int    // the SDK's attempt number (Amz-Sdk-Request), 0 if absent
	Body      []byte
}

// Config configures a proxy.
type Config struct {
	// Target is the base URL of the DynamoDB endpoint, e.g. dynalite's.
	Target string
	// Rate is the probability in [0, 1] that a request draws a fault.
	Rate float64
	// Seed makes the decisions reproducible.
	Seed uint64
	// Faults are the kinds drawn from, uniformly; empty means Kinds().
	Faults []Kind
	// Latency bounds the delay a Latency fault adds; zero means 20 ms.
	Latency time.Duration
	// Script, if set, is asked first; returning ok = true overrides the
	// random draw (None included). Tests use it to aim one fault at one
	// request. It is called concurrently.
	Script func(Request) (k Kind, ok bool)
	// Logger receives one debug line per injected fault; nil discards.
	Logger *slog.Logger
}

// Stats counts what the proxy did.
type Stats struct {
	Requests  int64 // received
	Forwarded int64 // reached the database
	Injected  map[Kind]int64
}

// Faults is the number of requests that drew a fault.
func (s Stats) Faults() int64 {
	var n int64
	for k, v := range s.Injected {
		if k != None {
			n += v
		}
	}
	return n
}

func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d forwarded=%d faults=%d", s.Requests, s.Forwarded, s.Faults())
	for _, k := range Kinds() {
		fmt.Fprintf(&b, " %s=%d", k, s.Injected[k])
	}
	return b.String()
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	cfg      Config
	target   *url.URL
	rate     atomic.Uint64 // math.Float64bits of the rate
	url      string
	srv      *http.Server
	upstream *http.Client
	log      *slog.Logger
	ln       net.Listener
	stop     func() bool // unregisters the close-on-ctx-done hook
	closed   sync.Once
	closeErr error

	seq       atomic.Uint64
	forwarded atomic.Int64
	injected  [numKinds]atomic.Int64
}

// Start listens on a free loopback port and serves until Close or until ctx
// is done.
func Start(ctx context.Context, c Config) (*Proxy, error) {
	target, err := url.Parse(c.Target)
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("faultproxy: bad target %q", c.Target)
	}
	if c.Rate < 0 || c.Rate > 1 {
		return nil, fmt.Errorf("faultproxy: rate %v outside [0, 1]", c.Rate)
	}
	if len(c.Faults) == 0 {
		c.Faults = Kinds()
	}
	for _, k := range c.Faults {
		if k <= None || k >= numKinds {
			return nil, fmt.Errorf("faultproxy: unknown fault %v", k)
		}
	}
	if c.Latency <= 0 {
		c.Latency = 20 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:    c,
		target: target,
		url:    "http://" + ln.Addr().String(),
		ln:     ln,
		log:    c.Logger,
		upstream: &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
			// Pass encodings through untouched: the SDK asked for them.
			DisableCompression: true,
		}},
	}
	p.SetRate(c.Rate)
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(c.Logger.Handler(), slog.LevelDebug),
	}
	p.stop = context.AfterFunc(ctx, func() { _ = p.shutdown() })
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL: point the DynamoDB client here.
func (p *Proxy) URL() string { return p.url }

// SetRate changes the fault probability, e.g. to quiesce faults before
// verifying.
func (p *Proxy) SetRate(r float64) { p.rate.Store(math.Float64bits(r)) }

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	p.stop()
	return p.shutdown()
}

func (p *Proxy) shutdown() error {
	p.closed.Do(func() {
		err := p.srv.Close()
		// Serve may not have taken the listener yet.
		if lerr := p.ln.Close(); err == nil && !errors.Is(lerr, net.ErrClosed) {
			err = lerr
		}
		p.upstream.CloseIdleConnections()
		if !errors.Is(err, http.ErrServerClosed) {
			p.closeErr = err
		}
	})
	return p.closeErr
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	s := Stats{Requests: int64(p.seq.Load()), Forwarded: p.forwarded.Load(), Injected: map[Kind]int64{}}
	for k := None; k < numKinds; k++ {
		s.Injected[k] = p.injected[k].Load()
	}
	return s
}

// decide draws the fault for a request and, for Latency, its delay.
func (p *Proxy) decide(r Request) (Kind, time.Duration) {
	h := mix(p.cfg.Seed ^ mix(r.Seq+1))
	delay := time.Duration(mix(h^3) % uint64(p.cfg.Latency+1))
	if p.cfg.Script != nil {
		if k, ok := p.cfg.Script(r); ok {
			return k, delay
		}
	}
	if unit(h) >= math.Float64frombits(p.rate.Load()) {
		return None, 0
	}
	return p.cfg.Faults[mix(h^1)%uint64(len(p.cfg.Faults))], delay
}

// ServeHTTP reads the whole request first so that a "before" fault is
// decided on what the client actually sent.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		p.reset(w)
		return
	}
	req := Request{
		Seq:       p.seq.Add(1) - 1,
		Operation: strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810."),
		Attempt:   sdkAttempt(r.Header.Get("Amz-Sdk-Request")),
		Body:      body,
	}
	kind, delay := p.decide(req)
	p.injected[kind].Add(1)
	if kind != None {
		p.log.DebugContext(r.Context(), "fault_injected", "fault", kind.String(), "seq", req.Seq,
			"operation", req.Operation, "attempt", req.Attempt)
	}
	switch kind {
	case InternalError:
		writeError(w, req.Seq, http.StatusInternalServerError, "InternalServerError", "faultproxy: injected internal server error")
		return
	case Throttle:
		writeError(w, req.Seq, http.StatusBadRequest, "ProvisionedThroughputExceededException", "faultproxy: injected throttling")
		return
	case ResetBefore:
		p.reset(w)
		return
	case Latency:
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	resp, respBody, err := p.forward(r, body)
	if err != nil {
		// The database is unreachable: a reset is what a client would see.
		p.log.WarnContext(r.Context(), "forward_failed", "seq", req.Seq, "error", err.Error())
		p.reset(w)
		return
	}
	p.forwarded.Add(1)
	switch kind {
	case ResetAfter:
		p.reset(w)
		return
	case InternalErrorAfter:
		writeError(w, req.Seq, http.StatusInternalServerError, "InternalServerError", "faultproxy: injected internal server error after apply")
		return
	}
	for k, vs := range resp.Header {
		if hopByHop(k) {
			continue
		}
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(respBody)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// forward sends the request to the target and reads the whole response, so
// the database has finished with it before the proxy decides how to answer.
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, []byte, error) {
	u := *p.target
	u.Path = strings.TrimSuffix(p.target.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range r.Header {
		if !hopByHop(k) {
			out.Header[k] = vs
		}
	}
	out.Host = r.Host // the signature covers the host the client addressed
	out.ContentLength = int64(len(body))
	resp, err := p.upstream.Do(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, respBody, nil
}

// reset closes the client's connection with a TCP RST (linger 0), without
// an HTTP response: the client sees "connection reset by peer".
func (p *Proxy) reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream instead
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// writeError answers like DynamoDB does, checksum included.
func writeError(w http.ResponseWriter, seq uint64, status int, code, msg string) {
	body := fmt.Appendf(nil, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":%q}`, code, msg)
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", "faultproxy-"+strconv.FormatUint(seq, 10))
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func hopByHop(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Content-Length":
		return true
	}
	return false
}

// sdkAttempt parses "attempt=2; max=10".
func sdkAttempt(v string) int {
	for part := range strings.SplitSeq(v, ";") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			a, _ := strconv.Atoi(n)
			return a
		}
	}
	return 0
}

// mix is SplitMix64's finalizer: a cheap, well-distributed hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }
