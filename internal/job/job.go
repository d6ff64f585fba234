package job

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Job is the durable intent: who asked for what, against which providers,
// and — once written by compare-and-swap — its outcome.
type Job struct {
	ID             string
	Owner          string
	IdempotencyKey string
	Type           string
	Input          json.RawMessage
	Providers      []string
	// Primary is the job type's primary provider when the job was created
	// (PrimaryOf): the only one it runs on without a certification. It is
	// not the request's first provider, which the client chooses. Empty (a
	// job stored before it was recorded): every provider needs one.
	Primary     string
	Fingerprint string
	Status      Status
	// Version moves only when the outcome is written; completions compare on it.
	Version int64
	// Revision moves on every write of the job item; bookkeeping transitions
	// compare on it so each is decided on the state it will replace.
	Revision     int64
	AttemptCount int
	// Attempts is the authoritative summary of every attempt, oldest first.
	Attempts    []Attempt
	CompletedBy int // the winning attempt's number; 0 while none won
	Result      json.RawMessage
	Error       *Failure
	// Cancellation says who cancelled the job and why, once cancelled.
	Cancellation *Cancellation
	// Waiting says why a job with no open attempt waits, and until when:
	// every provider it may run on next is unavailable (its breaker open).
	// A launch clears it.
	Waiting   *Waiting
	CreatedAt time.Time
	UpdatedAt time.Time
	// WriteToken names the store call that last wrote the job item. A call
	// whose write was applied but whose reply was lost (and whose retry then
	// failed its condition) recognises its own write by it.
	WriteToken string
	// Incarnation counts the jobs an (owner, key) has named: 0 for the
	// first; a create with the key of an expired job makes the next, whose
	// ID carries it (IncarnationID).
	Incarnation int
	// Retention is how long the job is kept once it has an outcome (its
	// type's); ExpiresAt is when, set with the outcome. An unfinished job
	// never expires.
	Retention time.Duration
	ExpiresAt time.Time
	// Tier is how long the job may wait for its answer, decided at create
	// (the request's, within its type's MaxTier, else its type's); empty
	// is TierNow. Its asynchronous attempts run in the provider's mode for
	// it, and its budget prices them at the tier's price (Price.At).
	Tier Tier
	// Notify is set at create when the owner had a notification endpoint
	// (NotifiesFor): only then do the writes that end or block the job
	// record events in Outbox, in the same write, for the notifier.
	// Dispatched counts the notices already fanned out into deliveries.
	Notify     bool
	Outbox     []Notice
	Dispatched int
	// Reservation is what the job's create set aside from its owner's
	// budget for its first attempt (the most that attempt can cost on any
	// of its providers), under which key; nil: not budgeted.
	Reservation *Spend
	// Stream: the create asked for the job's answer as it forms (its
	// "stream": true). A streamed attempt on a provider that streams
	// records its text in the job's stream log (StreamChunk) as it
	// arrives. Stored only when set, so other jobs' items are unchanged;
	// not part of the fingerprint: it is how one watches the job, not what
	// one asked for, so a replay with another value gets the job as it was
	// created.
	Stream bool
	// Trace is the job's trace context: its create's span as W3C Trace
	// Context keeps it, the parent of every later span of the job (runs,
	// holds, settlements, deliveries). Empty for a job created with
	// tracing off and no client traceparent: its item is as before.
	Trace TraceContext
}

// TraceContext is a W3C Trace Context as a job keeps it: the traceparent
// and tracestate header values, opaque to the rules (internal/tracing
// validates and reads them).
type TraceContext struct {
	Parent string
	State  string
}

// IsZero reports a job without a trace context.
func (t TraceContext) IsZero() bool { return t.Parent == "" }

// TraceID is the trace the context names (the traceparent's second
// field, 32 hex digits), or empty when it names none.
func (t TraceContext) TraceID() string {
	// version "-" trace-id "-" parent-id "-" flags, as W3C lays it out.
	p := t.Parent
	if len(p) < 55 || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return ""
	}
	id := p[3:35]
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return id
}

// Retention bounds: a finished job, and so its idempotency key, is kept
// for its type's retention, 30 days unless the type says otherwise, from a
// day (Stripe prunes keys after at least 24 h) to a year.
const (
	DefaultRetention = 30 * 24 * time.Hour
	MinRetention     = 24 * time.Hour
	MaxRetention     = 365 * 24 * time.Hour
)

// retention is the job's own, else the default.
func (j Job) retention() time.Duration {
	if j.Retention > 0 {
		return j.Retention
	}
	return DefaultRetention
}

