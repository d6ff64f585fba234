package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// Starter starts a job's execution. It must be idempotent (an execution
// named by job.ExecutionName is: the job's ID, or the end that woke it):
// started reports whether this call began a new execution rather than
// finding one.
type Starter interface {
	Start(ctx context.Context, j job.Job) (started bool, err error)
}

// SweeperConfig wires a Sweeper.
type SweeperConfig struct {
	Store   Store
	Starter Starter
	// Grace leaves young jobs to the API's own start.
	Grace time.Duration
	// RestartRunning also starts executions for open jobs past their first
	// attempt that were created before the sweeper: only where an
	// execution can be lost while its job survives, the local stack, whose
	// Step Functions keeps executions in memory and loses them only with
	// the stack (whose new sweeper then restarts them). In AWS such a
	// job's execution runs (a start is a no-op) or has closed (its name
	// can never be used again), so there it would only spend the account's
	// StartExecution quota, once per open job per sweep.
	RestartRunning bool
	// PromptStarter starts the jobs handed off to the sweeper (Prompt);
	// Starter when nil.
	PromptStarter Starter
	// Limit bounds the open jobs one sweep reads (0 means 1000); the next
	// sweep goes on after them.
	Limit int
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// Tracer records each restart in its job's trace (nil: none).
	Tracer Tracer
	Logger *slog.Logger
	// Events receives the age of the oldest unknown attempt; NoEvents when nil.
	Events Events
	// Breakers, when set, has each sweep release the attempts a provider's
	// health still counts as holding it although they closed (resolved by
	// an operator, or left by a runner that crashed).
	Breakers *Breakers
	// HealthStore lists the providers' health for that release.
	HealthStore HealthStore
	// Owners, when set, has each sweep recount the owners' counters that a
	// crash left too high (or too low) once the owner has been quiet
	// (job.DecideRecount).
	Owners OwnerStore
	// Endpoints, when set with Owners, has the recount count each owner's
	// webhook endpoints too.
	Endpoints EndpointLister
	// Purger, when set, has a sweep delete what expired, at most once per
	// PurgeEvery (default 10 minutes: it scans the tables): locally, where
	// the DynamoDB has no TTL. In AWS, TTL does it.
	Purger     ExpiredPurger
	PurgeEvery time.Duration
}

// Sweeper starts the executions of jobs that need one and have none
// (job.Stranded): left pending by an API crash between the create and the
// start, or a start throttled past the API's retries; woken from a park by
// an applier whose start failed. It restarts those of open jobs orphaned
// by a lost local stack (RestartRunning), and reports the age of the
// oldest unknown attempt.
type Sweeper struct {
	cfg SweeperConfig
	// began is when the sweeper was made: RestartRunning restarts only
	// the jobs created before.
	began time.Time
	mu    sync.Mutex
	// purged is when the last purge ran.
	purged time.Time
	// cursor is where the next sweep reads the open jobs from: a sweep
	// reads at most Limit of them and the next goes on from there, back to
	// the oldest after the last (review M5: a backlog of old open jobs
	// never hides a newer pending one). cycleOldest is the oldest unknown
	// attempt seen since the cycle began, lastOldest that of the last
	// whole cycle: the metric covers every page, not only this sweep's.
	cursor                  string
	cycleOldest, lastOldest time.Duration
}

