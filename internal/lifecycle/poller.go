package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// DueStore finds the jobs whose work at a provider is due (job.DueAt): a
// sparse list the store keeps with every write that changes it, never a
// scan. Implementations: dynamo.Store (the by_poll index) and dev/memstore,
// held to it by verify/storetest.
type DueStore interface {
	// DueJobs lists jobs whose work is due at now (job.DueAt(j) ≤ now),
	// each read consistently: at most limit from each partition of the
	// list, the soonest due first, so that no partition hides another's.
	DueJobs(ctx context.Context, now time.Time, limit int) ([]job.Job, error)
}

// PollerConfig wires a Poller.
type PollerConfig struct {
	// Tasks asks the providers and applies what they answer; its Starter
	// wakes the jobs that then need a run.
	Tasks *Tasks
	Due   DueStore
	// Limit bounds the jobs one pass reads from each partition (default
	// 100); the next pass goes on with the rest.
	Limit int
	// Parallel is how many jobs a pass works on at once (default 8).
	Parallel int
	// Breakers (with the providers' own limits) and HealthStore, when
	// set, have each pass also stop counting the holds of cancelled jobs'
	// calls past their provider's max_processing_time and margin
	// (job.HoldOverdue): the pass runs where the providers' configuration
	// is, the sweeper does not.
	Breakers    *Breakers
	HealthStore HealthStore
	NowFunc     func() time.Time
	Logger      *slog.Logger
}

// Poller is the scheduled pass over the work parked jobs left at their
// providers (issue 40): for each attempt whose work is due (job.Dues) it
// asks the provider one question (how it stands, to cancel it, or, past
// its deadline, to cancel it for good) and applies the answer through the
// job's compare-and-swap, as the webhook does; a job that then needs a run
// is started (Tasks.wake). Deployed it runs in the events function (which
// holds the providers' configuration and secrets) on a schedule; locally
// the stack runs it on a compressed one.
type Poller struct {
	cfg PollerConfig
}

// NewPoller checks the tasks and store and defaults the rest.
func NewPoller(c PollerConfig) (*Poller, error) {
	if c.Tasks == nil || c.Due == nil {
		return nil, errors.New("lifecycle: the poller needs tasks and a due store")
	}
	if c.Tasks.cfg.Starter == nil {
		return nil, errors.New("lifecycle: the poller's tasks need a starter, to wake the jobs it ends")
	}
	if c.Limit <= 0 {
		c.Limit = 100
	}
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	if c.NowFunc == nil {
		c.NowFunc = c.Tasks.now
	}
	if c.Logger == nil {
		c.Logger = c.Tasks.log
	}
	return &Poller{cfg: c}, nil
}

// PollReport says what a pass did.
type PollReport struct {
	// Jobs is how many due jobs it read, Asked how many questions it
	// asked their providers, by due kind.
	Jobs  int                 `json:"jobs"`
	Asked map[job.DueKind]int `json:"asked"`
	// Ended counts the attempts whose work ended (answered, failed,
	// cancelled), Abandoned those given up at their deadline.
	Ended     int `json:"ended"`
	Abandoned int `json:"abandoned"`
	// Overdue counts the holds of cancelled jobs' calls that stopped
	// counting toward their provider's bulkhead (job.HoldOverdue).
	Overdue int `json:"overdue"`
	// Batches is what the pass did of provider batches: the due lines
	// sent (SendLines), the open batches asked about (PollBatches).
	Batches BatchReport `json:"batches"`
}

