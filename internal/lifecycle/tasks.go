package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// JobType is what the tasks need of a job type's contract.
type JobType interface {
	Timeout() time.Duration
	HedgeAfter() (time.Duration, bool)
	MaxAttempts() int
	// SettleAtDeadline: an unknown attempt on a provider that cannot be
	// asked about it may be settled failed at its deadline.
	SettleAtDeadline() bool
	ContractVersion() string
	// Request renders the provider request for an input; the caller adds
	// the attempt's identity.
	Request(input json.RawMessage) (provider.Request, error)
	// CheckOutput validates an answer against the output schema (unknown
	// top-level keys rejected) and the semantic checks.
	CheckOutput(output json.RawMessage) error
	// StreamField is the output's string member whose growing value a
	// streamed job's deltas carry ("": the raw output fragments).
	StreamField() string
}

// Catalog finds job types by name.
type Catalog interface {
	Lookup(name string) (JobType, bool)
}

// Providers finds provider adapters by name.
type Providers interface {
	Get(name string) (provider.Provider, bool)
}

// TasksConfig wires Tasks.
type TasksConfig struct {
	// Namespace names this deployment in every provider-facing key
	// (job.ProviderKeyIn, OpenAI lookup metadata), so deployments sharing
	// a provider account never read each other's answers
	// (deploy.Namespace). Letters, digits, '.', '_' and '-', at most 64;
	// empty: the old form, "<job_id>/<n>".
	Namespace      string
	Engine         *Engine
	Catalog        Catalog
	Providers      Providers
	Certifications Certifications
	// Inbound remembers the providers' webhook deliveries taken
	// (ProviderEvent needs it; the tasks of the state machine do not).
	Inbound InboundLog
	// Batches keeps the provider batches: the scheduled pass sends and
	// asks about them with it; the run only needs it set (it queues a
	// line on its job alone, and fails one when the deployment keeps no
	// batches).
	Batches BatchStore
	// Batch bounds how lines are gathered into batches and how a batch
	// is asked about (job.DefaultBatchPolicy when zero).
	Batch job.BatchPolicy
	// Wait spaces the checks of a blocked job.
	Wait job.WaitSchedule
	// Poll spaces the questions about an asynchronous attempt's work no
	// webhook has reported (job.DefaultPollSchedule when zero).
	Poll job.PollSchedule
	// RemoteGrace and CancelGrace bound the wait on such work
	// (job.RemotePolicy; job.DefaultRemoteGrace and DefaultCancelGrace
	// when zero): past its tier's window, its provider's
	// max_processing_time and RemoteGrace, or CancelGrace after a cancel
	// was asked, it is given up.
	RemoteGrace, CancelGrace time.Duration
	// Starter starts the execution a parked job needs once its work ended
	// (ProviderEvent, Poller): set where ends are applied outside a run
	// (the events function); nil in the run function.
	Starter Starter
	// CallTimeout caps one provider call, well beyond the job type's
	// timeout: a late answer must still reach the database after the state
	// machine gave up on it. Keep it below the run function's own timeout.
	CallTimeout time.Duration
	// PollInterval is how often a run waits on an attempt another runner
	// holds (a duplicate delivery of the same step).
	PollInterval time.Duration
	// OverdueGrace is how long past its job type's timeout an attempt may
	// stay running before a run declares it unknown (its runner or its
	// execution was lost, so no timeout fired).
	OverdueGrace time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	// AfterFunc waits for a duration (hedge delays, polls); time.After when
	// nil. Tests pass their own, so nothing sleeps.
	AfterFunc func(d time.Duration) <-chan time.Time
	// SlowAfterFunc fires when a call has run past its provider's
	// SlowCallAfter; time.After when nil. Tests pass their own.
	SlowAfterFunc func(d time.Duration) <-chan time.Time
	// Breakers says which providers take attempts and records what calls
	// see of them; nil: every provider takes attempts, nothing is recorded.
	Breakers *Breakers
	// SettleTimeout bounds one question to a provider about an unknown
	// attempt (default 10 s).
	SettleTimeout time.Duration
	// MaxProviderWait bounds how long a job waits for unavailable
	// providers (job.DefaultMaxProviderWait when 0).
	MaxProviderWait time.Duration
	// Streams is streamed jobs' log: a job created with "stream": true
	// whose attempt runs on a provider.Streamer records its text there as
	// it arrives. Nil: no job's text is recorded (its attempts call as any
	// other's).
	Streams StreamStore
	// StreamBatching decides when a streamed attempt's writer writes
	// (job.DefaultStreamBatching when zero).
	StreamBatching job.StreamBatching
	// StreamCheck is how often a streamed call reads its job's status, to
	// stop once it is cancelled (DefaultStreamCheck when 0).
	StreamCheck time.Duration
	Logger      *slog.Logger
}

