package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// maxTries bounds the decide-and-write loop; each lost round means another
// writer made progress, so the bound is only a safety net.
const maxTries = 64

// EngineConfig wires an Engine.
type EngineConfig struct {
	Store Store
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	Logger  *slog.Logger
	// Events receives lifecycle events; NoEvents when nil.
	Events Events
	// Owners keeps the owners' counters; required when Quotas are on.
	Owners OwnerStore
	// Quotas bound what one owner can have onejob do at once; zero: none,
	// and no counter is kept (a create is then one write).
	Quotas job.Quotas
	// Notifications: owners may register notification endpoints, so a
	// create learns whether the owner has one (job.NotifiesFor) from its
	// counters — read for free with the quota count, else one read.
	// Needs Owners.
	Notifications bool
	// Budget bounds what each owner's attempts may cost per period (a
	// reservation before each attempt, settled when it ends); zero: none.
	// Needs Owners.
	Budget job.Budget
	// Handoff is told of every write that records events for the
	// notifier (deployed: an asynchronous invoke of the notify function),
	// so their first tries start at once; nil leaves them to the
	// notifier's schedule.
	Handoff Handoff
	// Tracer records spans (trace.go); nil: none, and a job keeps only the
	// trace context its request carried (job.Request.Trace).
	Tracer Tracer
}

// Engine creates jobs and executes their transitions: read, let package job
// decide, write conditionally, and decide again on conflict.
type Engine struct {
	store   Store
	now     func() time.Time
	log     *slog.Logger
	events  Events
	owners  OwnerStore
	quotas  job.Quotas
	notify  bool
	budget  job.Budget
	handoff Handoff
	tracer  Tracer
}

