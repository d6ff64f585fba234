package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// throttleDrill is a burst of creates while Step Functions throttles a share
// of StartExecution calls: every job must start exactly once, by the API's
// retries, or else by the sweeper function the API hands it to, or else by
// a scheduled sweep, and the drill reports how long each took from its
// create to its execution's start.
type throttleDrill struct {
	Jobs          int     `json:"jobs"`
	Concurrency   int     `json:"concurrency"`
	ThrottleShare float64 `json:"throttle_share"`
	// ThrottledStarts is how many StartExecution calls were refused.
	ThrottledStarts int `json:"throttled_starts"`
	// HandedOff counts the jobs whose API start failed (every try
	// throttled, or its time up), handed to the sweeper function;
	// ByHandoff those the sweeper function started at once, and
	// BySweeper those a scheduled sweep started (from their log lines).
	HandedOff int `json:"handed_off"`
	ByHandoff int `json:"started_by_handoff"`
	BySweeper int `json:"started_by_sweeper"`
	// APIAfterTimeout counts the jobs whose execution the API's own call
	// started after the API had given up on it (and handed the job off).
	APIAfterTimeout int     `json:"started_by_api_after_its_timeout"`
	SweepInterval   string  `json:"local_sweep_interval"`
	SweepGrace      string  `json:"local_sweep_grace"`
	Started         int     `json:"started"`
	StartedTwice    int     `json:"started_twice"`
	Succeeded       int     `json:"succeeded"`
	P50Millis       float64 `json:"start_delay_p50_ms"`
	P99Millis       float64 `json:"start_delay_p99_ms"`
	MaxMillis       float64 `json:"start_delay_max_ms"`
	CreateP99MS     float64 `json:"create_p99_ms"`
	// The baseline: the same burst on the same stack just before, with
	// nothing throttled; P99Ratio is the drill's p99 over the baseline's.
	BaselineP50Millis float64 `json:"baseline_start_delay_p50_ms"`
	BaselineP99Millis float64 `json:"baseline_start_delay_p99_ms"`
	BaselineMaxMillis float64 `json:"baseline_start_delay_max_ms"`
	P99Ratio          float64 `json:"start_delay_p99_ratio_to_baseline"`
	// HandoffBilledMS is the sweeper function's billed time per hand-off,
	// HandoffUSDPerMillion what a million hand-offs cost at the prices
	// used (its invocations, that time at 256 MB, one read of the job).
	HandoffBilledMS      float64 `json:"handoff_sweeper_billed_ms"`
	HandoffUSDPerMillion float64 `json:"handoff_usd_per_million"`
	Seconds              float64 `json:"seconds"`
	// Settled counts the jobs that ended within the drill's deadline.
	Settled int `json:"settled"`
	// Slowest are the jobs that waited longest for their start.
	Slowest []slowStart `json:"slowest_starts,omitempty"`
	// Failed says why the drill did not finish; its figures are then of
	// what it saw until it gave up.
	Failed string `json:"failed,omitempty"`
}

// slowStart is one job's wait from its create to its execution's start.
type slowStart struct {
	JobID   string  `json:"job_id"`
	DelayMS float64 `json:"delay_ms"`
	// By is who started it: api, handoff or sweep.
	By string `json:"by"`
}

// startLog collects, per job, who started its execution other than the
// API: the sweeper's hand-off ("handoff_start_done", started) or a
// scheduled sweep ("execution_restarted"), and which starts were handed
// off ("execution_start_handed_off").
type startLog struct {
	mu        sync.Mutex
	by        map[string]string
	handedOff map[string]bool
}

func (l *startLog) observe(r slog.Record) {
	var id string
	started := false
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "job_id":
			id = a.Value.String()
		case "started":
			started = a.Value.Kind() == slog.KindBool && a.Value.Bool() // sweep_done's is a count
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case r.Message == "execution_start_handed_off":
		l.handedOff[id] = true
	case r.Message == "handoff_start_done" && started:
		l.by[id] = "handoff"
	case r.Message == "execution_restarted":
		l.by[id] = "sweep"
	}
}

// The local sweep runs at a fraction of the deployed one (deploy.SweepEvery,
// deploy.SweepGrace) so the drill ends in seconds; its delays for the jobs
// the sweeper starts scale with it.
const (
	drillSweepInterval = time.Second
	drillSweepGrace    = 2 * time.Second
	drillDeadline      = 5 * time.Minute
)