// DefaultStreamCheck: a streamed call reads its job's status about once a
// second (an eventually consistent GetItem, half a read unit for a job
// under 4 KB): a cancel stops the provider's stream within about a second
// and a read.
const DefaultStreamCheck = time.Second

// Tasks are the logic of the state machine's two tasks: Run, which drives a
// job's attempts (decide, start and claim, call the provider, complete by
// compare-and-swap, hedge), and Hold, which settles what a run left behind
// when it ended without a word and decides how long to wait. Both are
// idempotent under duplicate invocation: they re-read the job and let the
// domain decide, so a redelivery finds the work done, or being done.
type Tasks struct {
	cfg TasksConfig
	log *slog.Logger
	now func() time.Time
}

// NewTasks checks the required dependencies and defaults the rest.
func NewTasks(c TasksConfig) (*Tasks, error) {
	switch {
	case c.Engine == nil, c.Catalog == nil, c.Providers == nil, c.Certifications == nil:
		return nil, errors.New("lifecycle: tasks need an engine, a catalog, providers and certifications")
	case c.CallTimeout <= 0:
		return nil, errors.New("lifecycle: CallTimeout must be positive")
	case !validNamespace(c.Namespace):
		return nil, fmt.Errorf("lifecycle: Namespace %q must be at most 64 letters, digits, '.', '_' or '-'", c.Namespace)
	}
	if err := pricesFitKinds(c.Engine.Budget(), c.Providers, c.Catalog); err != nil {
		return nil, err
	}
	if len(c.Wait.Steps) == 0 {
		c.Wait = job.DefaultWait()
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.Batch == (job.BatchPolicy{}) {
		c.Batch = job.DefaultBatchPolicy()
	}
	if err := c.Batch.Validate(); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	if c.Poll.First <= 0 || c.Poll.Last < c.Poll.First {
		c.Poll = job.DefaultPollSchedule()
	}
	if c.OverdueGrace <= 0 {
		c.OverdueGrace = job.DefaultOverdueGrace(c.CallTimeout)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = time.After
	}
	if c.SlowAfterFunc == nil {
		c.SlowAfterFunc = time.After
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StreamBatching == (job.StreamBatching{}) {
		c.StreamBatching = job.DefaultStreamBatching()
	}
	if c.StreamCheck <= 0 {
		c.StreamCheck = DefaultStreamCheck
	}
	return &Tasks{cfg: c, log: c.Logger, now: c.NowFunc}, nil
}

// RunInput is the execution's input, which the run task receives.
type RunInput struct {
	JobID string `json:"job_id"`
	// TimeoutSeconds is this run's own timeout (RunTimeout): past it, the
	// state machine has given up on the run, so it records what it learns
	// but starts nothing more.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// ExecutionTrace is the job's trace context in the execution's input
	// (NewRunInput): only a traced job's input carries one.
	ExecutionTrace
	// Execution is the execution's input as the state machine hands it
	// to each task ($$.Execution.Input, which always exists, where a path
	// to a field a job without a trace context lacks would fail the state).
	Execution *ExecutionTrace `json:"execution,omitempty"`
}

// ExecutionTrace is the W3C trace context an execution carries.
type ExecutionTrace struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// trace is the trace context a task's input carries (zero: none).
func traceOf(own ExecutionTrace, exec *ExecutionTrace) job.TraceContext {
	if own.Traceparent == "" && exec != nil {
		own = *exec
	}
	return job.TraceContext{Parent: own.Traceparent, State: own.Tracestate}
}

// NewRunInput is the run input of a job's execution; Step Functions
// timeouts are whole seconds.
func NewRunInput(jobID string, runTimeout time.Duration) RunInput {
	return RunInput{JobID: jobID, TimeoutSeconds: ceilSeconds(runTimeout)}
}

// WithTrace is in carrying the job's trace context t (zero: none, and the
// input is as before): fixed for the job, as its ID and timeout are, so a
// repeated start has the same input.
func (in RunInput) WithTrace(t job.TraceContext) RunInput {
	in.ExecutionTrace = ExecutionTrace{Traceparent: t.Parent, Tracestate: t.State}
	return in
}

// RunResult reports a job the run saw done, or parked: its execution
// ends either way.
type RunResult struct {
	JobID  string     `json:"job_id"`
	Status job.Status `json:"status"`
	// Parked says why a job with no outcome ends its execution: the work
	// at a provider it waits on (job.Parked), which its webhook or the
	// scheduled pass hears of.
	Parked string `json:"parked,omitempty"`
}

// HoldInput names the job and how the run before ended.
type HoldInput struct {
	JobID string `json:"job_id"`
	// Error is the error name the state machine caught from the run.
	Error string `json:"error,omitempty"`
	// Execution is the execution's input (RunInput.Execution).
	Execution *ExecutionTrace `json:"execution,omitempty"`
}

// HoldResult is how long the state machine waits before the next run.
type HoldResult struct {
	JobID       string `json:"job_id"`
	WaitSeconds int    `json:"wait_seconds"`
}

// RunTimeout is how long one run of a job type may take: the attempt's
// timeout, plus the hedge delay when the type hedges (the hedge then gets
// its full timeout too). The state machine's TimeoutSeconds for the run.
func RunTimeout(jt JobType) time.Duration {
	d := jt.Timeout()
	if h, ok := jt.HedgeAfter(); ok {
		d += h
	}
	return d
}

// RunTimeouts gives each job type's RunTimeout by name, for whoever starts
// executions (stepfn.StarterConfig.RunTimeoutFunc).
func RunTimeouts(c Catalog) func(jobType string) (time.Duration, bool) {
	return func(name string) (time.Duration, bool) {
		jt, ok := c.Lookup(name)
		if !ok {
			return 0, false
		}
		return RunTimeout(jt), true
	}
}

// ceilSeconds rounds up: Step Functions waits and timeouts are whole seconds.
func ceilSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

func (w *Tasks) load(ctx context.Context, id string) (job.Job, JobType, error) {
	j, err := w.cfg.Engine.Get(ctx, id)
	if err != nil {
		return job.Job{}, nil, err
	}
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return j, nil, &TaskError{Name: ErrNameUnknownJobType, Message: fmt.Sprintf("job type %q is not known to this build", j.Type)}
	}
	return j, jt, nil
}

// certified asks the store, once per provider, whether a provider holds a
// passing certification for the job type's contract: only when job.Next
// wants to know (job.NeedsCertification), so a job on its primary reads
// none. The first error is kept for the caller to return.
type certified struct {
	ctx     context.Context
	store   Certifications
	jobType string
	version string
	mu      sync.Mutex
	seen    map[string]bool
	err     error
}

func (c *certified) ask(p string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok, done := c.seen[p]; done {
		return ok
	}
	ok, err := c.store.Certified(c.ctx, c.jobType, c.version, p)
	if err != nil && c.err == nil {
		c.err = err
	}
	c.seen[p] = ok && err == nil
	return c.seen[p]
}

func (w *Tasks) policy(ctx context.Context, j job.Job, jt JobType) (job.Policy, *certified) {
	c := &certified{ctx: ctx, store: w.cfg.Certifications, jobType: j.Type, version: jt.ContractVersion(), seen: map[string]bool{}}
	return job.Policy{MaxAttempts: jt.MaxAttempts(), CertifiedFunc: c.ask, Wait: w.cfg.Wait, MaxProviderWait: w.cfg.MaxProviderWait}, c
}

// healthPolicy is a provider's health policy: its declared limits (its
// breakers', or its configuration's where no breakers are kept).
func (w *Tasks) healthPolicy(provider string) job.HealthPolicy {
	if w.cfg.Breakers != nil {
		return w.cfg.Breakers.Policy(provider)
	}
	if p, ok := w.cfg.Providers.(interface {
		HealthPolicy(name string) job.HealthPolicy
	}); ok {
		return p.HealthPolicy(provider)
	}
	return job.DefaultHealthPolicy()
}

// remotePolicy is how long work at provider is waited on.
func (w *Tasks) remotePolicy(provider string) job.RemotePolicy {
	return job.RemotePolicy{Poll: w.cfg.Poll, MaxProcessingTime: w.healthPolicy(provider).MaxProcessingTime,
		Grace: w.cfg.RemoteGrace, CancelGrace: w.cfg.CancelGrace}
}

// availability is one run's view of which providers take attempts: what
// the breakers say, except those that refused this run an admission.
type availability struct {
	ctx      context.Context
	owner    string
	breakers *Breakers
	refused  map[string]job.Admission
	// tokens is the most an attempt of the job can use (its input bound
	// and its type's output limit): what a token rate spends.
	tokens int
	// admitted is when each attempt (key) this run admitted was admitted:
	// under a declared rate it must be sent within job.RateMargin of it.
	admitted map[string]time.Time
	now      func() time.Time
}

// sendBy is the last moment attempt key may be sent to provider
// (job.RateLimit.SendBy): zero when the provider declares no rate; for an
// attempt this run did not admit (one launched by an earlier run, never
// sent), already past.
func (v *availability) sendBy(provider, key string) time.Time {
	if v.breakers == nil {
		return time.Time{}
	}
	r := v.breakers.Policy(provider).Rate
	if !r.Declared() {
		return time.Time{}
	}
	at, ok := v.admitted[key]
	if !ok {
		return v.now().Add(-time.Nanosecond)
	}
	return r.SendBy(at)
}

func (v *availability) available(provider string) job.Admission {
	if a, ok := v.refused[provider]; ok {
		return a
	}
	if v.breakers == nil {
		return job.Admission{Allowed: true}
	}
	a := v.breakers.Available(v.ctx, provider, v.owner)
	if !a.Allowed && a.Full {
		// The owner waits for a full provider: Admit records it as
		// waiting (at most a write per owner and half a waiting period),
		// so that owners past their share yield it the next slots. It
		// starts no attempt (no key), and its answer stands for the run.
		a = v.breakers.Admit(v.ctx, provider, "", v.owner)
		if !a.Allowed {
			spanOf(v.ctx).Event(semconv.EventRefused, semconv.Provider, provider, semconv.Reason, a.Reason)
			v.refused[provider] = a
		}
	}
	return a
}

// admit asks the provider's breaker to take attempt key; a refusal is
// remembered for the rest of the run.
func (v *availability) admit(provider, key string) bool {
	if v.breakers == nil {
		return true
	}
	a := v.breakers.AdmitTokens(v.ctx, provider, key, v.owner, v.tokens)
	if !a.Allowed {
		spanOf(v.ctx).Event(semconv.EventRefused, semconv.Provider, provider, semconv.Reason, a.Reason)
		v.refused[provider] = a
		return false
	}
	spanOf(v.ctx).Event(semconv.EventAdmitted, semconv.Provider, provider)
	if v.admitted == nil {
		v.admitted = map[string]time.Time{}
	}
	v.admitted[key] = v.now()
	return true
}

// observe records what an attempt of owner's job saw of its provider.
func (w *Tasks) observe(ctx context.Context, owner string, a job.Attempt, kind job.HealthEventKind) {
	if w.cfg.Breakers != nil {
		w.cfg.Breakers.Observe(ctx, a.Provider, job.HealthEvent{Kind: kind, Attempt: a.IdempotencyKey(), Owner: owner})
	}
}

// Hold settles what a run left when the state machine caught it ending
// without a signal of its own — its timeout, a crash, an error it did not
// name: by the timeout rule, the attempts it was running are unknown,
// never failed (job.DecideUnknown; one never claimed provably never called
// its provider and fails as retryable instead). Then it decides how long
// the state machine waits before the next run: the wait schedule while an
// attempt is open, none otherwise.
func (w *Tasks) Hold(ctx context.Context, in HoldInput) (_ HoldResult, err error) {
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanHold, job.Job{ID: in.JobID, Trace: traceOf(ExecutionTrace{}, in.Execution)})
	defer func() { span.End(err) }()
	j, jt, err := w.load(ctx, in.JobID)
	if err != nil {
		return HoldResult{}, err
	}
	if in.Error != string(job.SignalWaitOpen) {
		reason := "no answer within the run's timeout"
		if in.Error != "" && in.Error != "States.Timeout" {
			reason = "its run ended without a report (" + in.Error + ")"
		}
		for _, a := range j.Open() {
			if a.State == job.AttemptUnknown || a.Remote != nil {
				// An asynchronous attempt's work has an id to ask about:
				// the run that ended was not holding it.
				continue
			}
			if j, err = w.cfg.Engine.MarkUnknownOn(ctx, j, a.Number, reason); err != nil {
				return HoldResult{}, err
			}
		}
	}
	// How long to wait needs no certification: only whether an attempt is
	// open, and since when, or until when the job waits for providers (its
	// own record, Job.Waiting).
	plan := job.Next(j, job.Policy{MaxAttempts: jt.MaxAttempts(), Wait: w.cfg.Wait, MaxProviderWait: w.cfg.MaxProviderWait}, w.now())
	res := HoldResult{JobID: j.ID}
	if plan.Action == job.ActionWait && job.Parked(j) {
		// Only work at providers is open: the next run ends the
		// execution at once (job.Parked).
		res.WaitSeconds = 1
		return res, nil
	}
	if plan.Action == job.ActionWait {
		res.WaitSeconds = ceilSeconds(plan.Wait)
		if plan.Waiting != nil {
			w.log.InfoContext(ctx, "job_waiting_for_providers", "job_id", j.ID, "wait_seconds", res.WaitSeconds, "detail", plan.Waiting.Detail)
		} else {
			w.log.InfoContext(ctx, "attempt_blocked", "job_id", j.ID, "attempt", plan.Blocker, "wait_seconds", res.WaitSeconds)
		}
	}
	return res, nil
}

