package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Errors every Store reports with these meanings; callers match them with
// errors.Is. A failed condition is not an error: it is Applied{OK: false}.
var (
	// ErrUnavailable wraps faults that survived the store's own retries
	// (throttling, 5xx, timeouts, lost connections): retry later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrRefused wraps a request the store refused for good (validation,
	// access denied, no such table): a fault of the deployment or of the
	// request, which a retry would only repeat. Never an outage.
	ErrRefused = errors.New("store refused the request")
	// ErrTooLarge is wrapped by *TooLargeError.
	ErrTooLarge = errors.New("job too large to store")
	// ErrInvalidCursor reports a list cursor this store did not issue.
	ErrInvalidCursor = errors.New("invalid cursor")
	// ErrContention reports a transition that kept losing to concurrent
	// writers.
	ErrContention = errors.New("too much contention on job")
)

// TooLargeError reports a job that would outgrow what the store keeps in
// one item (its input, its result and its attempts together). Nothing was
// written.
type TooLargeError struct {
	Bytes int // the job's size as the store counts it; 0 if only the store knows
	Limit int
	Cause error
}

func (e *TooLargeError) Error() string {
	s := fmt.Sprintf("job too large to store (limit %d bytes", e.Limit)
	if e.Bytes > 0 {
		s += fmt.Sprintf(", %d bytes", e.Bytes)
	}
	s += ")"
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Store keeps jobs. Each job is one item: Create is one conditional write,
// and Apply executes one decided transition as one conditional write.
// Implementations: dynamo.Store (DynamoDB) and dev/memstore (tests); the
// conformance suite in verify/storetest holds them to this contract.
type Store interface {
	// Create stores a new job unless its ID exists. If it exists, the
	// existing job is returned: replayed when the request fingerprints
	// match, else with a *job.KeyReusedError.
	Create(ctx context.Context, j job.Job) (existing job.Job, replayed bool, err error)
	// Get reads a job consistently; job.ErrNotFound when absent.
	Get(ctx context.Context, id string) (job.Job, error)
	// Current reads, consistently, the live incarnation of the key whose
	// job is id (any incarnation of it): a replay of a key that made a new
	// job after its first expired finds that job. job.ErrNotFound when no
	// incarnation is live.
	Current(ctx context.Context, id string) (job.Job, error)
	// Apply executes a decided transition. A write that lost its condition
	// is Applied{OK: false} with the current job.
	Apply(ctx context.Context, t job.Transition) (Applied, error)
	// ListAttempts returns a job's attempts, oldest first.
	ListAttempts(ctx context.Context, j job.Job) ([]job.Attempt, error)
	// List returns one page of an owner's jobs, newest first.
	List(ctx context.Context, q ListQuery) (Page, error)
	// ListOpen returns one page of the jobs with work in flight
	// (job.Unsettled: no outcome yet, or an attempt running or unknown),
	// oldest first (eventually consistent: re-read before acting). Next is set
	// while more may follow; a page may hold fewer than Limit jobs (one
	// that ended meanwhile is left out) and still have a Next.
	ListOpen(ctx context.Context, q OpenQuery) (Page, error)
}

// HealthStore keeps each provider's breaker (job.Health): one record per
// provider, changed only by a decided job.HealthChange written as one
// conditional write on the revision the decision read. Implementations:
// dynamo.Store and dev/memstore, held to it by verify/storetest.
type HealthStore interface {
	// Health reads a provider's health consistently; job.NewHealth(provider)
	// when nothing was ever written for it.
	Health(ctx context.Context, provider string) (job.Health, error)
	// SaveHealth writes a decided change unless the stored revision moved
	// since the decision read it: then ok is false and current is the
	// stored health, on which to decide again. A lost race is not an error.
	SaveHealth(ctx context.Context, c job.HealthChange) (ok bool, current job.Health, err error)
	// ListHealth returns every provider's stored health, by name.
	ListHealth(ctx context.Context) ([]job.Health, error)
}

// OwnerStore keeps each owner's counters (job.OwnerUsage): each change is
// one conditional update of the owner's record. Implementations:
// dynamo.Store and dev/memstore, held to it by verify/storetest.
type OwnerStore interface {
	// CountJob counts one more unfinished job of the owner unless it has
	// limit already (limit 0: no bound), and spends its create rate (spend,
	// nil for none: job.RateSpend) in the same write. ok is false at the
	// limit or past the rate, with nothing written; u is the owner's
	// counters after (or as they are, which tells which).
	CountJob(ctx context.Context, owner string, limit int, spend *job.RateSpend, now time.Time) (ok bool, u job.OwnerUsage, err error)
	// A count is also kept by its minute (now's: job.CountMinute), which
	// the count's uncount names by the time it was counted at.
	// UncountJob counts one job fewer, counted at counted (never below
	// zero, in all or in its minute).
	UncountJob(ctx context.Context, owner string, counted, now time.Time) error
	// CountHold and UncountHold do the same for held requests.
	CountHold(ctx context.Context, owner string, limit int, now time.Time) (ok bool, u job.OwnerUsage, err error)
	UncountHold(ctx context.Context, owner string, counted, now time.Time) error
	// Usage reads an owner's counters (zero for an owner never counted).
	Usage(ctx context.Context, owner string) (job.OwnerUsage, error)
	// Recount replaces the counters with after (job.DecideRecount) unless
	// they moved since before: ok false, nothing written.
	Recount(ctx context.Context, before, after job.OwnerUsage) (ok bool, err error)
	// Reserve sets r.Amount aside for r.Key from the owner's budget unless
	// less is left, bringing the budget to r.Window and the deployment's
	// amount first (job.DecideBudget, one more write when it moved). A key
	// reserved already is ok (already true: nothing written). ok false:
	// refused, nothing written; u is the owner's record as it is.
	Reserve(ctx context.Context, owner string, r job.Reservation) (ok, already bool, u job.OwnerUsage, err error)
	// Release settles key's reservation at cost: reserved (what was set
	// aside under key) less cost returns to the headroom, cost counts as
	// spent. A key not reserved (settled already) writes nothing.
	Release(ctx context.Context, owner, key string, reserved, cost job.Money, now time.Time) error
	// SetBudget applies an operator's change of the owner's amount.
	SetBudget(ctx context.Context, owner string, change job.OwnBudget, b job.Budget, now time.Time) (job.OwnerUsage, error)
	// ListOwners returns one page of every owner's record, by owner.
	ListOwners(ctx context.Context, limit int, cursor string) ([]job.OwnerUsage, string, error)
	// BusyOwners lists the owners whose counters may not be zero.
	BusyOwners(ctx context.Context) ([]job.OwnerUsage, error)
	// OpenJobsByOwner counts every owner's jobs without an outcome, in all
	// and by the minute each was created in.
	OpenJobsByOwner(ctx context.Context) (map[string]job.OpenJobs, error)
	// JobsOfMinute counts the owner's jobs created in minute m that are
	// unsettled, or settled by a write after settledAfter.
	JobsOfMinute(ctx context.Context, owner string, m int64, settledAfter time.Time) (job.MinuteJobs, error)
	// SetCount writes a decided repair (job.DecideCounts, DecideCount,
	// DecideEndpoints) unless the count it was decided on moved: ok false,
	// nothing written.
	SetCount(ctx context.Context, owner string, fix job.CountFix, now time.Time) (ok bool, err error)
}

// InboundLog remembers the providers' webhook deliveries taken lately, by
// (provider, delivery id), each until its signature goes stale: a copy of
// a delivery taken already (a provider's retry after a lost answer, or
// someone replaying a captured one) is answered without asking the
// provider again (review N-L1). Implementations: dynamo.Store and
// dev/memstore, held to it by verify/storetest.
type InboundLog interface {
	// TakeInbound records d unless a record of its (provider, id) is
	// live (its Expires is not yet past now, in whole seconds, as
	// DynamoDB's TTL counts): then taken is false and nothing is written,
	// unless the live record is d's own (same Token: this take's write,
	// retried after a lost reply), which is taken. One conditional write;
	// a lost race is taken false, not an error.
	TakeInbound(ctx context.Context, d InboundDelivery, now time.Time) (taken bool, err error)
	// ForgetInbound removes the record d's take wrote (its Token), so
	// that a retry of a delivery whose taking failed is taken again; a
	// record another take wrote is left alone.
	ForgetInbound(ctx context.Context, d InboundDelivery) error
}

// InboundDelivery is a verified webhook delivery as InboundLog keeps it.
type InboundDelivery struct {
	Provider string
	// ID is the delivery's id (provider.EventDelivery.ID): any non-empty
	// string the provider signed.
	ID string
	// Expires is when its signature stops verifying (whole seconds).
	Expires time.Time
	// Token is fresh for each take (NewInboundToken): it tells the take's
	// own record from another's.
	Token string
}

// NewInboundToken is a fresh random InboundDelivery.Token.
func NewInboundToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ExpiredPurger deletes what expired (finished jobs past their retention,
// their attempt copies): DynamoDB's TTL in AWS, the sweeper locally, where
// dynalite has none. Reads already treat expired jobs as gone.
type ExpiredPurger interface {
	PurgeExpired(ctx context.Context, now time.Time) (jobs, attempts int, err error)
}

// OpenQuery selects jobs without an outcome.
type OpenQuery struct {
	// CreatedBefore leaves out jobs created at or after it.
	CreatedBefore time.Time
	Limit         int    // at least 1
	Cursor        string // a Page.Next of the same query; empty for the oldest
}

// Certifications tells whether a provider holds a passing certification for
// a job type's contract version.
type Certifications interface {
	Certified(ctx context.Context, jobType, contractVersion, provider string) (bool, error)
}

// Applied is what executing a transition did.
type Applied struct {
	// OK is false when the condition failed: another writer got there first.
	OK bool
	// Job is the job after the write, or the current job when !OK.
	Job job.Job
}

// Page sizes of a listing.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// ListQuery selects an owner's jobs.
type ListQuery struct {
	Owner  string
	Status job.Status // empty: any
	Limit  int        // 1..MaxPageSize; 0 means DefaultPageSize
	Cursor string
}

// Page is one page of an owner's jobs, newest first.
type Page struct {
	Jobs []job.Job
	Next string // opaque; empty on the last page
}

// Events receives lifecycle events, for metrics.
type Events interface {
	AttemptStarted(ctx context.Context, j job.Job, a job.Attempt)
	AttemptUnknown(ctx context.Context, j job.Job, a job.Attempt)
	AttemptDiscarded(ctx context.Context, j job.Job, a job.Attempt)
	Fallback(ctx context.Context, j job.Job, a job.Attempt)
	RaceLost(ctx context.Context, lost job.LostRace)
	// OldestUnknown reports the age of the oldest unknown attempt (0: none).
	OldestUnknown(ctx context.Context, age time.Duration)
	// AttemptSettled reports an unknown attempt settled out of band, by the
	// reconciler (a.Resolution.By is job.Reconciler) or an operator, took
	// after it became unknown.
	AttemptSettled(ctx context.Context, j job.Job, a job.Attempt, took time.Duration)
	// ProviderOpened reports a provider's breaker opening.
	ProviderOpened(ctx context.Context, h job.Health)
	// AdmissionUnrecorded reports an admission decided while the
	// provider's health could not be read or written (a.Unrecorded):
	// refused (a.Allowed false: the job waits), or let through a provider
	// that declares no limits.
	AdmissionUnrecorded(ctx context.Context, provider string, a job.Admission)
	// AttemptAbandoned reports an attempt whose work at a provider
	// outlived its deadline and was given up (job.DecideAbandon).
	AttemptAbandoned(ctx context.Context, j job.Job, a job.Attempt)
}

// NoEvents discards every event.
type NoEvents struct{}

func (NoEvents) AttemptStarted(context.Context, job.Job, job.Attempt)                {}
func (NoEvents) AttemptUnknown(context.Context, job.Job, job.Attempt)                {}
func (NoEvents) AttemptDiscarded(context.Context, job.Job, job.Attempt)              {}
func (NoEvents) Fallback(context.Context, job.Job, job.Attempt)                      {}
func (NoEvents) RaceLost(context.Context, job.LostRace)                              {}
func (NoEvents) OldestUnknown(context.Context, time.Duration)                        {}
func (NoEvents) AttemptSettled(context.Context, job.Job, job.Attempt, time.Duration) {}
func (NoEvents) ProviderOpened(context.Context, job.Health)                          {}
func (NoEvents) AdmissionUnrecorded(context.Context, string, job.Admission)          {}
func (NoEvents) AttemptAbandoned(context.Context, job.Job, job.Attempt)              {}

// StreamStore keeps streamed jobs' text as it forms: the log of each
// attempt's chunks (job.StreamChunk), one item per (job, attempt, seq),
// written once and in order by the attempt's writer in the run function,
// read by the job's readers (StreamReader). Implementations: dynamo.Store
// (its streams table) and dev/memstore, held to it by verify/storetest.
type StreamStore interface {
	// AppendChunk writes c as one conditional write on its (job, attempt,
	// seq), to be kept until expires (job.ChunkExpiry). A chunk there
	// already is not written again: written is false, and that is an
	// outcome, not an error (of two writers of the same seq, exactly one
	// writes).
	AppendChunk(ctx context.Context, c job.StreamChunk, expires time.Time) (written bool, err error)
	// ReadChunks reads, strongly consistent, the chunks of job jobID's
	// attempts (by number) past after's place in each (seq beyond the
	// cursor's; an attempt the cursor marks discarded is not read), each
	// attempt's in seq order, attempts in the order given: at most
	// MaxChunksPerRead in all, so a read that returns that many may have
	// left some for the next.
	ReadChunks(ctx context.Context, jobID string, after job.StreamCursor, attempts []int) ([]job.StreamChunk, error)
	// JobStatus reads a job's status eventually consistent: what a
	// streamed call checks about once a second to stop once its job is
	// cancelled (half a read unit per 4 KB of job; job.ErrNotFound when
	// there is none).
	JobStatus(ctx context.Context, id string) (job.Status, error)
}

// MaxChunksPerRead bounds one ReadChunks: at most 800 KiB of text
// (job.MaxChunkBytes each), under DynamoDB's 1 MB a Query answers.
const MaxChunksPerRead = 100