func measureThrottling(ctx context.Context, o options, dynamoURL string, logOut *slog.Logger) (throttleDrill, error) {
	d := throttleDrill{Jobs: o.drillJobs, Concurrency: 32, ThrottleShare: 0.5,
		SweepInterval: drillSweepInterval.String(), SweepGrace: drillSweepGrace.String()}
	starts := &startLog{by: map[string]string{}, handedOff: map[string]bool{}}
	times := newLambdaTimes() // the sweeper function's invocations are the hand-offs
	observe := func(r slog.Record) { starts.observe(r); times.observe(r) }
	// A drill of Step Functions' throttling, by one owner: not of quotas,
	// nor of the providers' bulkheads (with make run's max_concurrent of 8,
	// 500 jobs of one owner would wait their turns in hold-and-wait loops).
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: dynamoURL,
		TablePrefix: "bench-throttle", CertifyDemo: true, CallTimeout: benchCallTimeout,
		SweepInterval: drillSweepInterval, SweepGrace: drillSweepGrace,
		Logger: slog.New(captureHandler{next: logOut.Handler(), observe: observe}),
		Quotas: &job.Quotas{}, DemoProviders: stack.BreakersNeverAct})
	if err != nil {
		return d, err
	}
	defer s.Close()
	names := dynamo.NamesWithPrefix("bench-throttle")
	reader, err := dynamo.New(dynamo.Config{Client: dynalite.NewClient(dynamoURL), Tables: names})
	if err != nil {
		return d, err
	}
	user, err := newAPIClient(s.APIURL, s.JWTSecret(), "bench-throttle")
	if err != nil {
		return d, err
	}
	b := burstRig{s: s, reader: reader, user: user, jobs: d.Jobs, concurrency: d.Concurrency}

	// The baseline: the same burst on the same stack, nothing throttled.
	slog.Info("throttling drill: baseline", "jobs", d.Jobs)
	base, err := b.run(ctx, "base")
	if err != nil {
		return d, fmt.Errorf("baseline: %w", err)
	}
	if base.settleErr != nil {
		return d, fmt.Errorf("baseline: %w", base.settleErr)
	}
	d.BaselineP50Millis, d.BaselineP99Millis = percentile(base.delays, 0.50), percentile(base.delays, 0.99)
	d.BaselineMaxMillis = percentile(base.delays, 1)

	if err := s.SFN.SetThrottle(ctx, sfnlocal.Throttle{Share: d.ThrottleShare, Seed: 7}); err != nil {
		return d, err
	}
	slog.Info("throttling drill", "jobs", d.Jobs, "throttle_share", d.ThrottleShare)
	start := time.Now()
	msBefore, nBefore := times.snapshot()
	r, err := b.run(ctx, "drill")
	msAfter, nAfter := times.snapshot()
	d.Settled, d.Started, d.StartedTwice, d.Succeeded = r.settled, len(r.delays), r.twice, r.succeeded
	if err != nil {
		return d, err
	}
	for i, id := range r.ids {
		if !r.started[i] {
			continue // never started: counted by Started falling short
		}
		starts.mu.Lock()
		by := cmp.Or(starts.by[id], "api")
		starts.mu.Unlock()
		switch by {
		case "handoff":
			d.ByHandoff++
		case "sweep":
			d.BySweeper++
		}
		if by == "api" && r.startedAt[i].After(r.answered[i]) {
			// The API's start timed out (APIStartTimeout) while its call
			// was on its way, and Step Functions took it after all: the
			// hand-off then found the job started.
			by = "api, after its timeout"
			d.APIAfterTimeout++
		}
		d.Slowest = append(d.Slowest, slowStart{JobID: id, DelayMS: float64(r.delay[i].Microseconds()) / 1000, By: by})
	}
	slices.SortFunc(d.Slowest, func(a, b slowStart) int { return cmp.Compare(b.DelayMS, a.DelayMS) })
	d.Slowest = d.Slowest[:min(len(d.Slowest), 10)]
	starts.mu.Lock()
	for _, id := range r.ids {
		if starts.handedOff[id] {
			d.HandedOff++
		}
	}
	starts.mu.Unlock()
	if d.ThrottledStarts, err = s.SFN.ThrottledStarts(ctx); err != nil {
		return d, err
	}
	if d.HandedOff > 0 {
		// Each hand-off: the sweeper function's invocations and billed
		// time, and its one read of the job (1 RRU).
		n := float64(nAfter[deploy.FnSweeper]-nBefore[deploy.FnSweeper]) / float64(d.HandedOff)
		ms := (msAfter[deploy.FnSweeper] - msBefore[deploy.FnSweeper]) / float64(d.HandedOff)
		pr := prices()
		d.HandoffBilledMS = round2(ms)
		d.HandoffUSDPerMillion = round2(n*pr[priceLambdaReq].USD + ms/1000*lambdaMemoryGB*pr[priceLambdaGBs].USD +
			pr[priceDynamoRead].USD)
	}
	d.P50Millis, d.P99Millis, d.MaxMillis = percentile(r.delays, 0.50), percentile(r.delays, 0.99), percentile(r.delays, 1)
	d.P99Ratio = ratio(d.P99Millis, d.BaselineP99Millis)
	d.CreateP99MS = percentile(r.createMS, 0.99)
	d.Seconds = round2(time.Since(start).Seconds())
	return d, r.settleErr
}