// NewEngine checks that a store is given and defaults the rest.
func NewEngine(c EngineConfig) (*Engine, error) {
	if c.Store == nil {
		return nil, errors.New("lifecycle: engine needs a store")
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Events == nil {
		c.Events = NoEvents{}
	}
	if err := c.Quotas.Validate(); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	if c.Quotas.Enabled() && c.Owners == nil {
		return nil, errors.New("lifecycle: quotas need an owner store")
	}
	if c.Notifications && c.Owners == nil {
		return nil, errors.New("lifecycle: notifications need an owner store")
	}
	if err := c.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	if c.Budget.Enabled() && c.Owners == nil {
		return nil, errors.New("lifecycle: budgets need an owner store")
	}
	return &Engine{store: c.Store, now: c.NowFunc, log: c.Logger, events: c.Events, owners: c.Owners, quotas: c.Quotas,
		notify: c.Notifications, budget: c.Budget, handoff: c.Handoff, tracer: c.Tracer}, nil
}

// Quotas are the engine's per-owner bounds.
func (e *Engine) Quotas() job.Quotas { return e.quotas }

// Create creates the job for a request, or returns the job its
// idempotency key already names (replayed = true). A key reused with a
// different request yields *job.KeyReusedError.
//
// With quotas on, the owner's unfinished jobs are counted first (one more
// conditional write): past the quota nothing is written and the create is
// refused with a *job.QuotaError — unless the key names a job already,
// which is answered as a replay: a quota never refuses a job that exists.
// A create that turns out a replay or a conflict gives its count back.
func (e *Engine) Create(ctx context.Context, r job.Request) (created job.Job, replayed bool, err error) {
	ctx, end := e.createSpan(ctx, r)
	defer func() { end(created, replayed, err) }()
	return e.create(ctx, r)
}

func (e *Engine) create(ctx context.Context, r job.Request) (job.Job, bool, error) {
	j, err := job.New(r, e.now())
	if err != nil {
		return job.Job{}, false, err
	}
	j.Trace = e.traceOf(ctx, r)
	if !e.counting() && !e.budget.Enabled() {
		if e.notify {
			u, err := e.owners.Usage(ctx, j.Owner)
			if err != nil {
				return job.Job{}, false, err
			}
			j.Notify = job.NotifiesFor(u)
		}
		return e.store.Create(ctx, j)
	}
	counted := false
	if e.counting() {
		// Counted in the job's creation minute, which its uncount names.
		now := j.CreatedAt
		spend := e.quotas.Creates.Spend(now)
		ok, u, err := e.owners.CountJob(ctx, j.Owner, e.quotas.UnfinishedJobs, spend, now)
		if err != nil {
			return job.Job{}, false, err
		}
		j.Notify = e.notify && job.NotifiesFor(u)
		if !ok {
			return e.refused(ctx, j, e.quotaError(spend, u))
		}
		counted = true
	} else if e.notify {
		u, err := e.owners.Usage(ctx, j.Owner)
		if err != nil {
			return job.Job{}, false, err
		}
		j.Notify = job.NotifiesFor(u)
	}
	reservedBefore := false
	if e.budget.Enabled() {
		if reservedBefore, err = e.reserveFirst(ctx, &j, r.Basis); err != nil {
			if counted {
				e.uncount(ctx, j)
			}
			var over *job.BudgetError
			if errors.As(err, &over) {
				return e.refused(ctx, j, err)
			}
			return job.Job{}, false, err
		}
	}
	created, replayed, err := e.store.Create(ctx, j)
	var reused *job.KeyReusedError
	if replayed || errors.As(err, &reused) {
		// The job was there already: this create counted nothing new. (A
		// store fault leaves the count and the reservation: whether the job
		// was written is unknown; a recount repairs a count too high.)
		if counted {
			e.uncount(ctx, j)
		}
		if j.Reservation != nil && !reservedBefore {
			e.release(ctx, j.Owner, j.Reservation.Key, j.Reservation.Reserved, 0)
		}
	}
	return created, replayed, err
}

// refused answers a create its owner's limits refused (refusal): a replay
// is never refused, whichever incarnation of its key is live (review L1),
// so the key's live job is read first.
func (e *Engine) refused(ctx context.Context, j job.Job, refusal error) (job.Job, bool, error) {
	existing, err := e.store.Current(ctx, j.ID)
	if err == nil && (existing.Owner != j.Owner || existing.IdempotencyKey != j.IdempotencyKey) {
		err = job.ErrNotFound
	}
	switch {
	case err == nil:
		if err := job.SameRequest(existing, j); err != nil {
			return existing, false, err
		}
		return existing, true, nil
	case !errors.Is(err, job.ErrNotFound):
		return job.Job{}, false, err
	}
	return job.Job{}, false, refusal
}

// quotaError is the quota a refused count reached: the create rate when it
// is spent and the unfinished jobs are not, else the unfinished jobs.
func (e *Engine) quotaError(spend *job.RateSpend, u job.OwnerUsage) error {
	if spend != nil && !spend.Allows(u.CreateTAT) && (e.quotas.UnfinishedJobs == 0 || u.Unfinished < e.quotas.UnfinishedJobs) {
		return &job.QuotaError{Limit: job.LimitCreateRate, Quota: e.quotas.Creates.Burst, RetryAfter: spend.RetryAfter(u.CreateTAT)}
	}
	return &job.QuotaError{Limit: job.LimitUnfinishedJobs, Quota: e.quotas.UnfinishedJobs, RetryAfter: job.UnfinishedRetryAfter}
}

// counting reports whether owners' counters are kept.
func (e *Engine) counting() bool { return e.quotas.Enabled() }

// uncount gives back j's count (made at its creation). A failure leaves
// the counter one too high until the sweeper repairs it: logged, not
// returned.
func (e *Engine) uncount(ctx context.Context, j job.Job) {
	if err := e.owners.UncountJob(ctx, j.Owner, j.CreatedAt, e.now()); err != nil {
		e.log.WarnContext(ctx, "owner_uncount_failed", "owner", j.Owner, "job_id", j.ID, "error", err.Error())
	}
}

// handOff tells the notifier of j's new events. A failure is logged, not
// returned: the write stands, and the notifier's scheduled pass finds the
// events (job.Job.Pending) within its interval.
func (e *Engine) handOff(ctx context.Context, j job.Job) {
	if err := e.handoff.Handoff(ctx, j.ID); err != nil {
		e.log.WarnContext(ctx, "notify_handoff_failed", "job_id", j.ID, "error", err.Error())
	}
}

// AcquireHold counts one more held request of owner, refusing past its
// quota with a *job.QuotaError; ReleaseHold gives it back, named by the
// time AcquireHold returned. Without a held-request quota both do nothing.
func (e *Engine) AcquireHold(ctx context.Context, owner string) (time.Time, error) {
	if e.quotas.HeldRequests == 0 {
		return time.Time{}, nil
	}
	now := e.now()
	ok, _, err := e.owners.CountHold(ctx, owner, e.quotas.HeldRequests, now)
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		return time.Time{}, &job.QuotaError{Limit: job.LimitHeldRequests, Quota: e.quotas.HeldRequests, RetryAfter: job.HeldRetryAfter}
	}
	return now, nil
}