// pricesFitKinds refuses a price table that would bill a configured
// provider at another tier's price (review N-L7, issue 40): a price that
// declares another kind than the provider's; a tier discount on a
// provider that runs no work at that tier (provider.RunsTier of its kind;
// for one that says no kind, any but an asynchronous one); a price that
// declares no kind for a provider whose kind runs some tier as a batch or
// at a flex tier (its jobs that may wait would be priced at their own
// tier, not at the one it runs them at). What a declared kind's price
// must give (each such tier its rate) was checked where the table was read
// (deploy.BudgetConfig).
func pricesFitKinds(b job.Budget, providers Providers, c Catalog) error {
	waits := longestWaits(c)
	for _, name := range slices.Sorted(maps.Keys(b.Prices)) {
		price := b.Prices[name]
		p, ok := providers.Get(name)
		if !ok {
			continue // not configured here: it runs nothing
		}
		k, kinded := p.(provider.Kinded)
		if !kinded {
			if _, async := p.(provider.Async); !async && price.Discount != (job.Discount{}) {
				return fmt.Errorf("lifecycle: the price of %s has a tier discount, but %s runs no work in a completion window "+
					"(it is not asynchronous): only an asynchronous provider may be priced lower for a tier", name, name)
			}
			continue
		}
		kind := k.Kind()
		switch {
		case price.Kind != "" && price.Kind != kind:
			return fmt.Errorf("lifecycle: the price of %s declares kind %s, but %s is of kind %s", name, price.Kind, name, kind)
		case price.Kind == "" && waitsDiscounted(kind, waits[name]):
			return fmt.Errorf("lifecycle: the price of %s declares no kind, but %s (kind %s) runs jobs that may wait %s at a rate of their own: "+
				"declare its kind and give each its rate (tierDiscountPercent)", name, name, kind, provider.DiscountedTiers(kind))
		}
		for _, t := range job.Tiers() {
			if price.Discount.Of(t) != 0 && !provider.RunsTier(kind, t) {
				return fmt.Errorf("lifecycle: the price of %s has a tier discount for %s, but %s (kind %s) runs no work at that tier: "+
					"only a provider that runs work at a tier may be priced lower for it", name, t, name, kind)
			}
		}
	}
	return nil
}

// longestWaits is, by provider, the longest a job of a type listing it may
// wait (the type's max_tier), where the catalog lists its types.
func longestWaits(c Catalog) map[string]job.Tier {
	out := map[string]job.Tier{}
	names, ok := c.(interface{ Names() []string })
	if !ok {
		return out
	}
	for _, n := range names.Names() {
		jt, ok := c.Lookup(n)
		if !ok {
			continue
		}
		w, ok := jt.(interface {
			MaxTier() job.Tier
			Providers() []string
		})
		if !ok {
			continue
		}
		for _, p := range w.Providers() {
			if !w.MaxTier().Within(out[p].OrNow()) {
				out[p] = w.MaxTier()
			}
		}
	}
	return out
}

// waitsDiscounted reports whether a provider of kind runs, as a batch or
// at a flex tier, some tier a job may wait up to longest.
func waitsDiscounted(kind string, longest job.Tier) bool {
	for _, t := range provider.DiscountedTiers(kind) {
		if t.Within(longest.OrNow()) {
			return true
		}
	}
	return false
}
