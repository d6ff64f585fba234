package job

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Endpoints (notifications' second part; notify.go has the events, delivery.go
// their deliveries): where an owner's events go, which URLs and addresses
// they may use, their secrets and their leases.

// Endpoint limits.
const (
	MaxEndpointsPerOwner = 10
	MaxEndpointURLBytes  = 2048
	// SecretOverlap is how long a rotated secret still signs: each delivery
	// carries both signatures until then, so a receiver can switch over.
	SecretOverlap = 24 * time.Hour
	// SecretPrefix starts every signing secret (Standard Webhooks).
	SecretPrefix = "whsec_"
	// MaxPreviousSecrets is how many rotated secrets may still be in their
	// overlap: every delivery carries one signature per secret.
	MaxPreviousSecrets = 4
	// MinEndpointLease and MaxEndpointLease bound a temporary endpoint's
	// lease (`onejob webhooks listen`'s: renewed while the command runs,
	// gone once a killed command stops renewing it).
	MinEndpointLease = 5 * time.Second
	MaxEndpointLease = 24 * time.Hour
)

// Endpoint is where an owner's events go.
type Endpoint struct {
	ID     string
	Owner  string
	URL    string
	Events []EventType // empty: every type
	// Secret signs every delivery; each of Previous too, until its Until.
	// Both are sealed (lifecycle.Sealer): only the sender can open them,
	// and these rules never need to.
	Secret    string
	Previous  []PreviousSecret
	CreatedAt time.Time
	UpdatedAt time.Time
	// FailingSince is the first failed try of the current run of failures
	// (no delivery, no gap over FailureGap between failures); zero while
	// the endpoint answers. LastFailureAt is the latest failure recorded
	// (written at most every FailureGap/2, so a failing endpoint costs a
	// write or two a day, not one per try).
	FailingSince  time.Time
	LastFailureAt time.Time
	// SlowSince is the first 2xx that took SlowAfter or more since the
	// last fast one; zero while the endpoint answers promptly.
	SlowSince time.Time
	// DisabledAt and DisabledReason: no more tries are made.
	DisabledAt     time.Time
	DisabledReason string
	// Lease, when set, makes the endpoint temporary: it expires at
	// ExpiresAt unless renewed (DecideRenew) before then.
	Lease     time.Duration
	ExpiresAt time.Time
	// Backlog counts the deliveries fanned out to the endpoint since it
	// began failing or went slow (DecideQueue); zero while it answers
	// promptly, and set back to zero by its next prompt 2xx.
	Backlog  int
	Revision int64
}

// MaxEndpointBacklog bounds what one endpoint can have queued while it
// fails or answers slowly, so what one owner can queue is bounded too
// (MaxEndpointsPerOwner of these): past it, an event's delivery to that
// endpoint is recorded dropped, never tried (an operator may redeliver
// it). At one event a minute, a failing endpoint fills it in a week,
// past the 5 days after which it is disabled.
const MaxEndpointBacklog = 10_000

// DecideQueue decides whether a new delivery to e is queued. An endpoint
// answering promptly queues it with no count, so no write (what a
// healthy owner's events cost does not change); a failing or slow one
// counts it in Backlog (write: save after) up to limit, and past limit
// drops it (queued false, nothing written).
func DecideQueue(e Endpoint, limit int, now time.Time) (after Endpoint, write, queued bool) {
	if e.FailingSince.IsZero() && e.SlowSince.IsZero() {
		return e, false, true
	}
	if e.Backlog >= limit {
		return e, false, false
	}
	after = e
	after.Backlog++
	after.UpdatedAt = now.UTC()
	after.Revision++
	return after, true, true
}

// Disabled reports whether deliveries to the endpoint stopped.
func (e Endpoint) Disabled() bool { return !e.DisabledAt.IsZero() }

// Expired reports whether a temporary endpoint's lease ran out by now: it
// is gone (no delivery, no listing), whether or not its item is yet.
func (e Endpoint) Expired(now time.Time) bool { return e.Lease > 0 && !now.Before(e.ExpiresAt) }

// Live reports whether deliveries to the endpoint may be made at now.
func (e Endpoint) Live(now time.Time) bool { return !e.Disabled() && !e.Expired(now) }

// Wants reports whether the endpoint asked for events of type t.
func (e Endpoint) Wants(t EventType) bool { return len(e.Events) == 0 || slices.Contains(e.Events, t) }

// PreviousSecret is a rotated secret that still signs until Until.
type PreviousSecret struct {
	Sealed string
	Until  time.Time
}

// Secrets are the (sealed) secrets a delivery at now is signed with,
// newest first.
func (e Endpoint) Secrets(now time.Time) []string {
	out := []string{e.Secret}
	for _, p := range e.previousAt(now) {
		out = append(out, p.Sealed)
	}
	return out
}

// PreviousUntil is when the last rotated secret stops signing; zero when
// none still does.
func (e Endpoint) PreviousUntil(now time.Time) time.Time {
	var last time.Time
	for _, p := range e.previousAt(now) {
		if p.Until.After(last) {
			last = p.Until
		}
	}
	return last
}

// previousAt are the rotated secrets still in their overlap at now, newest
// first.
func (e Endpoint) previousAt(now time.Time) []PreviousSecret {
	var out []PreviousSecret
	for _, p := range e.Previous {
		if now.Before(p.Until) {
			out = append(out, p)
		}
	}
	return out
}

// URLRule says which endpoint URLs are accepted. Deployed, only https with
// a host name or a public address; locally (AllowLoopbackHTTP) also http
// to a loopback address, for a receiver on this machine.
type URLRule struct {
	AllowLoopbackHTTP bool
	// ExtraPorts are ports an operator allows beyond WebPorts.
	ExtraPorts []uint16
}

// CheckURL refuses what an endpoint URL must not be: not absolute, not
// https (or loopback http where allowed), credentials in it, a fragment,
// a port other than WebPorts and the operator's extra ports, or an address
// literal that is not global unicast (PublicAddr). A name is checked again
// when the sender resolves it, at every dial.
func (r URLRule) CheckURL(raw string) error {
	bad := func(why string) error { return &InvalidError{Field: "url", Reason: why} }
	if len(raw) == 0 || len(raw) > MaxEndpointURLBytes {
		return bad(fmt.Sprintf("must be 1–%d bytes", MaxEndpointURLBytes))
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return bad("must be an absolute URL")
	}
	if u.User != nil {
		return bad("must not carry credentials")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("must not have a fragment")
	}
	host := u.Hostname()
	ip, err := netip.ParseAddr(host)
	literal := err == nil
	loopback := host == "localhost" || (literal && ip.Unmap().IsLoopback())
	if r.AllowLoopbackHTTP && (u.Scheme == "http" || u.Scheme == "https") && loopback {
		return nil
	}
	if u.Scheme != "https" {
		return bad("must be https")
	}
	port := uint16(443)
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return bad("must have a valid port")
		}
		port = uint16(n)
	}
	if !PortAllowed(port, r.ExtraPorts) {
		return bad(fmt.Sprintf("must use port %s", portList(r.ExtraPorts)))
	}
	if literal && !PublicAddr(ip) {
		return bad("must not name a private, loopback, link-local, metadata, special-purpose or IPv4-embedding address")
	}
	return nil
}

