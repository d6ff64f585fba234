package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// throughputRow compares POST /v1/jobs with dynalite's raw conditional
// PutItem at the same concurrency, measured in alternating slices.
type throughputRow struct {
	Concurrency int `json:"concurrency"`
	// Starter says whether each create also started its Step Functions
	// execution (and executions ran meanwhile) or the API ran without one.
	Starter string     `json:"starter"`
	Raw     loadResult `json:"dynalite_conditional_put_item"`
	API     loadResult `json:"api_post_jobs"`
	// Ratios are API over raw: throughput (<1 means slower), latencies
	// (>1 means slower).
	ThroughputRatio float64 `json:"throughput_ratio"`
	P50Ratio        float64 `json:"p50_ratio"`
	P99Ratio        float64 `json:"p99_ratio"`
	// Drain is how long the started executions took to finish after the
	// measurement (starter on only).
	Drain *drained `json:"drain,omitempty"`
}

// stormResult compares 1,000 concurrent creates with one Idempotency-Key to
// 1,000 concurrent creates with distinct keys.
type stormResult struct {
	Starter         string  `json:"starter"`
	Requests        int     `json:"requests"`
	DistinctSeconds float64 `json:"distinct_keys_seconds"`
	SameKeySeconds  float64 `json:"same_key_seconds"`
	// Ratio is same-key time over distinct-keys time.
	Ratio float64 `json:"ratio"`
	// What the storm answered: exactly one 201, the rest 200 replays, all
	// naming one job.
	Created  int `json:"created_201"`
	Replayed int `json:"replayed_200"`
	JobIDs   int `json:"distinct_job_ids"`
	Errors   int `json:"errors"`
	// StartExecutionCalls the same-key storm made that Step Functions
	// accepted (the API starts the execution on replays too; once the job's
	// execution has closed, further calls get ExecutionAlreadyExists and are
	// not counted here).
	StartExecutionCalls int `json:"same_key_start_execution_calls"`
	// Drain follows the starter-on storm.
	Drain *drained `json:"drain,omitempty"`
}

const createInput = `{"prompt":"bench"}`

// apiServer serves the API over net/http without a Starter: creates write
// the job and return, as the deployed API would with Step Functions
// unreachable (the sweeper would start them later).
func apiServer(s *stack.Stack, log *slog.Logger) (string, func(), error) {
	h, err := apigw.New(apigw.Config{Jobs: s.Engine, Catalog: apigw.JobTypes{Catalog: s.Catalog}, Logger: log})
	if err != nil {
		return "", nil, err
	}
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(s.JWTSecret())})
	if err != nil {
		return "", nil, err
	}
	local, err := apigwlocal.NewServer(apigwlocal.ServerConfig{Handler: h, Tokens: tokens, Logger: log})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: local, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// measureThroughput runs the throughput rows and the storms on their own
// stack (tables bench-tp-*), then stops it.
func measureThroughput(ctx context.Context, o options, dynamoURL string, logOut *slog.Logger) ([]throughputRow, []stormResult, error) {
	// Count the Starter's successful StartExecution calls ("execution_started").
	var starts atomic.Int64
	log := slog.New(captureHandler{next: logOut.Handler(), observe: func(r slog.Record) {
		if r.Message == "execution_started" {
			starts.Add(1)
		}
	}})
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: dynamoURL,
		// One owner drives the load: quotas off (a create is one write
		// against PutItem's one; the per-job rows price quotas), and no
		// read of its counters for notifications.
		TablePrefix: "bench-tp", Logger: log, Quotas: &job.Quotas{}, NotificationsOff: true})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	offURL, closeOff, err := apiServer(s, log)
	if err != nil {
		return nil, nil, err
	}
	defer closeOff()
	off, err := newAPIClient(offURL, s.JWTSecret(), "bench")
	if err != nil {
		return nil, nil, err
	}
	on, err := newAPIClient(s.APIURL, s.JWTSecret(), "bench")
	if err != nil {
		return nil, nil, err
	}
	body := map[string]any{"type": "demo", "input": json.RawMessage(createInput)}
	t, ok := s.Catalog.Get("demo")
	if !ok {
		return nil, nil, errors.New("job type demo missing")
	}
	providers := t.Providers()

	var seq atomic.Int64
	raw := func(ctx context.Context, n int64) error {
		j, err := job.New(job.Request{Owner: "bench-raw", IdempotencyKey: fmt.Sprintf("raw-%d", n), Type: "demo",
			Input: json.RawMessage(createInput), Providers: providers, Primary: job.PrimaryOf(providers)}, time.Now())
		if err != nil {
			return err
		}
		_, _, err = s.Store.Create(ctx, j)
		return err
	}
	post := func(c *apiClient) func(ctx context.Context, n int64) error {
		return func(ctx context.Context, n int64) error {
			_, _, err := c.create(ctx, fmt.Sprintf("tp-%d", n), body)
			return err
		}
	}
	row := func(conc int, starter string, c *apiClient) throughputRow {
		r := throughputRow{Concurrency: conc, Starter: starter}
		slog.Info("measuring", "what", "dynalite conditional PutItem vs POST /v1/jobs", "concurrency", conc, "starter", starter)
		r.Raw, r.API = compare(ctx, conc, o.rounds, o.warmup, o.window, &seq, raw, post(c))
		r.ThroughputRatio = ratio(r.API.PerSecond, r.Raw.PerSecond)
		r.P50Ratio = ratio(r.API.P50Millis, r.Raw.P50Millis)
		r.P99Ratio = ratio(r.API.P99Millis, r.Raw.P99Millis)
		return r
	}

	var rows []throughputRow
	for _, conc := range []int{8, 32} {
		rows = append(rows, row(conc, "off", off))
	}
	var storms []stormResult
	storms = append(storms, storm(ctx, off, "off", body, o.stormSize, &starts))
	// With the Starter on, every create also calls StartExecution and the
	// executions run on the same two cores: drain them between rows so each
	// row starts from an idle machine.
	for _, conc := range []int{8, 32} {
		r := row(conc, "on", on)
		d := drain(ctx, s)
		r.Drain = &d
		rows = append(rows, r)
	}
	st := storm(ctx, on, "on", body, o.stormSize, &starts)
	d := drain(ctx, s)
	st.Drain = &d
	storms = append(storms, st)
	return rows, storms, ctx.Err()
}