// burstRig sends bursts of creates to one stack as one owner.
type burstRig struct {
	s                 *stack.Stack
	reader            *dynamo.Store
	user              *apiClient
	jobs, concurrency int
}

// burstResult is what one burst saw: per job (in create order) its ID, when its
// create was answered, whether and when its execution started and after
// how long; and the totals.
type burstResult struct {
	ids       []string
	answered  []time.Time
	createMS  []time.Duration
	started   []bool
	startedAt []time.Time
	delay     []time.Duration
	delays    []time.Duration // of the jobs started
	settled   int
	succeeded int
	twice     int
	// settleErr: not every job settled within drillDeadline (the figures
	// are of those that did start).
	settleErr error
}

// run sends the burst (jobs creates from concurrency clients), waits for
// every job to settle, and reads each one's execution.
func (b burstRig) run(ctx context.Context, label string) (burstResult, error) {
	r := burstResult{ids: make([]string, b.jobs), answered: make([]time.Time, b.jobs), createMS: make([]time.Duration, b.jobs),
		started: make([]bool, b.jobs), startedAt: make([]time.Time, b.jobs), delay: make([]time.Duration, b.jobs)}
	run := time.Now().UnixNano()
	errs := make([]error, b.jobs)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range b.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.jobs {
					return
				}
				t0 := time.Now()
				id, code, err := b.user.create(ctx, fmt.Sprintf("%s-%d-%d", label, run, i),
					map[string]any{"type": "demo", "input": map[string]any{"prompt": fmt.Sprintf("%s %d", label, i)}})
				r.answered[i] = time.Now()
				r.createMS[i] = r.answered[i].Sub(t0)
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("create answered %d", code)
				}
				r.ids[i], errs[i] = id, err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}

	// Every job settles; then each has one execution, and its start delay.
	// The deadline only bounds a failure; past it the figures are still
	// taken, of the jobs that did start.
	r.settled, r.settleErr = settle(ctx, r.ids, b.reader.Get, drillDeadline, time.Second)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	calls := map[string]int{}
	for _, k := range b.s.Sim.IdempotencyKeys(sim.DemoPrimary) {
		calls[k]++
	}
	for i, id := range r.ids {
		j, err := b.reader.Get(ctx, id)
		if err != nil {
			return r, err
		}
		if j.Status == job.StatusSucceeded && j.AttemptCount == 1 {
			r.succeeded++
		}
		if calls[job.AttemptKey(id, 1)] > 1 || j.AttemptCount > 1 {
			r.twice++
		}
		arn := strings.Replace(b.s.SFN.StateMachineARN(), ":stateMachine:", ":execution:", 1) + ":" + id
		out, err := b.s.SFNClient.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		var missing *sfntypes.ExecutionDoesNotExist
		if errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return r, fmt.Errorf("execution of %s: %w", id, err)
		}
		r.started[i], r.startedAt[i] = true, aws.ToTime(out.StartDate)
		r.delay[i] = r.startedAt[i].Sub(j.CreatedAt)
		r.delays = append(r.delays, r.delay[i])
	}
	return r, nil
}

// settle waits until every job has ended and has no open attempt, or until
// deadline has passed, reading the jobs not settled yet every poll (a job
// settled stays so; reading all 500 back to back would load the DynamoDB
// the drill's own starts and runs use); it returns how many had settled
// when it stopped.
func settle(ctx context.Context, ids []string, get func(context.Context, string) (job.Job, error), deadline, poll time.Duration) (int, error) {
	stop := time.Now().Add(deadline)
	left := slices.Clone(ids)
	for {
		var still []string
		for _, id := range left {
			j, err := get(ctx, id)
			if err != nil {
				return len(ids) - len(left), err
			}
			if !j.Status.Terminal() || len(j.Open()) > 0 {
				still = append(still, id)
			}
		}
		left = still
		done := len(ids) - len(left)
		if done == len(ids) {
			return done, nil
		}
		if !time.Now().Before(stop) {
			return done, fmt.Errorf("%d of %d jobs settled within %s", done, len(ids), deadline)
		}
		select {
		case <-ctx.Done():
			return done, ctx.Err()
		case <-time.After(poll):
		}
	}
}

func (d throttleDrill) check() error {
	if d.Failed != "" {
		return fmt.Errorf("throttling drill failed: %s (%d of %d started, %d twice, %d succeeded, %d starts throttled)",
			d.Failed, d.Started, d.Jobs, d.StartedTwice, d.Succeeded, d.ThrottledStarts)
	}
	if d.Started != d.Jobs || d.StartedTwice != 0 || d.Succeeded != d.Jobs || d.ThrottledStarts == 0 {
		return fmt.Errorf("throttling drill: %d of %d started, %d twice, %d succeeded, %d starts throttled",
			d.Started, d.Jobs, d.StartedTwice, d.Succeeded, d.ThrottledStarts)
	}
	return nil
}
