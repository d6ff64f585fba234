package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

// throttleDrill is a burst of creates while Step Functions throttles a share
// of StartExecution calls: every job must start exactly once, by the API's
// retries or else the sweeper's, and the drill reports how long each took
// from its create to its execution's start.
type throttleDrill struct {
	Jobs          int     `json:"jobs"`
	Concurrency   int     `json:"concurrency"`
	ThrottleShare float64 `json:"throttle_share"`
	// ThrottledStarts is how many StartExecution calls were refused.
	ThrottledStarts int `json:"throttled_starts"`
	// BySweeper counts the jobs whose every API try was throttled: their
	// execution started after the API had answered their create, so the
	// sweeper started it.
	BySweeper     int     `json:"started_by_sweeper"`
	SweepInterval string  `json:"local_sweep_interval"`
	SweepGrace    string  `json:"local_sweep_grace"`
	Started       int     `json:"started"`
	StartedTwice  int     `json:"started_twice"`
	Succeeded     int     `json:"succeeded"`
	P50Millis     float64 `json:"start_delay_p50_ms"`
	P99Millis     float64 `json:"start_delay_p99_ms"`
	MaxMillis     float64 `json:"start_delay_max_ms"`
	CreateP99MS   float64 `json:"create_p99_ms"`
	Seconds       float64 `json:"seconds"`
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
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: dynamoURL,
		TablePrefix: "bench-throttle", CertifyDemo: true, CallTimeout: benchCallTimeout,
		SweepInterval: drillSweepInterval, SweepGrace: drillSweepGrace, Logger: logOut,
		Quotas: &job.Quotas{}}) // a drill of Step Functions' throttling, by one owner: not of quotas
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
	if err := s.SFN.SetThrottle(ctx, sfnlocal.Throttle{Share: d.ThrottleShare, Seed: 7}); err != nil {
		return d, err
	}
	slog.Info("throttling drill", "jobs", d.Jobs, "throttle_share", d.ThrottleShare)
	start := time.Now()
	run := start.UnixNano()

	ids := make([]string, d.Jobs)
	createMS := make([]time.Duration, d.Jobs)
	answered := make([]time.Time, d.Jobs)
	errs := make([]error, d.Jobs)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range d.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= d.Jobs {
					return
				}
				t0 := time.Now()
				id, code, err := user.create(ctx, fmt.Sprintf("drill-%d-%d", run, i),
					map[string]any{"type": "demo", "input": map[string]any{"prompt": fmt.Sprintf("drill %d", i)}})
				answered[i] = time.Now()
				createMS[i] = answered[i].Sub(t0)
				if err == nil && code != http.StatusCreated {
					err = fmt.Errorf("create answered %d", code)
				}
				ids[i], errs[i] = id, err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return d, err
	}

	// Every job settles; then each has one execution, and its start delay.
	// The deadline only bounds a failure: the sweeper starts what the API
	// could not one job at a time, slowed by its adaptive retry while half
	// its starts are throttled too, so on a busy machine it takes minutes.
	deadline := time.Now().Add(drillDeadline)
	for {
		done := 0
		for _, id := range ids {
			j, err := reader.Get(ctx, id)
			if err != nil {
				return d, err
			}
			if j.Status.Terminal() && len(j.Open()) == 0 {
				done++
			}
		}
		if done == d.Jobs {
			break
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("%d of %d jobs settled within %s", done, d.Jobs, drillDeadline)
		}
		time.Sleep(200 * time.Millisecond)
	}
	calls := map[string]int{}
	for _, k := range s.Sim.IdempotencyKeys(sim.DemoPrimary) {
		calls[k]++
	}
	var delays []time.Duration
	for i, id := range ids {
		j, err := reader.Get(ctx, id)
		if err != nil {
			return d, err
		}
		if j.Status == job.StatusSucceeded && j.AttemptCount == 1 {
			d.Succeeded++
		}
		if calls[job.AttemptKey(id, 1)] > 1 || j.AttemptCount > 1 {
			d.StartedTwice++
		}
		arn := strings.Replace(s.SFN.StateMachineARN(), ":stateMachine:", ":execution:", 1) + ":" + id
		out, err := s.SFNClient.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			return d, fmt.Errorf("execution of %s: %w", id, err)
		}
		d.Started++
		started := aws.ToTime(out.StartDate)
		delays = append(delays, started.Sub(j.CreatedAt))
		if started.After(answered[i]) {
			d.BySweeper++
		}
	}
	if d.ThrottledStarts, err = s.SFN.ThrottledStarts(ctx); err != nil {
		return d, err
	}
	d.P50Millis, d.P99Millis, d.MaxMillis = percentile(delays, 0.50), percentile(delays, 0.99), percentile(delays, 1)
	d.CreateP99MS = percentile(createMS, 0.99)
	d.Seconds = round2(time.Since(start).Seconds())
	return d, nil
}

func (d throttleDrill) check() error {
	if d.Started != d.Jobs || d.StartedTwice != 0 || d.Succeeded != d.Jobs || d.ThrottledStarts == 0 {
		return fmt.Errorf("throttling drill: %d of %d started, %d twice, %d succeeded, %d starts throttled",
			d.Started, d.Jobs, d.StartedTwice, d.Succeeded, d.ThrottledStarts)
	}
	return nil
}