// Expired reports whether the job is gone for every reader at now: it has
// an outcome and outlived its retention. It may stay stored a while (DynamoDB
// deletes expired items within days), but no read, listing or key sees it.
func (j Job) Expired(now time.Time) bool {
	return j.Status.Terminal() && !j.ExpiresAt.IsZero() && !now.Before(j.ExpiresAt)
}

// Failure describes why a job or an attempt failed.
type Failure struct {
	Class Class `json:"class"`
	// Message is the detail: for a provider's failure, its own error text,
	// which is for operators (it may name accounts or endpoints).
	Message string `json:"message"`
	// ProviderStatus is the provider's HTTP status, 0 if none.
	ProviderStatus int `json:"provider_status,omitempty"`
}

// Call is what a provider call reported beside its answer.
type Call struct {
	ProviderRequestID string
	Usage             *Usage
	// WorkStatus is an asynchronous provider's status of the work as it
	// ended (completed, failed, cancelled …): recorded on the attempt's
	// Remote with the end, in the same write.
	WorkStatus string
	// WorkID is the provider's id of the work the end came from, recorded
	// on a Remote that had none (a batch line: its batch's).
	WorkID string
}

// Usage is what one provider call cost, as the provider reported it, and how
// long it took.
type Usage struct {
	// Model is the model that answered, as the provider names it.
	Model        string
	InputTokens  int
	OutputTokens int
	Latency      time.Duration
}

// Bounds on what a provider reports about a call, which it alone chooses:
// a hostile or broken provider must not push a job item past DynamoDB's
// 400 KB, nor put text in an operator's view that is no ID at all.
const (
	MaxRequestIDBytes = 256
	MaxModelBytes     = 256
)

// bounded is the call as an attempt records it: a request ID only when it
// is 1–MaxRequestIDBytes visible ASCII characters (anything else no one
// could look up), a model name cut to MaxModelBytes.
func (c Call) bounded() Call {
	if !visibleASCII(c.ProviderRequestID, MaxRequestIDBytes) {
		c.ProviderRequestID = ""
	}
	if c.Usage != nil && len(c.Usage.Model) > MaxModelBytes {
		u := *c.Usage
		cut := MaxModelBytes
		for cut > 0 && !utf8.RuneStart(u.Model[cut]) {
			cut--
		}
		u.Model = u.Model[:cut]
		c.Usage = &u
	}
	return c
}

// bounded is the failure as it is recorded: a provider status that is no
// HTTP status (100–599) is none (0).
func (f Failure) bounded() Failure {
	if f.ProviderStatus < 100 || f.ProviderStatus > 599 {
		f.ProviderStatus = 0
	}
	return f
}

