// Command bench measures onejob on this machine and prints a table, also
// written as JSON (default bench/results/latest.json). `make bench` runs it.
//
// Every number is set against a baseline measured in the same run:
//   - POST /v1/jobs throughput and p50/p99 at 8 and 32 concurrent clients, as
//     a ratio to dynalite's raw conditional PutItem of the same job item at
//     the same concurrency (API with and without the execution Starter);
//   - 1,000 concurrent creates sharing one Idempotency-Key, as a ratio to
//     1,000 concurrent creates with distinct keys;
//   - creates with worst-case bodies (long numbers, huge exponents, deep
//     nesting, many members, long strings and escapes, up to the 256 KiB
//     limit and past it), as ratios to a plain create padded to 256 KiB;
//   - DynamoDB requests and units, Step Functions state transitions and
//     Lambda invocations and billed time per job for the happy path, one
//     fallback, a hedge and an unknown attempt resolved by an operator, and
//     the AWS cost per million jobs they imply at published us-east-1
//     prices (each price, its date and its sources are in the output);
//   - the same per-job counts against the previous layout's
//     (bench/baseline.json);
//   - a long job's cost, synchronous against asynchronous, at provider
//     latencies of 2 s, 30 s and 10 min, and of an attempt whose provider
//     goes silent: derived from the happy path's counts and the design's
//     schedules (issue 29);
//   - 500 creates while half of the StartExecution calls are throttled: every
//     job started exactly once (by the API, or the sweeper function it hands
//     a refused start to), and the delays from create to start, next to the
//     same burst unthrottled;
//   - each function's binary size and cold init under the AWS Lambda Runtime
//     Interface Emulator, as ratios to an empty aws-lambda-go function.
//
// Timings from a 2-core machine running dynalite, node and the stack on the
// same cores are for comparison within one run, not absolute claims.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dev/sfnlocal"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
)

type options struct {
	root            string
	out             string
	logPath         string
	window          time.Duration
	warmup          time.Duration
	rounds          int
	stormSize       int
	jobsPerScenario int
	coldRuns        int
	drillJobs       int
	skipFunctions   bool
	// only names the sections to run (sectionNames); empty runs them all.
	only map[string]bool
	// streams: the streams section's flags (streams.go).
	streams streamOptions
}

// The sections of the bench, in the order they run; -only picks some.
const (
	sectionThroughput = "throughput" // throughput, idempotency storm, worst-case bodies
	sectionPerJob     = "perjob"     // per job, cost, long jobs, waiting
	sectionTracing    = "tracing"    // one trace per job: tracing off, at the default ratio, every trace
	sectionThrottling = "throttling" // the throttling drill
	sectionFunctions  = "functions"  // function sizes and cold init
	sectionStreams    = "streams"    // jobs' streams (issue 39), on a stack of their own
)

var sectionNames = []string{sectionThroughput, sectionPerJob, sectionTracing, sectionThrottling, sectionFunctions, sectionStreams}

// parseOnly reads -only: a comma-separated list of section names. The
// functions section starts its functions against the per-job section's
// stack, so it needs that one too.
func parseOnly(list string) (map[string]bool, error) {
	only := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(sectionNames, name) {
			return nil, fmt.Errorf("-only: unknown section %q (want some of %s)", name, strings.Join(sectionNames, ", "))
		}
		only[name] = true
	}
	if only[sectionFunctions] && !only[sectionPerJob] {
		return nil, fmt.Errorf("-only: %s needs %s (its functions run against that section's stack)", sectionFunctions, sectionPerJob)
	}
	return only, nil
}

// runs reports whether the section is to run.
func (o options) runs(section string) bool {
	return len(o.only) == 0 || o.only[section]
}