// drain waits until the stack runs no execution, so the next row starts
// from an idle machine. Executions that stop finishing (a job blocked on an
// unknown attempt waits for an operator forever) end the wait after
// stallAfter without progress; they are reported as stuck, with the jobs
// left unknown.
func drain(ctx context.Context, s *stack.Stack) drained {
	const stallAfter = 10 * time.Second
	start, lastProgress := time.Now(), time.Now()
	last := -1
	var d drained
	for ctx.Err() == nil {
		n, err := runningExecutions(ctx, s)
		if err == nil {
			if n == 0 {
				break
			}
			if last < 0 || n < last {
				last, lastProgress = n, time.Now()
			}
			if time.Since(lastProgress) > stallAfter {
				d.Stuck = n
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.Seconds = round2(time.Since(start).Seconds())
	if open, err := s.Store.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: time.Now().Add(time.Hour), Limit: 100000}); err == nil {
		for _, j := range open.Jobs {
			if j.Status == job.StatusUnknown {
				d.Unknown++
			}
		}
	}
	slog.Info("drained executions", "seconds", d.Seconds, "stuck", d.Stuck, "jobs_unknown", d.Unknown)
	return d
}

// drained is what drain saw.
type drained struct {
	Seconds float64 `json:"seconds"`
	// Stuck executions still ran when progress stopped.
	Stuck int `json:"stuck_executions"`
	// Unknown counts open jobs of the stack left with status unknown.
	Unknown int `json:"jobs_unknown"`
}

func runningExecutions(ctx context.Context, s *stack.Stack) (int, error) {
	n := 0
	var token *string
	for {
		out, err := s.SFNClient.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String(s.SFN.StateMachineARN()),
			StatusFilter: sfntypes.ExecutionStatusRunning, MaxResults: 1000, NextToken: token})
		if err != nil {
			return 0, err
		}
		n += len(out.Executions)
		if out.NextToken == nil {
			return n, nil
		}
		token = out.NextToken
	}
}

// storm fires n distinct-key creates at once, then n creates sharing one key.
func storm(ctx context.Context, c *apiClient, starter string, body any, n int, starts *atomic.Int64) stormResult {
	r := stormResult{Starter: starter, Requests: n}
	run := time.Now().UnixNano()
	slog.Info("measuring", "what", "distinct-key burst", "requests", n, "starter", starter)
	d, errs := burst(ctx, n, func(ctx context.Context, i int) error {
		_, _, err := c.create(ctx, fmt.Sprintf("distinct-%d-%d", run, i), body)
		return err
	})
	r.DistinctSeconds = d.Seconds()
	r.Errors += len(errs)
	var mu sync.Mutex
	ids := map[string]bool{}
	slog.Info("measuring", "what", "same-key storm", "requests", n, "starter", starter)
	starts0 := starts.Load()
	d, errs = burst(ctx, n, func(ctx context.Context, i int) error {
		id, code, err := c.create(ctx, fmt.Sprintf("storm-%d", run), body)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ids[id] = true
		if code == http.StatusCreated {
			r.Created++
		} else {
			r.Replayed++
		}
		return nil
	})
	r.SameKeySeconds = d.Seconds()
	r.StartExecutionCalls = int(starts.Load() - starts0)
	r.Errors += len(errs)
	r.JobIDs = len(ids)
	r.Ratio = ratio(r.SameKeySeconds, r.DistinctSeconds)
	return r
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round2(a / b)
}
