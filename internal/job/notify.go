package job

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Notifications: an owner registers endpoints (webhook endpoints in the
// API); the write that ends a job, or blocks it on an unknown attempt,
// records the event in the job's outbox (Job.Outbox) when the job notifies
// (Job.Notify, decided at create from the owner's endpoint count), so no
// crash between that write and a delivery can lose it. The notifier fans
// each event out into one delivery per endpoint that wants it and tries
// each delivery on the retry schedule until the endpoint answers 2xx.

// EventType names what happened to a job.
type EventType string

// Event types an endpoint may ask for.
const (
	EventJobSucceeded   EventType = "job.succeeded"
	EventJobFailed      EventType = "job.failed"
	EventJobCancelled   EventType = "job.cancelled"
	EventAttemptUnknown EventType = "attempt.unknown"
)

// EventTypes lists every event type.
func EventTypes() []EventType {
	return []EventType{EventJobSucceeded, EventJobFailed, EventJobCancelled, EventAttemptUnknown}
}

// Valid reports whether t is a known event type.
func (t EventType) Valid() bool { return slices.Contains(EventTypes(), t) }

// Notice is one event recorded in a job's outbox by the write that made it
// happen.
type Notice struct {
	// ID is the event's message ID (the webhook-id header), the same on
	// every try of every delivery of the event: MessageID.
	ID   string
	Type EventType
	At   time.Time
	// Attempt is the attempt that became unknown; 0 for job events.
	Attempt int
	// Recorded is the job as the write that recorded the event left it,
	// in what may change later (AsRecorded); nil for notices recorded
	// before it was kept.
	Recorded *Recorded
}

// Recorded is what a notice keeps of its job, so that its deliveries show
// the job as it was when the event happened, not as the notifier reads it
// later (review: an attempt.unknown event whose data already said
// succeeded). Everything else the owner's view shows either never changes
// once written or is rewound from these: a job's attempts are only ever
// appended, and an ended attempt never moves again, so the attempts that
// were open are the only ones whose state may differ later.
type Recorded struct {
	Status   Status
	Version  int64
	Attempts int
	// Open is the state of each attempt open at the time (at most
	// MaxRecordedOpen of them, the newest: no job has more open at once).
	Open []AttemptMark
}

// AttemptMark is one attempt's state at a moment, and its error's class
// then (an unknown attempt's: ambiguous); the owner's view shows no more
// of an error, and the operators' message is not kept.
type AttemptMark struct {
	Number int
	State  AttemptState
	Class  Class
}

// MaxRecordedOpen bounds a notice's open attempts, so the room the store
// keeps for a full outbox is bounded: the launch rules keep at most a
// running attempt and its hedge open at once.
const MaxRecordedOpen = 4

// record fills in what a notice keeps of after, the job its write leaves.
func record(after Job) *Recorded {
	r := &Recorded{Status: after.Status, Version: after.Version, Attempts: len(after.Attempts)}
	for _, a := range after.Attempts {
		if a.State.Open() {
			m := AttemptMark{Number: a.Number, State: a.State}
			if a.Error != nil {
				m.Class = a.Error.Class
			}
			r.Open = append(r.Open, m)
		}
	}
	if len(r.Open) > MaxRecordedOpen {
		r.Open = r.Open[len(r.Open)-MaxRecordedOpen:]
	}
	return r
}

// recordNotices stamps the notices after's write adds (those beyond
// before's outbox) with the job as that write leaves it. The transition
// constructors call it last, once every field of after is final.
func recordNotices(before, after Job) Job {
	if len(after.Outbox) <= len(before.Outbox) {
		return after
	}
	out := slices.Clone(after.Outbox)
	for i := len(before.Outbox); i < len(out); i++ {
		if out[i].Recorded == nil {
			out[i].Recorded = record(after)
		}
	}
	after.Outbox = out
	return after
}

// AsRecorded is j, read later, as it was when n was recorded: its status
// and version then, only the attempts it had, each open one in the state
// it was in (with what its end recorded taken away), and without an
// outcome it did not have yet. A notice without a record gives j as read.
func (j Job) AsRecorded(n Notice) Job {
	r := n.Recorded
	if r == nil {
		return j
	}
	if j.Status != r.Status {
		j.Waiting = nil
	}
	j.Status, j.Version, j.UpdatedAt = r.Status, r.Version, n.At
	if r.Attempts < len(j.Attempts) {
		j.Attempts = j.Attempts[:r.Attempts]
	}
	j.Attempts = slices.Clone(j.Attempts)
	j.AttemptCount = len(j.Attempts)
	for _, m := range r.Open {
		for i, a := range j.Attempts {
			if a.Number != m.Number || a.State == m.State {
				continue
			}
			a.State, a.UpdatedAt = m.State, n.At
			a.FinishedAt, a.Error, a.Usage, a.Resolution, a.Outcome = time.Time{}, nil, nil, nil, ""
			if m.Class != "" {
				a.Error = &Failure{Class: m.Class}
			}
			if m.State != AttemptUnknown {
				a.UnknownSince = time.Time{}
			}
			j.Attempts[i] = a
		}
	}
	if !r.Status.Terminal() {
		j.CompletedBy, j.Result, j.Error, j.Cancellation, j.ExpiresAt = 0, nil, nil, nil, time.Time{}
	}
	return j
}

// MessageID is the stable ID of a job's event: "msg_" and a hash of the
// job, the type and the attempt, so a decision made twice names the same
// message, and the ID carries no '.' (the signed content joins on it).
func MessageID(jobID string, t EventType, attempt int) string {
	sum := sha256.Sum256([]byte(jobID + "\x00" + string(t) + "\x00" + strconv.Itoa(attempt)))
	return "msg_" + hex.EncodeToString(sum[:16])
}

// Pending reports whether the job holds events not yet fanned out.
func (j Job) Pending() bool { return j.Dispatched < len(j.Outbox) }

// MaxOutbox bounds the events one job records, so that what the store
// keeps room for them is bounded too (review L4): the outcome's always has
// a place; attempts that become unknown past MaxOutbox-1 others are not
// told of (the job's own status and the operators' views still show them).
const MaxOutbox = 16

// notice records the event in after's outbox when the job notifies.
func notice(after Job, t EventType, attempt int, now time.Time) Job {
	if !after.Notify || len(after.Outbox) >= MaxOutbox || t == EventAttemptUnknown && len(after.Outbox) >= MaxOutbox-1 {
		return after
	}
	id := MessageID(after.ID, t, attempt)
	for _, n := range after.Outbox {
		if n.ID == id {
			return after
		}
	}
	after.Outbox = append(slices.Clone(after.Outbox), Notice{ID: id, Type: t, At: now.UTC(), Attempt: attempt})
	return after
}

// outcomeEvent is the event an outcome kind records.
func outcomeEvent(k Kind) EventType {
	switch k {
	case KindComplete:
		return EventJobSucceeded
	case KindFail:
		return EventJobFailed
	}
	return EventJobCancelled
}

// DecideDispatched records that the first n notices of the outbox were
// fanned out into deliveries. Fewer than already recorded is a no-op.
func DecideDispatched(j Job, n int, now time.Time) (Transition, error) {
	if n > len(j.Outbox) {
		return Transition{}, fmt.Errorf("%w: %d notices dispatched of %d", ErrInvalidTransition, n, len(j.Outbox))
	}
	if n <= j.Dispatched {
		return noop(j, KindDispatched, 0), nil
	}
	after := j
	after.Dispatched = n
	return bookkeeping(j, after, KindDispatched, 0, now.UTC()), nil
}

// NotifiesFor reports whether a job its owner creates now notifies: the
// owner has an endpoint (a count the create reads with the quota counter).
func NotifiesFor(u OwnerUsage) bool { return u.Endpoints > 0 }

// ---- endpoints ----------------------------------------------------------------

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

// ---- deliveries ---------------------------------------------------------------

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
		State: DeliveryPending, NextAt: now, CreatedAt: now, Revision: 1, ExpiresAt: now.Add(DeliveryRetention).Truncate(time.Second)}
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