// Usage is an owner's counters; zero without quotas.
func (e *Engine) Usage(ctx context.Context, owner string) (job.OwnerUsage, error) {
	if e.owners == nil {
		return job.OwnerUsage{Owner: owner}, nil
	}
	return e.owners.Usage(ctx, owner)
}

// ReleaseHold gives back a held request AcquireHold counted at counted.
func (e *Engine) ReleaseHold(ctx context.Context, owner string, counted time.Time) {
	if e.quotas.HeldRequests == 0 {
		return
	}
	if err := e.owners.UncountHold(ctx, owner, counted, e.now()); err != nil {
		e.log.WarnContext(ctx, "owner_uncount_failed", "owner", owner, "error", err.Error())
	}
}

// Get reads a job (consistent read).
func (e *Engine) Get(ctx context.Context, id string) (job.Job, error) { return e.store.Get(ctx, id) }

// The engine's writes come in two forms: by ID (the job is read first), and
// …On forms that decide on j, the job as the caller last read or wrote it,
// instead of reading it again — a task saves a read per step, and a stale
// copy costs only a retry: the store's condition refuses it and hands back
// the current job, on which the engine decides again.

// run reads the job, then runOn.
func (e *Engine) run(ctx context.Context, id string, decide func(job.Job) (job.Transition, error)) (job.Transition, job.Job, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return job.Transition{}, job.Job{}, err
	}
	return e.runOn(ctx, j, decide)
}

// runOn decides on j, writes, and decides again on conflict. It returns the
// transition that was applied and the job after it.
func (e *Engine) runOn(ctx context.Context, j job.Job, decide func(job.Job) (job.Transition, error)) (job.Transition, job.Job, error) {
	id := j.ID
	for range maxTries {
		t, err := decide(j)
		if err != nil {
			return job.Transition{}, j, err
		}
		res, err := e.apply(ctx, t)
		if err != nil {
			return job.Transition{}, j, err
		}
		if res.OK {
			if !t.Noop() && e.budget.Enabled() {
				e.settleSpend(ctx, t.Before(), res.Job)
			}
			if !t.Noop() && e.counting() && job.SettlesJob(t.Before(), t.After()) {
				// The job's last work ended (its outcome, or, for a job
				// cancelled or won while an attempt ran, that attempt's
				// end): one unfinished job fewer, once — only the write
				// that settles it gives the slot back (review H4).
				e.uncount(ctx, res.Job)
			}
			if e.handoff != nil && len(res.Job.Outbox) > len(t.Before().Outbox) {
				e.handOff(ctx, res.Job)
			}
			return t, res.Job, nil
		}
		j = res.Job
	}
	return job.Transition{}, j, fmt.Errorf("%w %s", ErrContention, id)
}

// StartAttempt starts the next attempt on provider. It is refused with a
// *job.BlockedError while an attempt is starting or unknown.
func (e *Engine) StartAttempt(ctx context.Context, id, provider string) (job.Job, job.Attempt, error) {
	return e.start(ctx, id, provider, job.DecideStart)
}

// StartHedge starts one more attempt on provider beside a running one.
func (e *Engine) StartHedge(ctx context.Context, id, provider string) (job.Job, job.Attempt, error) {
	return e.start(ctx, id, provider, job.DecideHedge)
}

// LaunchOn starts the next attempt of j on provider and claims it for the
// caller, in one write (job.DecideLaunch): the caller calls the provider
// next. It tries once: a launch was decided on j, so when the job moved
// (launched is false) the caller decides again on the job returned —
// another runner may be calling that provider already.
func (e *Engine) LaunchOn(ctx context.Context, j job.Job, provider string) (_ job.Job, _ job.Attempt, launched bool, err error) {
	return e.launchOn(ctx, j, provider, job.DecideLaunch)
}