// NewSweeper checks the store and starter and defaults the rest.
func NewSweeper(c SweeperConfig) (*Sweeper, error) {
	switch {
	case c.Store == nil || c.Starter == nil:
		return nil, errors.New("lifecycle: the sweeper needs a store and a starter")
	case c.Grace < 0 || c.Limit < 0:
		return nil, errors.New("lifecycle: the sweeper's grace and limit must not be negative")
	}
	if c.Limit == 0 {
		c.Limit = 1000
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
	if c.PurgeEvery <= 0 {
		c.PurgeEvery = 10 * time.Minute
	}
	if c.PromptStarter == nil {
		c.PromptStarter = c.Starter
	}
	return &Sweeper{cfg: c, began: c.NowFunc()}, nil
}

// EndpointLister lists an owner's webhook endpoints (NotificationStore's).
type EndpointLister interface {
	Endpoints(ctx context.Context, owner string) ([]job.Endpoint, error)
}

// SweepReport says what a sweep did.
type SweepReport struct {
	Open                 int     `json:"open"`
	Pending              int     `json:"pending"`
	Started              int     `json:"started"`
	OldestUnknownSeconds float64 `json:"oldest_unknown_seconds"`
	// Released counts attempts a provider's health held although closed.
	Released int `json:"released"`
	// Recounted counts owners whose counters were repaired.
	Recounted int `json:"recounted"`
	// PurgedJobs and PurgedAttempts count what expired and was deleted.
	PurgedJobs     int `json:"purged_jobs"`
	PurgedAttempts int `json:"purged_attempts"`
	// HandedOff is the job a hand-off named (Prompt); empty for a sweep.
	HandedOff string `json:"handed_off,omitempty"`
}

// purgeDue reports whether a purge is due at now, and if so marks it done.
func (w *Sweeper) purgeDue(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.purged.IsZero() && now.Sub(w.purged) < w.cfg.PurgeEvery {
		return false
	}
	w.purged = now
	return true
}

// recount repairs the counters of every owner that is busy or has open
// jobs, from the open jobs themselves.
func (w *Sweeper) recount(ctx context.Context, now time.Time) (int, error) {
	busy, err := w.cfg.Owners.BusyOwners(ctx)
	if err != nil {
		return 0, err
	}
	open, err := w.cfg.Owners.OpenJobsByOwner(ctx)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, u := range busy {
		seen[u.Owner] = true
	}
	listed := len(busy)
	for owner := range open {
		if !seen[owner] {
			u, err := w.cfg.Owners.Usage(ctx, owner)
			if err != nil {
				return 0, err
			}
			busy = append(busy, u)
		}
	}
	repaired := 0
	for i, u := range busy {
		if err := w.settleStale(ctx, u, now); err != nil {
			return repaired, err
		}
		truth := job.Truth{Open: open[u.Owner].Total, ByMinute: open[u.Owner].ByMinute, Endpoints: -1, Listed: i < listed}
		if w.cfg.Endpoints != nil && now.Sub(u.EndpointsAt) >= job.RecountQuiet && (u.Endpoints > 0 || now.Sub(u.UpdatedAt) >= job.RecountQuiet) {
			// Counted only when a repair may apply: one Query per owner
			// with endpoints whose counter has not moved lately (however
			// busy its jobs keep it: review L2), or per quiet owner.
			eps, err := w.cfg.Endpoints.Endpoints(ctx, u.Owner)
			if err != nil {
				return repaired, err
			}
			truth.Endpoints = len(eps)
		}
		fixed, err := w.repairCounts(ctx, u, open[u.Owner], truth.Endpoints, now)
		if err != nil {
			return repaired, err
		}
		if fixed {
			// The counters moved: a whole recount waits for the next sweep.
			repaired++
			continue
		}
		after, ok := job.DecideRecountOf(u, truth, now)
		if !ok {
			continue
		}
		done, err := w.cfg.Owners.Recount(ctx, u, after)
		if err != nil {
			return repaired, err
		}
		if done {
			repaired++
			w.cfg.Logger.WarnContext(ctx, "owner_recounted", "owner", u.Owner, "unfinished_was", u.Unfinished,
				"unfinished", after.Unfinished, "holds_was", u.Holds, "endpoints_was", u.Endpoints, "endpoints", after.Endpoints)
		}
	}
	return repaired, nil
}

// repairCounts repairs an owner's settled minutes and its endpoint counter
// while the owner stays busy (job.DecideCounts, DecideCount,
// DecideEndpoints; endpoints -1: not counted). fixed reports whether a
// repair changed a count; a minute at zero dropped is not one.
func (w *Sweeper) repairCounts(ctx context.Context, u job.OwnerUsage, open job.OpenJobs, endpoints int, now time.Time) (bool, error) {
	fixes, check := job.DecideCounts(u, open, now)
	for _, m := range check {
		jobs, err := w.cfg.Owners.JobsOfMinute(ctx, u.Owner, m, now.Add(-job.SettleGrace))
		if err != nil {
			return false, err
		}
		if fix, ok := job.DecideCount(m, u.Counted[m], jobs); ok {
			fixes = append(fixes, fix)
		}
	}
	if endpoints >= 0 {
		if fix, ok := job.DecideEndpoints(u, endpoints, now); ok {
			fixes = append(fixes, fix)
		}
	}
	fixed := false
	for _, fix := range fixes {
		done, err := w.cfg.Owners.SetCount(ctx, u.Owner, fix, now)
		if err != nil {
			return fixed, err
		}
		if done && fix.From != fix.To {
			fixed = true
			w.cfg.Logger.WarnContext(ctx, "owner_count_repaired", "owner", u.Owner, "counter", string(fix.Counter),
				"minute", fix.Minute, "was", fix.From, "now", fix.To)
		}
	}
	return fixed, nil
}

// settleStale settles an owner's budget reservations that outlived what
// made them (job.DecideReservation): a settling write lost to a crash or a
// fault, a create whose job was never written, a launch that did not
// apply. It reads each stale reservation's job; traffic on the owner does
// not hold it back, since each decision is about one attempt alone.
func (w *Sweeper) settleStale(ctx context.Context, u job.OwnerUsage, now time.Time) error {
	for _, key := range job.StaleReservations(u.Budget, now) {
		id, _, ok := job.ParseAttemptKey(key)
		var j job.Job
		var err error
		if ok {
			j, err = w.cfg.Store.Current(ctx, id)
		}
		found := ok && err == nil
		if err != nil && !errors.Is(err, job.ErrNotFound) {
			return err
		}
		release, cost := job.DecideReservation(key, j, found)
		if !release {
			continue
		}
		if err := w.cfg.Owners.Release(ctx, u.Owner, key, u.Budget.Reserved[key], cost, now); err != nil {
			return err
		}
		w.cfg.Logger.WarnContext(ctx, "budget_reservation_settled", "owner", u.Owner, "reservation", key,
			"reserved_usd", u.Budget.Reserved[key].USD(), "cost_usd", cost.USD(), "job_found", found)
	}
	return nil
}

// advance moves the sweep's cursor on to next (back to the oldest after
// the last page) and returns the oldest unknown attempt to report: the
// oldest of this cycle so far and of the last whole one.
func (w *Sweeper) advance(next string, oldest time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cycleOldest = max(w.cycleOldest, oldest)
	report := max(w.cycleOldest, w.lastOldest)
	w.cursor = next
	if next == "" {
		w.lastOldest, w.cycleOldest = w.cycleOldest, 0
		report = w.lastOldest
	}
	return report
}

// Sweep runs once.
func (w *Sweeper) Sweep(ctx context.Context) (SweepReport, error) {
	now := w.cfg.NowFunc()
	log := w.cfg.Logger
	w.mu.Lock()
	cursor := w.cursor
	w.mu.Unlock()
	q := OpenQuery{CreatedBefore: now.Add(-w.cfg.Grace), Limit: w.cfg.Limit, Cursor: cursor}
	page, err := w.cfg.Store.ListOpen(ctx, q)
	if errors.Is(err, ErrInvalidCursor) {
		// A position this store no longer reads (another deployment's):
		// start again from the oldest.
		q.Cursor = ""
		page, err = w.cfg.Store.ListOpen(ctx, q)
	}
	if err != nil {
		return SweepReport{}, err
	}
	jobs := page.Jobs
	var rep SweepReport
	var oldest time.Duration
	var errs []error
	for _, j := range jobs {
		rep.Open++
		if j.Status == job.StatusPending {
			rep.Pending++
		}
		for _, a := range j.Attempts {
			if a.State == job.AttemptUnknown && !a.UnknownSince.IsZero() {
				oldest = max(oldest, now.Sub(a.UnknownSince))
			}
		}
		// Locally (RestartRunning) a running job's execution is restarted
		// too, if the job is older than the sweeper: its execution went with
		// the stack that ran it.
		restart := w.cfg.RestartRunning && j.CreatedAt.Before(w.began) && j.Status != job.StatusPending && !job.Parked(j)
		if !job.Stranded(j, w.cfg.Grace, now) && !restart {
			// Driven by a live execution, parked on work at its providers
			// (no execution needed), or not yet past its grace.
			continue
		}
		started, err := w.restart(ctx, j)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if started {
			rep.Started++
			log.WarnContext(ctx, "execution_restarted", "job_id", j.ID, "job_status", string(j.Status))
		}
	}
	oldest = w.advance(page.Next, oldest)
	rep.OldestUnknownSeconds = oldest.Seconds()
	w.cfg.Events.OldestUnknown(ctx, oldest)
	if w.cfg.Purger != nil && w.purgeDue(now) {
		jobs, attempts, err := w.cfg.Purger.PurgeExpired(ctx, now)
		rep.PurgedJobs, rep.PurgedAttempts = jobs, attempts
		if err != nil {
			errs = append(errs, err)
		}
	}
	if w.cfg.Owners != nil {
		n, err := w.recount(ctx, now)
		rep.Recounted = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if w.cfg.Breakers != nil && w.cfg.HealthStore != nil {
		n, err := w.releaseHeld(ctx, now)
		rep.Released = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	log.InfoContext(ctx, "sweep_done", "open", rep.Open, "pending", rep.Pending, "started", rep.Started,
		"oldest_unknown_seconds", rep.OldestUnknownSeconds, "released", rep.Released, "recounted", rep.Recounted,
		"purged_jobs", rep.PurgedJobs, "purged_attempts", rep.PurgedAttempts)
	return rep, errors.Join(errs...)
}

// Prompt starts a job handed off to the sweeper (HandoffStarter: its
// start failed, throttled past the API's tries) at once, instead of on the
// schedule after Grace. A job gone, or no longer pending (started
// meanwhile, or cancelled), is nothing to do; a start that fails again is
// an error, and the schedule's sweep finds the job.
func (w *Sweeper) Prompt(ctx context.Context, jobID string) (SweepReport, error) {
	rep := SweepReport{HandedOff: jobID}
	j, err := w.cfg.Store.Get(ctx, jobID)
	if errors.Is(err, job.ErrNotFound) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	if !job.ShouldStart(j) {
		return rep, nil
	}
	rep.Open, rep.Pending = 1, 1
	started, err := w.start(ctx, w.cfg.PromptStarter, semconv.SpanHandoff, j)
	if err != nil {
		w.cfg.Logger.WarnContext(ctx, "handoff_start_failed", "job_id", jobID, "error", err.Error())
		return rep, err
	}
	if started {
		rep.Started = 1
	}
	w.cfg.Logger.InfoContext(ctx, "handoff_start_done", "job_id", jobID, "started", started)
	return rep, nil
}

// Invoked is the sweeper function's handler: a HandoffEvent starts its job
// (Prompt); any other input, the schedule's, sweeps (Sweep).
func (w *Sweeper) Invoked() func(context.Context, json.RawMessage) (SweepReport, error) {
	return func(ctx context.Context, in json.RawMessage) (SweepReport, error) {
		var h HandoffEvent
		if json.Unmarshal(in, &h) == nil && h.JobID != "" {
			return w.Prompt(ctx, h.JobID)
		}
		return w.Sweep(ctx)
	}
}

// HandoffStarter starts a job's execution through Starter, and hands a job
// whose start failed (throttled past the caller's tries, say) to Handoff:
// deployed, an asynchronous invoke of the sweeper function, which starts
// it within seconds (Sweeper.Prompt) rather than on the schedule after
// the sweep's grace. The hand-off carries the job's ID only, so one lost
// or repeated changes nothing but how soon.
type HandoffStarter struct {
	Starter Starter
	// Handoff reaches the sweeper; nil leaves a failed start to the schedule.
	Handoff Handoff
	Logger  *slog.Logger
}

// Start starts j's execution. A failed start handed off is no error: the
// job is the sweeper's now (started false); one that could not be handed
// off either returns both errors.
func (h HandoffStarter) Start(ctx context.Context, j job.Job) (bool, error) {
	started, err := h.Starter.Start(ctx, j)
	if err == nil || h.Handoff == nil {
		return started, err
	}
	if herr := h.Handoff.Handoff(ctx, j.ID); herr != nil {
		return false, errors.Join(err, fmt.Errorf("hand-off to the sweeper: %w", herr))
	}
	if h.Logger != nil {
		h.Logger.WarnContext(ctx, "execution_start_handed_off", "job_id", j.ID, "error", err.Error())
	}
	return false, nil
}

// restart starts j's execution again, in a span of j's trace.
func (w *Sweeper) restart(ctx context.Context, j job.Job) (bool, error) {
	return w.start(ctx, w.cfg.Starter, semconv.SpanRestart, j)
}

// start starts j's execution through s, in a span of j's trace named name.
func (w *Sweeper) start(ctx context.Context, s Starter, name string, j job.Job) (started bool, err error) {
	ctx, span := startSpan(ctx, w.cfg.Tracer, name, j)
	defer func() { span.End(err) }()
	return s.Start(ctx, j)
}

// releaseHeld releases every attempt a provider's health counts as holding
// it (or as overdue: job.HoldOverdue) that is no longer open: its job says
// so (the job item is the authority). Only entries older than the
// provider's slow bound are checked, so a call that just went slow is left
// to its runner.
func (w *Sweeper) releaseHeld(ctx context.Context, now time.Time) (int, error) {
	all, err := w.cfg.HealthStore.ListHealth(ctx)
	if err != nil {
		return 0, err
	}
	released := 0
	for _, h := range all {
		slow := w.cfg.Breakers.Policy(h.Provider).SlowCallAfter
		for _, key := range append(h.HeldKeys(), h.OverdueKeys()...) {
			if _, over := h.Overdue[key]; !over && now.Sub(h.HoldSince(key)) < slow {
				continue
			}
			id, n, ok := job.ParseAttemptKey(key)
			if !ok {
				continue
			}
			j, err := w.cfg.Store.Get(ctx, id)
			if err != nil && !errors.Is(err, job.ErrNotFound) {
				return released, err
			}
			if a, found := j.Attempt(n); err == nil && found && a.State.Open() {
				continue
			}
			w.cfg.Breakers.Observe(ctx, h.Provider, job.HealthEvent{Kind: job.HealthReleased, Attempt: key})
			released++
		}
	}
	return released, nil
}