// report is the JSON document.
type report struct {
	GeneratedAt        string           `json:"generated_at"`
	Host               map[string]any   `json:"host"`
	Seconds            float64          `json:"seconds"`
	Notes              []string         `json:"notes"`
	Throughput         []throughputRow  `json:"throughput"`
	Storms             []stormResult    `json:"idempotency_storm"`
	PerJob             []perJob         `json:"per_job"`
	Baseline           *baseline        `json:"baseline,omitempty"`
	Throttling         *throttleDrill   `json:"throttling_drill,omitempty"`
	PricesCheckedOn    string           `json:"prices_checked_on"`
	Prices             map[string]price `json:"prices_us_east_1"`
	CostPerMillionJobs []costRow        `json:"cost_per_million_jobs_usd"`
	WaitVsPoll         []waitRow        `json:"wait_vs_poll"`
	LongJobs           *longJobs        `json:"long_jobs,omitempty"`
	Bodies             []bodyRow        `json:"worst_case_bodies"`
	// Failures are the sections that did not finish.
	Failures  []failure      `json:"failures,omitempty"`
	Functions []functionRow  `json:"functions"`
	Tracing   []tracingRow   `json:"tracing,omitempty"`
	Streams   *streamsReport `json:"streams,omitempty"`
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bench/results/latest.json", "write the JSON report here")
	flag.StringVar(&o.logPath, "log", "bench/results/bench.log", "write the stack's JSON logs here")
	flag.DurationVar(&o.window, "window", 4*time.Second, "measurement time of each side of a throughput row")
	flag.IntVar(&o.rounds, "rounds", 4, "alternating slices the window is cut into (PutItem, API, PutItem, API, …)")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "discarded warm-up of each side before a throughput row")
	flag.IntVar(&o.stormSize, "storm", 1000, "requests in the idempotency storm and its distinct-key baseline")
	flag.IntVar(&o.jobsPerScenario, "jobs", 10, "jobs per cost scenario (half for the unknown one)")
	flag.IntVar(&o.coldRuns, "cold-runs", 3, "cold starts per function under the emulator")
	flag.IntVar(&o.drillJobs, "drill", 500, "jobs in the throttling drill (0 skips it)")
	flag.BoolVar(&o.skipFunctions, "skip-functions", false, "skip function sizes and cold starts")
	only := flag.String("only", "", "run only these sections, comma-separated: "+strings.Join(sectionNames, ", ")+" (functions needs perjob)")
	o.streams.register(flag.CommandLine)
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	var err error
	if o.streams.only {
		// -streams-only is -only streams.
		if *only != "" && *only != sectionStreams {
			fmt.Fprintln(os.Stderr, "-streams-only runs the streams section alone: give it or -only, not both")
			os.Exit(2)
		}
		*only = sectionStreams
	}
	if o.only, err = parseOnly(*only); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		slog.Error("bench failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	started := time.Now()
	var err error
	if o.root, err = testenv.Root(); err != nil {
		return err
	}
	for _, p := range []*string{&o.out, &o.logPath} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(o.root, *p)
		}
		if err := os.MkdirAll(filepath.Dir(*p), 0o755); err != nil {
			return err
		}
	}
	logFile, err := os.Create(o.logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	stackLog := slog.New(slog.NewJSONHandler(logFile, nil))
	tmp, err := os.MkdirTemp("", "onejob-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// One in-memory dynalite for the whole run, as `make run` uses by default.
	dyn, err := dynalite.Start(ctx, dynalite.Options{Root: o.root})
	if err != nil {
		return err
	}
	defer dyn.Close()

	rep := report{
		GeneratedAt: time.Now().UTC().Format(time.RFC3339),
		Host: map[string]any{"goos": runtime.GOOS, "goarch": runtime.GOARCH, "cpus": runtime.NumCPU(),
			"go": runtime.Version(), "node": nodeVersion(o.root)},
		PricesCheckedOn: pricesCheckedOn,
		Prices:          prices(),
		Notes: []string{
			"All processes (bench client, API, task handlers, dynalite, node Step Functions server) share this machine's cores; compare numbers within one run.",
			"Throughput rows with starter=off serve the same API handler without an execution Starter (jobs stay pending); starter=on is the local server as `make run` serves it: each create also calls StartExecution and the executions run meanwhile (the row's PutItem slices run among them too). PutItem and API alternate in slices so machine-wide drift hits both.",
			"DynamoDB units come from dynalite's ConsumedCapacity (item-size based); index write units are modelled: every successful jobs-table write rewrites its by_owner entry (projects ALL: about the item's size); the by_open entry (KEYS_ONLY) is written once at the create and deleted once by the outcome, one unit each.",
			"Failed conditional writes are counted as 1 write unit each (DynamoDB charges them; dynalite reports none). Read-backs after a failed condition on the jobs and providers tables are local-only (dynalite ignores ReturnValuesOnConditionCheckFailure) and are left out of the cost.",
			"Lambda billed time per invocation is the local handler's duration (+1 ms rounding) at 256 MB, the memory infra/stack gives every function; the API function's time is the create's round trip at the client. Local durations on amd64 with a loopback dynalite understate AWS (network round trips to DynamoDB).",
			"API Gateway requests per job: the create, plus the operator's resolve in the unknown scenario; status polling is the client's choice and not counted (the wait table prices it).",
			"Waiting: a held GET (Prefer: wait=20 on a job that does not change: the worst case, held the whole 20 s) is one API Gateway request and one Lambda invocation billed for the whole hold at 256 MB, plus one strongly consistent GetItem per 500 ms; polls are sent back to back (a poll costs the same whenever it is sent) and each is a conditional GET answered 304. Per million 20-second windows.",
			fmt.Sprintf("The unknown scenario's provider never answers; the bench's run function gives up after %s, the deployed one after 4 min (a separate cost row).", benchCallTimeout),
			"One endpoint: the job's outcome write also appends its event to the outbox (the same request); the notifier then reads it from by_notify, lists the owner's endpoints, puts one delivery, records it dispatched, finds it in by_due, reads it and the endpoint, claims it and records the try (conditional PutItems). Each pass's shard queries (by_notify, by_due) are shared by the jobs it serves (here 10); notify invocations are counted one per pass, an upper bound (deployed, one scheduled run a minute drains them all). Writes of the new sparse indexes (by_notify, by_due: keys only) are not modelled. Owners without endpoints pay nothing: their rows are the quotas-on happy path's (the count read with the quota says no endpoint); with quotas off a create reads the owner's counters once (one GetItem), which the quotas-off rows leave out.",
		},
	}

	if rep.Baseline, err = loadBaseline(o.root); err != nil {
		return err
	}

	funcs := sectionFuncs{
		throughput: func(ctx context.Context) ([]throughputRow, []stormResult, []bodyRow, error) {
			rows, storms, err := measureThroughput(ctx, o, dyn.Endpoint(), stackLog)
			if err != nil {
				return rows, storms, nil, err
			}
			bodies, err := measureBodies(ctx, o, dyn.Endpoint(), stackLog)
			if err != nil {
				err = fmt.Errorf("bodies: %w", err)
			}
			return rows, storms, bodies, err
		},
		perJob: func(ctx context.Context) (perJobResult, error) {
			rows, waits, cost, closeCost, err := measurePerJob(ctx, o, dyn.Endpoint(), stackLog)
			if err != nil {
				return perJobResult{}, err
			}
			res := perJobResult{rows: rows, waits: waits, close: closeCost,
				env: functionEnv{dynamo: dyn.Endpoint(), sfn: cost.SFN.Endpoint(), stateARN: cost.SFN.StateMachineARN(),
					tables: dynamo.NamesWithPrefix("bench-cost")}}
			definition, err := os.ReadFile(filepath.Join(o.root, sfnlocal.DefaultDefinitionPath))
			if err != nil {
				return res, fmt.Errorf("long jobs: %w", err)
			}
			tokens, err := tokenPriceFrom(o.root)
			if err != nil {
				return res, fmt.Errorf("long jobs: %w", err)
			}
			if res.long, err = measureLongJobs(rows, definition, rep.Prices, tokens); err != nil {
				return res, fmt.Errorf("long jobs: %w", err)
			}
			return res, nil
		},
		tracing: func(ctx context.Context) ([]tracingRow, error) {
			return measureTracing(ctx, o, dyn.Endpoint())
		},
		throttling: func(ctx context.Context) (throttleDrill, error) {
			return measureThrottling(ctx, o, dyn.Endpoint(), stackLog)
		},
		functions: func(ctx context.Context, env functionEnv) ([]functionRow, error) {
			return measureFunctions(ctx, o, tmp, env)
		},
		streams: func(ctx context.Context) (streamsReport, error) {
			return measureStreams(ctx, o, dyn.Endpoint(), stackLog)
		},
	}
	measure(ctx, o, funcs, &rep)
	rep.Seconds = round2(time.Since(started).Seconds())
	return finish(os.Stdout, o, rep, ctx.Err())
}

// sectionFuncs measure the sections: run wires the real ones, the bench's
// tests fakes.
type sectionFuncs struct {
	throughput func(context.Context) ([]throughputRow, []stormResult, []bodyRow, error)
	perJob     func(context.Context) (perJobResult, error)
	tracing    func(context.Context) ([]tracingRow, error)
	throttling func(context.Context) (throttleDrill, error)
	functions  func(context.Context, functionEnv) ([]functionRow, error)
	streams    func(context.Context) (streamsReport, error)
}

// perJobResult is what the per-job section measured, and the stack the
// functions section runs its functions against (close ends it).
type perJobResult struct {
	rows  []perJob
	waits []waitRow
	long  *longJobs
	env   functionEnv
	close func()
}

// failure is a section that did not finish; the report keeps what it and
// the others measured.
type failure struct {
	Section string `json:"section"`
	Error   string `json:"error"`
}

// measure runs the selected sections in order into rep. A section that
// fails is recorded and the next runs (a failed drill is marked in its own
// figures), so the report printed at the end shows everything measured;
// after an interrupt nothing more starts.
func measure(ctx context.Context, o options, f sectionFuncs, rep *report) {
	fail := func(section string, err error) {
		rep.Failures = append(rep.Failures, failure{Section: section, Error: err.Error()})
	}
	if o.runs(sectionThroughput) && ctx.Err() == nil {
		slog.Info("phase 1/6: API throughput, idempotency storm, worst-case bodies")
		var err error
		if rep.Throughput, rep.Storms, rep.Bodies, err = f.throughput(ctx); err != nil {
			fail(sectionThroughput, err)
		}
	}
	var perJobs perJobResult
	perJobDone := false
	if o.runs(sectionPerJob) && ctx.Err() == nil {
		slog.Info("phase 2/6: per-job requests, transitions and cost; waiting vs polling")
		var err error
		perJobs, err = f.perJob(ctx)
		if perJobs.close != nil {
			defer perJobs.close()
		}
		rep.PerJob, rep.WaitVsPoll, rep.LongJobs = perJobs.rows, perJobs.waits, perJobs.long
		if len(perJobs.rows) > 0 {
			rep.CostPerMillionJobs = costs(perJobs.rows, rep.Prices)
		}
		if err != nil {
			fail(sectionPerJob, err)
		}
		perJobDone = err == nil
	}
	if o.runs(sectionTracing) && f.tracing != nil && ctx.Err() == nil {
		slog.Info("phase 3/6: one trace per job: tracing off, at the default ratio, every trace")
		var err error
		if rep.Tracing, err = f.tracing(ctx); err != nil {
			fail(sectionTracing, err)
		}
	}
	if o.runs(sectionThrottling) && o.drillJobs > 0 && ctx.Err() == nil {
		slog.Info("phase 4/6: starts under throttling")
		d, err := f.throttling(ctx)
		if err != nil {
			d.Failed = err.Error()
		}
		rep.Throttling = &d
	}
	if o.runs(sectionFunctions) && !o.skipFunctions && ctx.Err() == nil {
		slog.Info("phase 5/6: function sizes and cold init under the Runtime Interface Emulator")
		if !perJobDone {
			fail(sectionFunctions, errors.New("not run: it needs the per-job section's stack"))
		} else {
			var err error
			if rep.Functions, err = f.functions(ctx, perJobs.env); err != nil {
				fail(sectionFunctions, err)
			}
		}
	}
	if o.runs(sectionStreams) && o.streams.jobs > 0 && ctx.Err() == nil {
		slog.Info("phase 6/6: jobs' streams")
		st, err := f.streams(ctx)
		if err != nil {
			fail(sectionStreams, err)
		}
		// A failure in the cost rows keeps the latency rows measured.
		if err == nil || st.Latency.Jobs > 0 {
			rep.Streams = &st
		}
	}
}

// finish prints the report and writes its JSON, whatever failed, then
// fails the run for each section that did not finish and each measurement
// that contradicts the system's guarantees.
func finish(w io.Writer, o options, rep report, interrupted error) error {
	printReport(w, rep)
	printStreams(w, rep.Streams)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwrote %s (stack logs: %s) in %.0f s\n", o.out, o.logPath, rep.Seconds)
	errs := []error{interrupted}
	for _, f := range rep.Failures {
		errs = append(errs, fmt.Errorf("%s: %s", f.Section, f.Error))
	}
	return errors.Join(append(errs, checkReport(rep))...)
}

// checkReport fails the run when a measurement contradicts the system's
// guarantees (it asserts facts, never timings).
func checkReport(rep report) error {
	var errs []error
	if err := checkTracing(rep.Tracing); err != nil {
		errs = append(errs, err)
	}
	for _, s := range rep.Storms {
		if s.Errors > 0 || s.Created != 1 || s.JobIDs != 1 || s.Created+s.Replayed != s.Requests {
			errs = append(errs, fmt.Errorf("storm (starter %s): %d errors, %d created, %d replayed, %d job IDs; want 1 job",
				s.Starter, s.Errors, s.Created, s.Replayed, s.JobIDs))
		}
	}
	for _, t := range rep.Throughput {
		if t.API.Errors > 0 || t.Raw.Errors > 0 {
			errs = append(errs, fmt.Errorf("throughput c=%d starter=%s: %d API errors (%s), %d PutItem errors (%s)",
				t.Concurrency, t.Starter, t.API.Errors, t.API.FirstError, t.Raw.Errors, t.Raw.FirstError))
		}
	}
	if err := checkLongJobs(rep.LongJobs); err != nil {
		errs = append(errs, err)
	}
	if err := checkBodies(rep.Bodies); err != nil {
		errs = append(errs, err)
	}
	if rep.Throttling != nil {
		if err := rep.Throttling.check(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range rep.WaitVsPoll {
		// A held wait reads once, then at most once per poll interval.
		if limit := 1 + waitWindow.Seconds()/apigwDefaultPoll.Seconds(); w.APIRequests == 1 && w.DynamoReads > limit {
			errs = append(errs, fmt.Errorf("%s: %.0f DynamoDB reads, more than the bound of %.0f", w.Mode, w.DynamoReads, limit))
		}
	}
	for _, f := range rep.Functions {
		if f.MeasureErr != "" {
			errs = append(errs, fmt.Errorf("function %s: %s", f.Name, f.MeasureErr))
		}
	}
	if err := checkStreams(rep.Streams); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// nodeVersion is the version of the pinned node the servers ran on.
func nodeVersion(root string) string {
	out, err := exec.Command(testenv.NodePath(root), "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