// LaunchHedgeOn is LaunchOn for a hedge beside a running attempt.
func (e *Engine) LaunchHedgeOn(ctx context.Context, j job.Job, provider string) (_ job.Job, _ job.Attempt, launched bool, err error) {
	return e.launchOn(ctx, j, provider, job.DecideLaunchHedge)
}

// Sending is what an attempt about to be launched will send: its
// provider key and its request's digest (job.Attempt.ProviderKey,
// job.Attempt.RequestDigest).
type Sending func(a job.Attempt) (key, digest string)

// LaunchSentOn is LaunchOn recording on the attempt, in the same write,
// the key and the digest of the request it is about to send, and what it
// set aside from its owner's budget (spend; nil: not budgeted).
func (e *Engine) LaunchSentOn(ctx context.Context, j job.Job, provider string, s Sending, spend *job.Spend) (_ job.Job, _ job.Attempt, launched bool, err error) {
	return e.launchOn(ctx, j, provider, sent(job.DecideLaunch, s, spend))
}

// LaunchHedgeSentOn is LaunchSentOn for a hedge beside a running attempt.
func (e *Engine) LaunchHedgeSentOn(ctx context.Context, j job.Job, provider string, s Sending, spend *job.Spend) (_ job.Job, _ job.Attempt, launched bool, err error) {
	return e.launchOn(ctx, j, provider, sent(job.DecideLaunchHedge, s, spend))
}

func sent(decide func(job.Job, string, time.Time) (job.Transition, error), s Sending, spend *job.Spend) func(job.Job, string, time.Time) (job.Transition, error) {
	return func(j job.Job, provider string, now time.Time) (job.Transition, error) {
		t, err := decide(j, provider, now)
		if err != nil || s == nil {
			return t.WithSpend(spend), err
		}
		a, ok := t.Sent()
		if !ok {
			return t, nil
		}
		return t.WithSent(s(a)).WithSpend(spend), nil
	}
}

func (e *Engine) launchOn(ctx context.Context, j job.Job, provider string, decide func(job.Job, string, time.Time) (job.Transition, error)) (job.Job, job.Attempt, bool, error) {
	t, err := decide(j, provider, e.now())
	if err != nil {
		return j, job.Attempt{}, false, err
	}
	res, err := e.apply(ctx, t)
	if err != nil || !res.OK {
		return res.Job, job.Attempt{}, false, err
	}
	a, _ := res.Job.Attempt(t.AttemptNumber())
	e.started(ctx, res.Job, a)
	return res.Job, a, true, nil
}

func (e *Engine) start(ctx context.Context, id, provider string, decide func(job.Job, string, time.Time) (job.Transition, error)) (job.Job, job.Attempt, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return job.Job{}, job.Attempt{}, err
	}
	return e.startOn(ctx, j, provider, decide)
}

func (e *Engine) startOn(ctx context.Context, j job.Job, provider string, decide func(job.Job, string, time.Time) (job.Transition, error)) (job.Job, job.Attempt, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return decide(j, provider, e.now()) })
	if err != nil {
		return j, job.Attempt{}, err
	}
	a, _ := j.Attempt(t.AttemptNumber())
	e.started(ctx, j, a)
	return j, a, nil
}

func (e *Engine) started(ctx context.Context, j job.Job, a job.Attempt) {
	e.log.InfoContext(ctx, "attempt_started", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider, "hedge", a.Hedge)
	e.events.AttemptStarted(ctx, j, a)
	if a.Number > 1 && !a.Hedge {
		e.events.Fallback(ctx, j, a)
	}
}

// MarkRunning claims a starting attempt for one runner. claimed is false when
// the attempt had already left starting (a redelivery), or was discarded
// because its job finished first: that caller must not call the provider.
func (e *Engine) MarkRunning(ctx context.Context, id string, n int) (j job.Job, claimed bool, err error) {
	if j, err = e.store.Get(ctx, id); err != nil {
		return j, false, err
	}
	return e.MarkRunningOn(ctx, j, n)
}