func visibleASCII(s string, most int) bool {
	if len(s) == 0 || len(s) > most {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Cancellation records who cancelled a job, when and why (By and Reason may
// be empty: a cancel need not say).
type Cancellation struct {
	By     string
	Reason string
	At     time.Time
}

// Reconciler is who settles an unknown attempt automatically (Resolved.By).
const Reconciler = "reconciler"

// Resolved records how an unknown attempt was settled out of band: by an
// operator (By is their subject, Reason theirs) or automatically (By is
// Reconciler, Reason the provider's evidence), and when.
type Resolved struct {
	Outcome AttemptState
	By      string
	Reason  string
	At      time.Time
}

// Class is a failure's kind: it decides what happens next (see Next).
type Class string

// Failure classes.
const (
	// ClassRetryable: the provider failed in a way another provider may not
	// (5xx, rate limits, a malformed answer): fall back.
	ClassRetryable Class = "retryable"
	// ClassNonRetryable: the request itself is refused (4xx, no such
	// provider, a prompt that cannot render): finalize.
	ClassNonRetryable Class = "non_retryable"
	// ClassAmbiguous: the request may have been acted on (a timeout after
	// sending): the attempt is unknown, never failed.
	ClassAmbiguous Class = "ambiguous"
	// ClassContractViolation: the answer breaks the job type's output
	// contract: fall back.
	ClassContractViolation Class = "contract_violation"
	// ClassUncertified: the provider holds no certification for the
	// contract: it is never called.
	ClassUncertified Class = "uncertified"
	// ClassResolved: an operator settled the attempt out of band.
	ClassResolved Class = "resolved"
	// ClassUnavailable: no provider the job may run on took attempts (their
	// breakers open) within the wait bound (Policy.MaxProviderWait).
	ClassUnavailable Class = "unavailable"
	// ClassSettled: the reconciler settled an unknown attempt as failed on
	// the provider's evidence (it has no trace of the request past its
	// processing time) or at the job type's deadline.
	ClassSettled Class = "settled"
	// ClassRateLimited: the provider answered 429 for its rate: not acted
	// on. Up to MaxRateLimited such attempts neither count toward the
	// type's attempts nor make their provider tried: the job waits for the
	// provider's pause and asks it again.
	ClassRateLimited Class = "rate_limited"
)

// Classes lists every failure class.
func Classes() []Class {
	return []Class{ClassRetryable, ClassNonRetryable, ClassAmbiguous, ClassContractViolation, ClassUncertified,
		ClassResolved, ClassUnavailable, ClassSettled, ClassRateLimited}
}

// MaxRateLimited bounds the rate-limited attempts a job forgives
// (ClassRateLimited): past it they count as any failure, so a provider that
// only ever answers 429 cannot grow a job without bound.
const MaxRateLimited = 5

// forgiven reports whether attempt a is a rate-limited one the job does
// not count: among the job's first MaxRateLimited of them.
func (j Job) forgiven(a Attempt) bool {
	if a.Error == nil || a.Error.Class != ClassRateLimited {
		return false
	}
	n := 0
	for _, b := range j.Attempts {
		if b.Error != nil && b.Error.Class == ClassRateLimited {
			n++
		}
		if b.Number == a.Number {
			return n <= MaxRateLimited
		}
	}
	return false
}

// Counted is how many attempts count toward the type's MaxAttempts: all
// but the forgiven rate-limited ones.
func (j Job) Counted() int {
	n := j.AttemptCount
	for _, a := range j.Attempts {
		if j.forgiven(a) {
			n--
		}
	}
	return n
}

// WaitReason says why a job waits with no attempt open.
type WaitReason string

// Why a job waits.
const (
	// WaitProviders: every provider the job may run on next is unavailable.
	WaitProviders WaitReason = "providers_unavailable"
	// WaitOwnerBackoff: the providers take attempts, but not this owner's
	// for now: its own calls failed at each of them often enough to have
	// opened it had they come from several owners (Health.Backoff).
	WaitOwnerBackoff WaitReason = "owner_backoff"
	// WaitFairShare: the providers take attempts, but this owner holds its
	// fair share of them while other owners wait (Admission.Share).
	WaitFairShare WaitReason = "fair_share"
	// WaitRateLimited: the providers are at their rate (the declared
	// limit, or a 429 pausing them).
	WaitRateLimited WaitReason = "rate_limited"
	// WaitBudget: the owner's budget has too little left for the attempt's
	// worst case (until other attempts settle, or the window ends).
	WaitBudget WaitReason = "budget_exhausted"
)

// WaitReasons lists every WaitReason.
func WaitReasons() []WaitReason {
	return []WaitReason{WaitProviders, WaitOwnerBackoff, WaitFairShare, WaitRateLimited, WaitBudget}
}

// Waiting is a job waiting for a provider to take attempts again.
type Waiting struct {
	Reason WaitReason
	// Since is when the job began waiting; Until when it looks again.
	Since, Until time.Time
	// Detail names the providers and why each is unavailable.
	Detail string
}

// Attempt is one try at a job on one provider.
type Attempt struct {
	JobID    string
	Number   int
	Provider string
	State    AttemptState
	Hedge    bool
	// ReadVersion is the job version this attempt read when it started; its
	// completion compares against it.
	ReadVersion       int64
	StartedAt         time.Time
	UpdatedAt         time.Time
	FinishedAt        time.Time // zero while open
	UnknownSince      time.Time // zero unless it became unknown
	ProviderRequestID string
	Error             *Failure
	// Usage is what its provider call cost; nil when the provider was not
	// called or reported nothing.
	Usage *Usage
	// Resolution is set when an operator resolved the attempt.
	Resolution *Resolved
	// Outcome records how the attempt ended beyond its state: "won",
	// "lost_race", "resolved: <reason>".
	Outcome string
	// WriteToken names the store call that last wrote this attempt (see
	// Job.WriteToken).
	WriteToken string
	// RequestDigest is what the attempt sent: "<contract version>:<sha256
	// of the request as rendered>", recorded in the write that launches it
	// (RequestDigest). A re-send goes only when the request rendered again
	// has the same digest, so it is the same request byte for byte; empty
	// (attempts launched before it was recorded): never re-sent.
	RequestDigest string
	// ProviderKey is the idempotency key the attempt's provider calls
	// carry, recorded in the launch's write: "<deployment>:<job_id>/<n>",
	// so two deployments sharing a provider account never read each
	// other's answers. Empty (attempts launched before it was recorded):
	// the old form, IdempotencyKey.
	ProviderKey string
	// Spend is what the attempt set aside from its owner's budget and, once
	// it ended, what it cost; nil for an attempt not budgeted.
	Spend *Spend
	// Remote is the work an asynchronous attempt left at its provider,
	// recorded in the write right after its submit was answered (or once
	// a lost submit was found again); nil for a synchronous attempt.
	Remote *Remote
}

// IdempotencyKey is the attempt's identity, passed downstream to providers.
func (a Attempt) IdempotencyKey() string { return AttemptKey(a.JobID, a.Number) }

// SentKey is the key attempt a's provider calls carry: its recorded
// ProviderKey, or the old form for an attempt that recorded none.
func (a Attempt) SentKey() string {
	if a.ProviderKey != "" {
		return a.ProviderKey
	}
	return a.IdempotencyKey()
}

// ProviderKeyIn is attempt n's provider key in deployment namespace ns
// ("<ns>:<job_id>/<n>"; the old form when ns is empty).
func ProviderKeyIn(ns, jobID string, n int) string {
	if ns == "" {
		return AttemptKey(jobID, n)
	}
	return ns + ":" + AttemptKey(jobID, n)
}

// AttemptKey is the canonical identity of attempt n of a job: the
// Idempotency-Key every provider call carries, "<job_id>/<n>".
func AttemptKey(jobID string, n int) string { return jobID + "/" + strconv.Itoa(n) }

// ParseAttemptKey is AttemptKey's inverse; ok is false for anything else.
func ParseAttemptKey(key string) (jobID string, n int, ok bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(key[i+1:])
	if err != nil || n < 1 || !ValidID(key[:i]) {
		return "", 0, false
	}
	return key[:i], n, true
}

// Attempt returns attempt n.
func (j Job) Attempt(n int) (Attempt, bool) {
	for _, a := range j.Attempts {
		if a.Number == n {
			return a, true
		}
	}
	return Attempt{}, false
}

// Blocker returns the first attempt that forbids starting another.
func (j Job) Blocker() (Attempt, bool) {
	for _, a := range j.Attempts {
		if a.State.Blocking() {
			return a, true
		}
	}
	return Attempt{}, false
}

// Unsettled reports whether the job still has work in flight: it has no
// outcome, or an attempt of it is running or unknown (a call to a provider
// goes on, or may have, though the job was cancelled or won by another
// attempt). Such a job stays in the sweeper's open index, its execution
// keeps settling those attempts, and it counts against its owner's
// unfinished jobs until its last one ends (issue 26, review H2 and H4).
func (j Job) Unsettled() bool {
	if !j.Status.Terminal() {
		return true
	}
	return slices.ContainsFunc(j.Attempts, func(a Attempt) bool { return a.State.InFlight() })
}

// SettlesJob reports whether the change from before to after ends the
// job's last work in flight: the one write that gives its owner's
// unfinished-job slot back.
func SettlesJob(before, after Job) bool { return before.Unsettled() && !after.Unsettled() }

// Open returns the attempts that may still produce a result.
func (j Job) Open() []Attempt {
	var out []Attempt
	for _, a := range j.Attempts {
		if a.State.Open() {
			out = append(out, a)
		}
	}
	return out
}

// Tried reports whether some attempt already used the provider.
func (j Job) Tried(provider string) bool {
	for _, a := range j.Attempts {
		if a.Provider == provider && !j.forgiven(a) {
			return true
		}
	}
	return false
}

// Last returns the newest attempt.
func (j Job) Last() (Attempt, bool) {
	if len(j.Attempts) == 0 {
		return Attempt{}, false
	}
	return j.Attempts[len(j.Attempts)-1], true
}

// derivedStatus is the status implied by the attempts while no outcome is written.
func (j Job) derivedStatus() Status {
	if j.Status.Terminal() {
		return j.Status
	}
	for _, a := range j.Attempts {
		if a.State == AttemptUnknown {
			return StatusUnknown
		}
	}
	if len(j.Attempts) > 0 {
		return StatusRunning
	}
	return StatusPending
}

func (j Job) withAttempt(a Attempt) Job {
	out := j
	out.Attempts = make([]Attempt, 0, len(j.Attempts)+1)
	replaced := false
	for _, x := range j.Attempts {
		if x.Number == a.Number {
			x, replaced = a, true
		}
		out.Attempts = append(out.Attempts, x)
	}
	if !replaced {
		out.Attempts = append(out.Attempts, a)
		sort.Slice(out.Attempts, func(i, k int) bool { return out.Attempts[i].Number < out.Attempts[k].Number })
	}
	return out
}