// PublicAddr reports whether a delivery may go to a: only global unicast.
// IPv4 outside every block of IANA's special-purpose registry (this
// network, private, CGNAT, loopback, link-local with the cloud metadata
// address, IETF protocol assignments, documentation, 6to4 relay,
// benchmarking, AS112 and AMT, multicast, reserved, broadcast); IPv6 only
// inside 2000::/3 (global unicast), less the blocks there that are special
// or embed an IPv4 address a translator would reach: 2001::/23 (Teredo
// 2001::/32 among them), documentation 2001:db8::/32 and 3fff::/20, 6to4
// 2002::/16. Everything outside 2000::/3 is refused with it: IPv4-mapped
// ::ffff:0:0/96 and IPv4-compatible ::/96, NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48, site-local fec0::/10, unique local, link-local,
// discard-only 100::/64 and multicast. An allow list, so a block the
// registry adds later is refused until it is known.
func PublicAddr(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.Is4() {
		for _, p := range specialIPv4 {
			if p.Contains(a) {
				return false
			}
		}
		return true
	}
	if !globalUnicastIPv6.Contains(a) {
		return false
	}
	for _, p := range specialIPv6 {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

var (
	specialIPv4 = prefixes("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16",
		"192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4")
	globalUnicastIPv6 = netip.MustParsePrefix("2000::/3")
	specialIPv6       = prefixes("2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20")
)

func portList(extra []uint16) string {
	var ps []string
	for _, p := range append(slices.Clone(WebPorts), extra...) {
		ps = append(ps, strconv.Itoa(int(p)))
	}
	return strings.Join(ps, " or ")
}

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// WebPorts are the ports a deployed endpoint may use: HTTPS's own and its
// usual alternative. Any other port would make the sender a scanner of
// other services; an operator allows more with URLRule.ExtraPorts.
var WebPorts = []uint16{443, 8443}

// PortAllowed reports whether a delivery may go to port: one of WebPorts
// or of the operator's extra ports.
func PortAllowed(port uint16, extra []uint16) bool {
	return slices.Contains(WebPorts, port) || slices.Contains(extra, port)
}

// NewEndpoint is a new endpoint from an owner's request; its ID and secret
// are the caller's (random).
func NewEndpoint(owner, id, rawURL string, events []EventType, secret string, rule URLRule, lease time.Duration, now time.Time) (Endpoint, error) {
	if err := rule.CheckURL(rawURL); err != nil {
		return Endpoint{}, err
	}
	if lease != 0 && (lease < MinEndpointLease || lease > MaxEndpointLease) {
		return Endpoint{}, &InvalidError{Field: "lease_seconds", Reason: fmt.Sprintf("must be from %d to %d seconds",
			int(MinEndpointLease/time.Second), int(MaxEndpointLease/time.Second))}
	}
	seen := map[EventType]bool{}
	var evs []EventType
	for _, t := range events {
		if !t.Valid() {
			return Endpoint{}, &InvalidError{Field: "events", Reason: "must name only " + eventTypeList()}
		}
		if !seen[t] {
			seen[t] = true
			evs = append(evs, t)
		}
	}
	now = now.UTC()
	e := Endpoint{ID: id, Owner: owner, URL: rawURL, Events: evs, Secret: secret, CreatedAt: now, UpdatedAt: now, Revision: 1}
	if lease > 0 {
		e.Lease, e.ExpiresAt = lease, now.Add(lease)
	}
	return e, nil
}

// ErrNoLease refuses to renew an endpoint that never expires.
var ErrNoLease = errors.New("the endpoint has no lease to renew")

// DecideRenew extends a temporary endpoint's lease from now. One that
// expired is gone (ErrNotFound): a renewal never brings it back, so a
// listener that was away too long registers anew.
func DecideRenew(e Endpoint, now time.Time) (Endpoint, error) {
	now = now.UTC()
	switch {
	case e.Lease == 0:
		return Endpoint{}, fmt.Errorf("%w: it was created without lease_seconds", ErrNoLease)
	case e.Expired(now):
		return Endpoint{}, fmt.Errorf("%w: endpoint %s expired at %s", ErrNotFound, e.ID, e.ExpiresAt.Format(time.RFC3339))
	}
	e.ExpiresAt = now.Add(e.Lease)
	e.UpdatedAt = now
	e.Revision++
	return e, nil
}

func eventTypeList() string {
	var names []string
	for _, t := range EventTypes() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// ErrTooManySecrets refuses a rotation while MaxPreviousSecrets rotated
// secrets are still in their overlap (expiring them at once is allowed).
var ErrTooManySecrets = errors.New("too many secrets in their overlap")

// DecideRotate replaces an endpoint's (sealed) secret. The old one keeps
// signing for SecretOverlap, as does every earlier one still in its own
// overlap, so a second rotation never drops a secret a receiver may still
// use; expirePrevious drops them all at once (after a leak), the old one
// with them.
func DecideRotate(e Endpoint, sealed string, expirePrevious bool, now time.Time) (Endpoint, error) {
	now = now.UTC()
	prev := e.previousAt(now)
	switch {
	case expirePrevious:
		prev = nil
	case len(prev) >= MaxPreviousSecrets:
		return Endpoint{}, fmt.Errorf("%w: at most %d rotated secrets sign at once; expire them (expire_previous=now) or wait until %s",
			ErrTooManySecrets, MaxPreviousSecrets, prev[len(prev)-1].Until.Format(time.RFC3339))
	default:
		prev = append([]PreviousSecret{{Sealed: e.Secret, Until: now.Add(SecretOverlap)}}, prev...)
	}
	e.Previous = prev
	e.Secret = sealed
	e.UpdatedAt = now
	e.Revision++
	return e, nil
}