// MarkRunningOn is MarkRunning deciding on j.
func (e *Engine) MarkRunningOn(ctx context.Context, j job.Job, n int) (_ job.Job, claimed bool, err error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideRunning(j, n, e.now()) })
	if err != nil {
		return j, false, err
	}
	if _, lost := t.LostRace(); lost {
		e.completion(ctx, t, j, n)
		return j, false, nil
	}
	return j, !t.Noop(), nil
}

// MarkUnknown records that attempt n outlived its timeout.
func (e *Engine) MarkUnknown(ctx context.Context, id string, n int, reason string) (job.Job, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return j, err
	}
	return e.MarkUnknownOn(ctx, j, n, reason)
}

// MarkUnknownOn is MarkUnknown deciding on j.
func (e *Engine) MarkUnknownOn(ctx context.Context, j job.Job, n int, reason string) (job.Job, error) {
	id := j.ID
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideUnknown(j, n, reason, e.now()) })
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		if a.State != job.AttemptUnknown {
			// Never claimed: its provider was not called, so it failed.
			e.log.InfoContext(ctx, "attempt_"+string(a.State), "job_id", id, "attempt", n, "provider", a.Provider, "reason", reason)
			return j, nil
		}
		e.log.WarnContext(ctx, "attempt_unknown", "job_id", id, "attempt", n, "provider", a.Provider, "reason", reason)
		e.events.AttemptUnknown(ctx, j, a)
	}
	return j, err
}

// FailAttempt records a provider failure of attempt n (an ambiguous one makes
// it unknown instead).
func (e *Engine) FailAttempt(ctx context.Context, id string, n int, f job.Failure, providerRequestID string) (job.Job, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return j, err
	}
	return e.FailAttemptOn(ctx, j, n, f, job.Call{ProviderRequestID: providerRequestID})
}

// FailAttemptOn is FailAttempt deciding on j, with what the call reported.
func (e *Engine) FailAttemptOn(ctx context.Context, j job.Job, n int, f job.Failure, c job.Call) (job.Job, error) {
	id := j.ID
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) {
		return job.DecideCallFailed(j, n, f, c, e.now())
	})
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		e.log.InfoContext(ctx, "attempt_"+string(a.State), "job_id", id, "attempt", n, "provider", a.Provider,
			"class", f.Class, "error", f.Message)
		if a.State == job.AttemptUnknown {
			e.events.AttemptUnknown(ctx, j, a)
		}
	}
	return j, err
}

// CallCancelledOn ends attempt n, whose streamed call the run closed
// because its job was cancelled, with what the call cost up to then
// (job.DecideCallCancelled), deciding on j; the budget settles it at c's
// usage.
func (e *Engine) CallCancelledOn(ctx context.Context, j job.Job, n int, c job.Call) (job.Job, error) {
	id := j.ID
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideCallCancelled(j, n, c, e.now()) })
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		attrs := []any{"job_id", id, "attempt", n, "provider", a.Provider}
		if u := a.Usage; u != nil {
			attrs = append(attrs, "input_tokens", u.InputTokens, "output_tokens", u.OutputTokens)
		}
		e.log.InfoContext(ctx, "attempt_cancelled", attrs...)
	}
	return j, err
}

// WaitOn records that j waits for providers (job.DecideWait); recording
// the same wait again writes nothing.
func (e *Engine) WaitOn(ctx context.Context, j job.Job, w job.Waiting) (job.Job, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideWait(j, w, e.now()) })
	if err == nil && !t.Noop() {
		e.log.InfoContext(ctx, "job_waiting_for_providers", "job_id", j.ID, "until", w.Until, "detail", w.Detail)
	}
	return j, err
}

// Attempts lists a job's attempts, oldest first.
func (e *Engine) Attempts(ctx context.Context, j job.Job) ([]job.Attempt, error) {
	return e.store.ListAttempts(ctx, j)
}

// ListOpen lists jobs without an outcome, every owner's, oldest first.
func (e *Engine) ListOpen(ctx context.Context, q OpenQuery) (Page, error) {
	return e.store.ListOpen(ctx, q)
}

// List lists an owner's jobs, newest first.
func (e *Engine) List(ctx context.Context, q ListQuery) (Page, error) {
	return e.store.List(ctx, q)
}
