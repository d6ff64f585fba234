// Package notifyhttp is the notifier's HTTP adapter (lifecycle.Sender):
// it signs each message with the Standard Webhooks scheme (a fresh
// webhook-timestamp per try, the same webhook-id) and POSTs it to the
// owner's endpoint. It is the outbound side of onejob's webhooks, not the
// webhook provider kind (internal/provider/webhook, how onejob calls a
// provider).
//
// An endpoint URL is the owner's to choose, so the sender guards the
// network it can reach: every address a name resolves to is checked when
// the connection is dialled (net.Dialer.Control), so a name that resolves
// to a private, loopback, link-local or metadata address is refused even
// if it resolved elsewhere when the endpoint was registered (DNS
// rebinding); no proxy from the environment is used (it would dial for
// us); no redirect is followed; each try gives up after Timeout.
package notifyhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"

	"github.com/onejob/onejob/internal/tracing/propagate"
)

// DefaultTimeout bounds one try (Svix's 15 s).
const DefaultTimeout = 15 * time.Second

// Config configures a Sender.
type Config struct {
	// Timeout bounds one try; DefaultTimeout when 0.
	Timeout time.Duration
	// AllowLoopback lets it reach loopback addresses (locally, a receiver
	// on this machine). Private, link-local and metadata addresses stay
	// refused.
	AllowLoopback bool
	// ExtraPorts are ports an operator allows beyond job.WebPorts; every
	// dial is checked against them, as the endpoint was when registered.
	ExtraPorts []uint16
	NowFunc    func() time.Time
	Logger     *slog.Logger
	// UserAgent is sent with each try.
	UserAgent string
}

// Sender sends signed messages.
type Sender struct {
	cfg    Config
	client *http.Client
}

var _ lifecycle.Sender = (*Sender)(nil)

// errRefusedAddress marks a dial to an address the sender must not reach.
var errRefusedAddress = errors.New("refused address")

// New builds the sender and its client.
func New(c Config) (*Sender, error) {
	if c.Timeout < 0 {
		return nil, errors.New("notifyhttp: timeout must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.UserAgent == "" {
		c.UserAgent = "onejob-notifications/1"
	}
	allowLoopback, extraPorts := c.AllowLoopback, slices.Clone(c.ExtraPorts)
	dialer := &net.Dialer{Timeout: c.Timeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", errRefusedAddress, address)
		}
		if allowLoopback && ap.Addr().Unmap().IsLoopback() {
			return nil
		}
		if !job.PublicAddr(ap.Addr()) || !job.PortAllowed(ap.Port(), extraPorts) {
			return fmt.Errorf("%w: %s", errRefusedAddress, address)
		}
		return nil
	}}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   c.Timeout,
		ResponseHeaderTimeout: c.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{Transport: tr, Timeout: c.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Sender{cfg: c, client: client}, nil
}

// Send signs and POSTs one message: its status, or why none came.
func (s *Sender) Send(ctx context.Context, m lifecycle.Message) job.TryResult {
	start := s.cfg.NowFunc()
	h, err := webhooks.Headers(m.Secrets, m.ID, start, m.Body)
	if err != nil {
		return job.TryResult{Error: "bad_secret"}
	}
	timeout := s.cfg.Timeout
	if m.Timeout > 0 && m.Timeout < timeout {
		timeout = m.Timeout // a slow endpoint's (job.SlowTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL, strings.NewReader(string(m.Body)))
	if err != nil {
		return job.TryResult{Error: "bad_url"}
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	// The try's span, for a receiver to join its job's trace (issue 42;
	// nothing for an untraced job).
	propagate.Inject(ctx, req.Header)
	resp, err := s.client.Do(req)
	latency := s.cfg.NowFunc().Sub(start)
	if err != nil {
		return job.TryResult{Latency: latency, Error: classify(err)}
	}
	defer resp.Body.Close()
	// A little of the answer is read so the connection can be reused;
	// none of it is kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return job.TryResult{Status: resp.StatusCode, Latency: latency, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), s.cfg.NowFunc())}
}

// classify names why no status came, for the delivery's record.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, errRefusedAddress):
		return "refused_address"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "x509"):
		return "tls"
	}
	return "connection_failed"
}

// retryAfter reads Retry-After: seconds or an HTTP date; 0 when absent or
// unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
