package job

import (
	"errors"
	"fmt"
	"maps"
	"time"
)

// Quotas bound what one owner can make onejob do at once, so that one
// owner cannot spend every other owner's share of the providers, the
// functions or the database. A bound of 0 is no bound.
type Quotas struct {
	// UnfinishedJobs bounds an owner's jobs without an outcome.
	UnfinishedJobs int
	// HeldRequests bounds an owner's held GETs (Prefer: wait) at once.
	HeldRequests int
	// Creates bounds how fast an owner creates jobs (a token bucket).
	Creates CreateRate
}

// Enabled reports whether any quota applies, and so whether owners'
// counters are kept at all.
func (q Quotas) Enabled() bool {
	return q.UnfinishedJobs > 0 || q.HeldRequests > 0 || q.Creates.Enabled()
}

// Validate refuses negative bounds.
func (q Quotas) Validate() error {
	if q.UnfinishedJobs < 0 || q.HeldRequests < 0 {
		return errors.New("quotas must not be negative (0 is no bound)")
	}
	return q.Creates.Validate()
}

// The limits an owner can reach, as clients read their names (the
// quota-exceeded problem's limit member, the RateLimit fields' policies).
const (
	LimitUnfinishedJobs = "unfinished-jobs"
	LimitHeldRequests   = "held-requests"
	LimitCreateRate     = "create-rate"
)

// How long a refused client should wait before asking again: a job
// finishes in seconds to minutes, a held request in at most 20 s.
const (
	UnfinishedRetryAfter = 10 * time.Second
	HeldRetryAfter       = 5 * time.Second
)

// ErrQuotaExceeded is wrapped by *QuotaError.
var ErrQuotaExceeded = errors.New("quota exceeded")

// QuotaError refuses a request past one of its owner's quotas. Nothing was
// written.
type QuotaError struct {
	Limit      string // LimitUnfinishedJobs, LimitHeldRequests or LimitCreateRate
	Quota      int
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota exceeded: %s is limited to %d", e.Limit, e.Quota)
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) hold.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// OwnerUsage is one owner's counters: its unfinished jobs, its held requests,
// and its notification endpoints (a count a create reads for free with the
// first). Revision moves with every write.
type OwnerUsage struct {
	Owner      string
	Unfinished int
	Holds      int
	Endpoints  int
	// Counted is Unfinished by the minute each job was counted in, and
	// HeldSince Holds by the minute each request started (CountMinute):
	// each sums to its total.
	Counted   map[int64]int
	HeldSince map[int64]int
	// EndpointsAt is when Endpoints last moved (zero: never recorded).
	EndpointsAt time.Time
	// CreateTAT is the create rate's theoretical arrival time (CreateRate);
	// zero when the owner never spent it.
	CreateTAT time.Time
	// Budget is the owner's spend in the current window (job.Budget);
	// zero while it was never budgeted.
	Budget    OwnerBudget
	UpdatedAt time.Time
	Revision  int64
}

// RecountQuiet is how long an owner's counters must have been left alone
// before a recount may replace them: longer than any create takes between
// counting a job and writing it (the API function's timeout), and than any
// held request lasts, so nothing in flight is missed.
const RecountQuiet = 2 * time.Minute

// DecideRecount repairs an owner's counters from what is true: open is the
// number of its jobs without an outcome. A crash between a job's write and
// its counter's (a create that counted and died, a finish that never
// uncounted) leaves a counter too high; once the owner has been quiet for
// RecountQuiet, the counters are set to the truth (and held requests,
// which last seconds, to none). ok is false when nothing needs writing or
// it is too soon.
func DecideRecount(u OwnerUsage, open int, now time.Time) (OwnerUsage, bool) {
	return DecideRecountOf(u, Truth{Open: open, Endpoints: -1}, now)
}

// Truth is what an owner's counters should say, counted from the jobs and
// the endpoints themselves. Endpoints -1: not counted (left as they are).
type Truth struct {
	Open      int
	ByMinute  map[int64]int // Open by the minute each job was created in
	Endpoints int
	// Listed: the owner is in the busy index, which a write with its
	// counters at zero takes it out of (so an owner marked busy by an
	// endpoint's count is not looked at in every sweep).
	Listed bool
}

// DecideRecountOf is DecideRecount with the owner's endpoints counted too
// (review L2: an endpoint counted whose write failed, and whose uncount
// failed as well, would hold a slot for good).
func DecideRecountOf(u OwnerUsage, truth Truth, now time.Time) (OwnerUsage, bool) {
	endpoints := u.Endpoints
	if truth.Endpoints >= 0 {
		endpoints = truth.Endpoints
	}
	idle := truth.Listed && truth.Open == 0 && len(u.Budget.Reserved) == 0
	byMinute := maps.Clone(truth.ByMinute)
	maps.DeleteFunc(byMinute, func(_ int64, n int) bool { return n == 0 })
	if len(byMinute) == 0 {
		byMinute = nil
	}
	same := u.Unfinished == truth.Open && u.Holds == 0 && u.Endpoints == endpoints && len(u.HeldSince) == 0 &&
		maps.Equal(u.Counted, byMinute)
	if now.Sub(u.UpdatedAt) < RecountQuiet || (same && !idle) {
		return u, false
	}
	after := u
	after.Unfinished, after.Holds, after.Endpoints = truth.Open, 0, endpoints
	after.Counted, after.HeldSince = byMinute, nil
	after.UpdatedAt = now.UTC()
	after.Revision = u.Revision + 1
	return after, true
}