// Pass reads the due jobs and works on each, Parallel at once. One job's
// failure (a store fault, a provider that cannot be reached) does not stop
// the others'; what is left stays due for the next pass.
func (p *Poller) Pass(ctx context.Context) (PollReport, error) {
	rep := PollReport{Asked: map[job.DueKind]int{}}
	jobs, err := p.cfg.Due.DueJobs(ctx, p.cfg.NowFunc(), p.cfg.Limit)
	if err != nil {
		return rep, err
	}
	rep.Jobs = len(jobs)
	var mu sync.Mutex
	var errs []error
	// Due batch lines go out together, a batch per provider, before each
	// job's other due work; then every open batch due is asked about,
	// one question per batch.
	var lines []job.Job
	for _, j := range jobs {
		if slices.ContainsFunc(job.Dues(j, p.cfg.NowFunc()), func(d job.Due) bool { return d.Kind == job.DueLine }) {
			lines = append(lines, j)
		}
	}
	if len(lines) > 0 {
		r, err := p.cfg.Tasks.SendLines(ctx, lines)
		rep.Batches.add(r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if r, err := p.cfg.Tasks.PollBatches(ctx); err != nil || r != (BatchReport{}) {
		rep.Batches.add(r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	slots := make(chan struct{}, p.cfg.Parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			r, err := p.cfg.Tasks.passJob(ctx, j, p.cfg.NowFunc())
			mu.Lock()
			defer mu.Unlock()
			for k, n := range r.Asked {
				rep.Asked[k] += n
			}
			rep.Ended += r.Ended
			rep.Abandoned += r.Abandoned
			if err != nil {
				errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
			}
		})
	}
	wg.Wait()
	if p.cfg.Breakers != nil && p.cfg.HealthStore != nil && ctx.Err() == nil {
		n, err := p.overdueHolds(ctx)
		rep.Overdue = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if rep.Jobs > 0 || rep.Overdue > 0 || rep.Batches != (BatchReport{}) {
		p.cfg.Logger.InfoContext(ctx, "poll_pass_done", "jobs", rep.Jobs, "polls", rep.Asked[job.DuePoll],
			"cancels", rep.Asked[job.DueCancel], "deadlines", rep.Asked[job.DueDeadline], "ended", rep.Ended,
			"abandoned", rep.Abandoned, "overdue", rep.Overdue, "batches", rep.Batches.Batches, "batch_questions", rep.Batches.Asked,
			"batch_lines", rep.Batches.Lines, "errors", len(errs))
	}
	return rep, errors.Join(errs...)
}

// Invoked is the pass as a scheduled function's handler: any input runs
// one pass, within budget.
func (p *Poller) Invoked(budget time.Duration) func(context.Context, json.RawMessage) (PollReport, error) {
	return func(ctx context.Context, _ json.RawMessage) (PollReport, error) {
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		return p.Pass(ctx)
	}
}

// passJob does what is due of j's work (j as DueJobs read it,
// consistently), then wakes the job if that left it needing a run.
func (w *Tasks) passJob(ctx context.Context, j job.Job, now time.Time) (_ PollReport, err error) {
	// A span of the job's trace: its questions' writes and its wake are
	// children.
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanPoll, j)
	defer func() { span.End(err) }()
	rep := PollReport{Asked: map[job.DueKind]int{}}
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return rep, fmt.Errorf("job type %q is not known to this build", j.Type)
	}
	var errs []error
	for _, d := range job.Dues(j, now) {
		rep.Asked[d.Kind]++
		if d.Kind == job.DueLine {
			continue // sent with its provider's other lines (SendLines)
		}
		after, err := w.act(ctx, j, jt, d)
		if err != nil {
			errs = append(errs, err)
		}
		if after.Revision >= j.Revision {
			j = after
		}
		if a, ok := j.Attempt(d.Attempt.Number); ok && !a.State.InFlight() {
			if a.Outcome == "abandoned" {
				rep.Abandoned++
			} else {
				rep.Ended++
			}
		}
	}
	if err := w.wake(ctx, j); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// act does one due thing of attempt d.Attempt's work: one question to its
// provider, its answer applied. Work that ended is applied as the webhook
// applies it (ended); work not ended is heard of (its next poll decided);
// past its deadline, work the answer does not end is given up
// (job.DecideAbandon), as is work whose provider cannot be asked.
func (w *Tasks) act(ctx context.Context, j job.Job, jt JobType, d job.Due) (job.Job, error) {
	a, ok := j.Attempt(d.Attempt.Number)
	if !ok || a.Remote == nil || !a.State.InFlight() {
		return j, nil
	}
	p, ok := w.asyncProvider(a.Provider)
	if !ok {
		if d.Kind == job.DueDeadline {
			return w.cfg.Engine.AbandonOn(ctx, j, a.Number)
		}
		return j, fmt.Errorf("attempt %d's provider %s is not asynchronous here", a.Number, a.Provider)
	}
	req, err := attemptRequest(j, jt, a)
	if err != nil {
		return j, err
	}
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.SettleTimeout)
	defer cancel()
	var work provider.Work
	op := "retrieve"
	switch d.Kind {
	case job.DueCancel, job.DueDeadline:
		if !a.Remote.CancelAt.IsZero() {
			work, err = p.Retrieve(callCtx, a.Remote.ID)
			break
		}
		// Recorded first: the provider is asked to cancel once, by
		// whoever recorded it (a pass running beside this one asks how
		// the work stands instead).
		var recorded bool
		if j, recorded, err = w.cfg.Engine.CancelRemoteOn(ctx, j, a.Number, w.remotePolicy(a.Provider)); err != nil {
			return j, err
		}
		if !recorded {
			work, err = p.Retrieve(callCtx, a.Remote.ID)
			break
		}
		op = "cancel"
		work, err = p.Cancel(callCtx, a.Remote.ID)
	case job.DuePoll:
		work, err = p.Retrieve(callCtx, a.Remote.ID)
	default:
		return j, fmt.Errorf("the pass does nothing for due kind %q", d.Kind)
	}
	w.log.InfoContext(ctx, "provider_polled", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider,
		"provider_work_id", a.Remote.ID, "due", string(d.Kind), "op", op, "status", work.Status, "ended", work.Ended, "ok", err == nil)
	if err == nil && work.Ended {
		if j, err = w.ended(ctx, j, jt, a, work, req); err != nil {
			return j, err
		}
	} else if d.Kind != job.DueDeadline {
		// Asked again on the schedule, whatever it answered: the work is
		// not lost by a question that failed (review N-M1).
		status := a.Remote.Status
		if err == nil {
			status = work.Status
		}
		return w.cfg.Engine.HeardOn(ctx, j, a.Number, status, w.cfg.Poll)
	}
	if d.Kind != job.DueDeadline {
		return j, nil
	}
	if now, ok := j.Attempt(a.Number); ok && !now.State.InFlight() {
		return j, nil
	}
	return w.cfg.Engine.AbandonOn(ctx, j, a.Number)
}

// overdueHolds declares overdue the holds of cancelled jobs' calls past
// their provider's max_processing_time and margin (job.HoldOverdue): they
// stop counting toward its max_concurrent and its owners' shares, and
// operators see them as overdue. Each provider's health is one small item;
// only holds that old are read about, each job by key.
func (p *Poller) overdueHolds(ctx context.Context) (int, error) {
	all, err := p.cfg.HealthStore.ListHealth(ctx)
	if err != nil {
		return 0, err
	}
	now := p.cfg.NowFunc()
	overdue := 0
	for _, h := range all {
		pol := p.cfg.Breakers.Policy(h.Provider)
		for _, key := range h.HeldKeys() {
			if now.Sub(h.HoldSince(key)) < pol.SlowCallAfter {
				continue // just went slow: its runner's
			}
			id, n, ok := job.ParseAttemptKey(key)
			if !ok {
				continue
			}
			j, err := p.cfg.Tasks.cfg.Engine.Get(ctx, id)
			if errors.Is(err, job.ErrNotFound) {
				continue
			}
			if err != nil {
				return overdue, err
			}
			if !job.HoldOverdue(j, n, pol, now) {
				continue
			}
			p.cfg.Breakers.Observe(ctx, h.Provider, job.HealthEvent{Kind: job.HealthOverdue, Attempt: key})
			overdue++
			a, _ := j.Attempt(n)
			p.cfg.Logger.WarnContext(ctx, "hold_overdue", "provider", h.Provider, "job_id", id, "attempt", n, "owner", j.Owner,
				"started_at", a.StartedAt, "overdue_after_s", job.OverdueAfter(pol).Seconds())
		}
	}
	return overdue, nil
}
