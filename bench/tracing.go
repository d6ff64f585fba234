package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sort"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/dev/otlprecv"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// Issue 42's rows: the happy path with tracing off, at the default head
// sampling ratio, and with every trace sampled, each on a stack of its own
// (same dynalite, tables of its own) exporting to an in-process OTLP
// receiver: the create's latency at the client and each function's
// invocation time (p50, p99), the spans exported per job, and what X-Ray
// charges for the traces kept, per million jobs.

// DefaultTraceRatio is the head sampling ratio the bench calls the
// default: one trace in twenty (docs/tracing.md).
const DefaultTraceRatio = 0.05

// tracingMode is a row of the tracing table: tracing off (ratio 0), or
// exporting at a head sampling ratio.
type tracingMode struct {
	name  string
	ratio float64
}

func tracingModes() []tracingMode {
	return []tracingMode{{"off", 0}, {"default ratio", DefaultTraceRatio}, {"every trace", 1}}
}

// tracingJobs is how many happy-path jobs each row runs, tracingClients at once.
const (
	tracingJobs    = 200
	tracingClients = 4
)

// xrayUSDPerMillionTraces is X-Ray's price per million traces recorded
// (../shared/notes/batch-streams-traces.md: $5.00 per million after the
// first 100,000 a month).
const xrayUSDPerMillionTraces = 5.0

type tracingRow struct {
	Mode  string  `json:"mode"`
	Ratio float64 `json:"ratio"`
	Jobs  int     `json:"jobs"`
	// CreateP50MS and CreateP99MS: the create's round trip at the client.
	CreateP50MS float64 `json:"create_p50_ms"`
	CreateP99MS float64 `json:"create_p99_ms"`
	// Functions: each task function's invocation time, p50 and p99 (ms).
	Functions map[string][2]float64 `json:"function_p50_p99_ms"`
	// SpansPerJob and TracesPerJob: what reached the collector.
	SpansPerJob  float64 `json:"spans_per_job"`
	TracesPerJob float64 `json:"traces_per_job"`
	// USDPerMillionJobs: X-Ray's price of the traces kept.
	USDPerMillionJobs float64 `json:"xray_usd_per_million_jobs"`
}

// invocations collects each task function's invocation times from the
// local Lambda endpoint's "lambda_invoked" lines.
type invocations struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (v *invocations) observe(r slog.Record) {
	if r.Message != "lambda_invoked" {
		return
	}
	var fn string
	var ms int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "function":
			fn = a.Value.String()
		case "duration_ms":
			ms = a.Value.Int64()
		}
		return true
	})
	v.mu.Lock()
	defer v.mu.Unlock()
	v.by[fn] = append(v.by[fn], time.Duration(ms)*time.Millisecond)
}

func measureTracing(ctx context.Context, o options, dynamoURL string) ([]tracingRow, error) {
	spans := otlprecv.NewStore(0)
	collector := httptest.NewServer(spans.Handler())
	defer collector.Close()
	var rows []tracingRow
	for _, m := range tracingModes() {
		inv := &invocations{by: map[string][]time.Duration{}}
		log := slog.New(captureHandler{next: slog.NewJSONHandler(io.Discard, nil), observe: inv.observe})
		cfg := stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: dynamoURL, TablePrefix: fmt.Sprintf("bench-trace-%d", len(rows)),
			CertifyDemo: true, CallTimeout: benchCallTimeout, Logger: log, DemoProviders: stack.BreakersNeverAct, Quotas: &job.Quotas{},
			NotificationsOff: true, SweepInterval: time.Hour}
		if m.ratio > 0 {
			cfg.OTLP, cfg.TraceRatio = collector.URL+"/v1/traces", m.ratio
		}
		before := len(spans.All())
		row, err := tracingRowOf(ctx, cfg, m.name, m.ratio, inv)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", m.name, err)
		}
		// Exports are batched: wait (bounded) until the counts stop moving.
		var n int
		for range 20 {
			time.Sleep(250 * time.Millisecond)
			if now := len(spans.All()); now == n {
				break
			} else {
				n = now
			}
		}
		got := spans.All()[before:]
		traces := map[string]bool{}
		for _, sp := range got {
			traces[sp.TraceID] = true
		}
		row.SpansPerJob = round2(float64(len(got)) / float64(row.Jobs))
		row.TracesPerJob = round2(float64(len(traces)) / float64(row.Jobs))
		row.USDPerMillionJobs = round2(row.TracesPerJob * xrayUSDPerMillionTraces)
		rows = append(rows, row)
	}
	return rows, nil
}

func tracingRowOf(ctx context.Context, cfg stack.Config, name string, ratio float64, inv *invocations) (tracingRow, error) {
	s, err := stack.Start(ctx, cfg)
	if err != nil {
		return tracingRow{}, err
	}
	defer s.Close()
	row := tracingRow{Mode: name, Ratio: ratio, Jobs: tracingJobs, Functions: map[string][2]float64{}}
	var mu sync.Mutex
	var creates []time.Duration
	var ids []string
	var errs []error
	var wg sync.WaitGroup
	next := make(chan int, tracingJobs)
	for i := range tracingJobs {
		next <- i
	}
	close(next)
	for c := range tracingClients {
		user, err := newAPIClient(s.APIURL, s.JWTSecret(), fmt.Sprintf("bench-trace-%d", c))
		if err != nil {
			return row, err
		}
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				id, _, err := user.create(ctx, fmt.Sprintf("trace-%d", i), map[string]any{"type": "demo", "input": map[string]any{"prompt": "bench"}})
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					creates, ids = append(creates, took), append(ids, id)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return row, errs[0]
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		for {
			j, err := s.Store.Get(ctx, id)
			if err == nil && j.Status.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				return row, fmt.Errorf("job %s did not settle within 2 minutes", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	row.CreateP50MS, row.CreateP99MS = percentile(creates, 0.5), percentile(creates, 0.99)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	fns := make([]string, 0, len(inv.by))
	for fn := range inv.by {
		fns = append(fns, fn)
	}
	sort.Strings(fns)
	for _, fn := range fns {
		row.Functions[fn] = [2]float64{percentile(inv.by[fn], 0.5), percentile(inv.by[fn], 0.99)}
	}
	return row, nil
}

// checkTracing holds the rows to what tracing promises: off exports
// nothing.
func checkTracing(rows []tracingRow) error {
	for _, r := range rows {
		if r.Ratio == 0 && r.SpansPerJob != 0 {
			return fmt.Errorf("tracing off exported %.2f spans per job", r.SpansPerJob)
		}
	}
	return nil
}

func printTracing(w io.Writer, rows []tracingRow) {
	fmt.Fprintln(w, "\nOne trace per job (issue 42): the happy path, tracing off / default ratio / every trace")
	fmt.Fprintf(w, "%-14s %6s %16s %-40s %10s %10s %14s\n", "mode", "ratio", "create p50/p99", "function p50/p99 ms", "spans/job", "traces/job", "X-Ray $/M jobs")
	for _, r := range rows {
		fns := ""
		keys := make([]string, 0, len(r.Functions))
		for k := range r.Functions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fns += fmt.Sprintf("%s %.0f/%.0f ", k, r.Functions[k][0], r.Functions[k][1])
		}
		fmt.Fprintf(w, "%-14s %6.2f %7.1f/%-8.1f %-40s %10.2f %10.2f %14.2f\n", r.Mode, r.Ratio, r.CreateP50MS, r.CreateP99MS, fns,
			r.SpansPerJob, r.TracesPerJob, r.USDPerMillionJobs)
	}
}
