// Package soak is the soak drill of `make run`'s stack: it starts `onejob
// run` (with its node servers) under an open-file limit, drives jobs
// through the HTTP API in batches with a mix of outcomes — most answered by
// the primary, one in ten by the fallback after a 503, five a batch timing
// out until the drill resolves the attempt as an operator would, one in a
// hundred posted twice — and reports per batch the throughput, create
// latency, time to drain, and each process's open file descriptors
// (/proc/PID/fd) and resident memory (VmRSS; the node servers' after a full
// collection, so that it is what they keep rather than garbage not yet
// swept).
//
// It fails when a job is lost, duplicated, left open or ends in another
// state than its script implies, when a provider was called more or less
// often than the scripts imply, when a process holds Limits.MaxFDs
// descriptors or more after the first batch, when a process's memory after
// the last batch exceeds Limits.MaxRSSGrowth times its memory after the
// second, when the last batch drains more than Limits.MaxDrainGrowth times
// slower than the second, and when, once the stack is idle, a process keeps
// more than Limits.RestSlack descriptors above what it held before the
// first job, or more than two connections between the parts (idle
// connections are closed by the servers' idle timeouts).
//
// `make soak` runs it at length (cmd/soak); TestBoundedSoak runs a short
// version in `make test`.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
)

// secret signs the drill's tokens; the stack is started with it.
const secret = "soak-drill-secret"

// Limits are the pass criteria.
type Limits struct {
	// MaxFDs bounds (exclusively) each process's open descriptors in every
	// batch after the first, sampled throughout the batch.
	MaxFDs int
	// MaxRSSGrowth bounds each process's RSS after the last batch as a
	// multiple of its RSS after the second.
	MaxRSSGrowth float64
	// MaxDrainGrowth bounds the last batch's drain time as a multiple of the
	// second's; 0 leaves timing unchecked (make test asserts no speed).
	MaxDrainGrowth float64
	// RestSlack is how many descriptors above its count before the first
	// job a process may still hold once the stack has been idle for its
	// idle timeout; of those, at most restLinks may be connections between
	// the parts (the sweeper's periodic reads).
	RestSlack int
}

// restLinks is how many connections between the stack's parts a process may
// hold once idle: the sweeper reads dynalite every few seconds.
const restLinks = 2

// Config configures Run.
type Config struct {
	// Bin is the onejob binary (bin/onejob), run in the checkout Root (it
	// finds node_modules and the state machine there); Dir holds its data
	// and logs.
	Bin  string
	Root string
	Dir  string
	// Jobs in total, in Batches equal batches (at least 3: the second is
	// the reference after warm-up, the last is compared with it).
	Jobs    int
	Batches int
	// Clients submit concurrently; Window bounds the executions running at
	// once (a submitter waits while that many run). A batch is submitted
	// in cycles of Cycle jobs (default 100): after each the drill waits
	// until no execution runs, and a batch's drain time is the median of
	// its cycles' (a single tail per batch would be too short to compare).
	Clients int
	Window  int
	Cycle   int
	// NoFile is the open-file limit (ulimit -n) of the stack's processes.
	NoFile int
	// IdleTimeout is passed to `onejob run --idle-timeout` when positive;
	// zero keeps onejob's default.
	IdleTimeout time.Duration
	// InMemory runs dynalite without a data folder, so its memory grows
	// with the data; by default its data is on disk under Dir and its RSS
	// measures the server, not the jobs.
	InMemory bool
	// RunArgs are extra `onejob run` flags.
	RunArgs []string
	Limits  Limits
	// Logf receives progress lines; nil is silent.
	Logf func(format string, args ...any)
}

func (c *Config) validate() error {
	switch {
	case c.Bin == "" || c.Root == "" || c.Dir == "":
		return errors.New("soak: Bin, Root and Dir are required")
	case c.Batches < 3:
		return errors.New("soak: at least 3 batches (the second is the reference, the last is compared with it)")
	case c.Jobs < c.Batches:
		return errors.New("soak: fewer jobs than batches")
	case c.Clients <= 0 || c.Window <= 0 || c.NoFile <= 0:
		return errors.New("soak: Clients, Window and NoFile must be positive")
	case c.Limits.MaxFDs <= 0 || c.Limits.MaxRSSGrowth <= 0:
		return errors.New("soak: Limits.MaxFDs and Limits.MaxRSSGrowth are required")
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Cycle <= 0 {
		c.Cycle = 100
	}
	return nil
}

// Batch is one row of the report.
type Batch struct {
	N          int     `json:"batch"`
	Jobs       int     `json:"jobs"`
	Errors     int     `json:"create_errors"`
	Timeouts   int     `json:"timeouts_resolved"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_second"`
	P50Millis  float64 `json:"create_p50_ms"`
	P99Millis  float64 `json:"create_p99_ms"`
	// DrainSecs is the median over the batch's cycles of the time from a
	// cycle's last create until no execution ran; MaxDrainSecs the longest.
	DrainSecs    float64 `json:"drain_seconds"`
	MaxDrainSecs float64 `json:"max_drain_seconds"`
	// MaxFDs is the highest descriptor count seen during the batch, End
	// what each process held and used once the batch had drained.
	MaxFDs map[string]int   `json:"max_fds"`
	End    map[string]Usage `json:"end"`
	// FDs names the descriptors of onejob and the Step Functions server at
	// the end of the batch (connections by the server they belong to),
	// PeakFDs at their highest count during the batch.
	FDs     map[string]string `json:"fd_breakdown"`
	PeakFDs map[string]string `json:"peak_fd_breakdown"`
	Load    string            `json:"loadavg"`
}

// Report is what Run measured.
type Report struct {
	NoFile   int              `json:"nofile"`
	PIDs     map[string]int   `json:"pids"`
	Start    map[string]Usage `json:"start"`
	Batches  []Batch          `json:"batches"`
	Rest     map[string]Usage `json:"rest"`
	RestWait float64          `json:"rest_wait_seconds"`
	// SimCalls counts the jobs' provider executions (not the start-up
	// certification's): a repeat of a key — the reconciler asking about a
	// timed-out attempt again — is answered from memory, not executed.
	SimCalls map[string]int `json:"sim_calls"`
	Problems []string       `json:"problems"`
}

// Err is nil when the drill found nothing wrong.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return errors.New("soak: " + strings.Join(r.Problems, "\n  "))
}

// Run starts the stack, drives every batch, checks the limits and stops
// the stack. The report is returned with whatever was measured even when
// the drill could not finish; err is a failure to run at all.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	s, err := startStack(startCtx, cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	defer s.stop()
	rep := &Report{NoFile: cfg.NoFile, PIDs: s.pids}
	if err := s.checkLimits(cfg.NoFile); err != nil {
		return rep, err
	}
	cfg.Logf("stack up: onejob pid %d, sfn pid %d, dynalite pid %d, open-file limit %d each",
		s.pids[ProcOnejob], s.pids[ProcSFN], s.pids[ProcDynalite], cfg.NoFile)

	// One connection per submitter, kept alive; the operator and the pacer
	// have their own.
	hc := &http.Client{Timeout: 60 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients, DisableCompression: true}}
	side := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	admin, err := newClient(s.ends.APIURL, "soak-operator", side, "jobs:admin")
	if err != nil {
		return rep, err
	}
	nodes := map[string]string{ProcSFN: s.ends.SFNEndpoint, ProcDynalite: s.ends.DynamoEndpoint}
	heaps, err := collectGarbage(ctx, nodes)
	if err != nil {
		return rep, err
	}
	if rep.Start, err = readUsage(s.pids); err != nil {
		return rep, err
	}
	withHeaps(rep.Start, heaps)
	// The stack certified the fallback at start: those calls are not jobs'.
	before, _, err := simCalls(ctx, side, s.ends.SimURL)
	if err != nil {
		return rep, err
	}
	servers := serverPorts(s.ends)
	samples := startSampler(s.pids, servers, 100*time.Millisecond)
	defer samples.close()
	paceCtx, stopPacer := context.WithCancel(ctx)
	pace := newPacer(s.ends.SFNEndpoint, side, cfg.Window)
	paced := make(chan struct{})
	go func() { defer close(paced); pace.run(paceCtx) }()
	defer func() { stopPacer(); <-paced }()

	perBatch := cfg.Jobs / cfg.Batches
	var wantPrimary, wantFallback int
	for b := range cfg.Batches {
		n := perBatch
		if b == cfg.Batches-1 {
			n = cfg.Jobs - perBatch*(cfg.Batches-1)
		}
		user, err := newClient(s.ends.APIURL, fmt.Sprintf("soak-b%02d", b+1), hc)
		if err != nil {
			return rep, err
		}
		if _, _, err := samples.take(); err != nil {
			rep.Problems = append(rep.Problems, err.Error())
		}
		res := runBatch(ctx, cfg, user, admin, pace, plans(b+1, n, cfg.Cycle))
		maxFDs, peaks, err := samples.take()
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("batch %d: %v", b+1, err))
		}
		heaps, err := collectGarbage(ctx, nodes)
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("batch %d: %v", b+1, err))
		}
		end, err := readUsage(s.pids)
		if err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("batch %d: %v", b+1, err))
		}
		withHeaps(end, heaps)
		for _, p := range res.ids {
			wantPrimary++
			if p.kind != kindOK {
				wantFallback++
			}
		}
		row := Batch{N: b + 1, Jobs: len(res.ids), Errors: res.errors, Timeouts: res.resolved,
			Seconds: res.elapsed.Seconds(), DrainSecs: median(res.drains).Seconds(), MaxDrainSecs: slices.Max(append(res.drains, 0)).Seconds(),
			P50Millis: percentile(res.latencies, 0.50), P99Millis: percentile(res.latencies, 0.99),
			MaxFDs: maxFDs, End: end, Load: loadavg(), PeakFDs: peaks,
			FDs: map[string]string{ProcOnejob: fdBreakdown(s.pids[ProcOnejob], servers), ProcSFN: fdBreakdown(s.pids[ProcSFN], servers)}}
		if res.elapsed > 0 {
			row.JobsPerSec = float64(len(res.ids)) / res.elapsed.Seconds()
		}
		rep.Batches = append(rep.Batches, row)
		for _, p := range res.problems {
			rep.Problems = append(rep.Problems, fmt.Sprintf("batch %d: %s", b+1, p))
		}
		cfg.Logf("%s", row.line())
		if s.exited() {
			rep.Problems = append(rep.Problems, "onejob run exited: "+s.tail())
			return rep, nil
		}
		if ctx.Err() != nil {
			rep.Problems = append(rep.Problems, "stopped: "+ctx.Err().Error())
			return rep, nil
		}
		if len(res.problems) > 0 {
			// A stack that lost jobs once is not measured further.
			rep.Problems = append(rep.Problems, fmt.Sprintf("stopped after batch %d", b+1))
			return rep, nil
		}
	}
	stopPacer()
	<-paced

	calls, twice, err := simCalls(ctx, side, s.ends.SimURL)
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	if len(twice) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("attempt keys executed more than once: %v", twice))
	}
	rep.SimCalls = calls
	for name := range calls {
		calls[name] -= before[name]
	}
	if calls[sim.DemoPrimary] != wantPrimary || calls[sim.DemoFallback] != wantFallback {
		rep.Problems = append(rep.Problems, fmt.Sprintf("provider calls: %s %d, %s %d; the scripts imply %d and %d",
			sim.DemoPrimary, calls[sim.DemoPrimary], sim.DemoFallback, calls[sim.DemoFallback], wantPrimary, wantFallback))
	}
	rep.checkBatches(cfg.Limits)

	// At rest every idle connection between the parts must be closed by the
	// servers' idle timeouts, so each process returns to what it held
	// before the first job.
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = stack.DefaultIdleTimeout
	}
	rested := time.Now()
	rest, err := awaitRest(ctx, s.pids, servers, rep.Start, cfg.Limits.RestSlack, 2*idle+15*time.Second)
	rep.Rest, rep.RestWait = rest, time.Since(rested).Seconds()
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	return rep, nil
}

// checkBatches applies the growth limits after warm-up (the first batch).
func (r *Report) checkBatches(l Limits) {
	if len(r.Batches) < 3 {
		r.Problems = append(r.Problems, fmt.Sprintf("only %d batches ran", len(r.Batches)))
		return
	}
	second, last := r.Batches[1], r.Batches[len(r.Batches)-1]
	for _, b := range r.Batches[1:] {
		for _, name := range procNames {
			if b.MaxFDs[name] >= l.MaxFDs {
				r.Problems = append(r.Problems, fmt.Sprintf("batch %d: %s held %d descriptors (limit < %d): %s",
					b.N, name, b.MaxFDs[name], l.MaxFDs, b.PeakFDs[name]))
			}
		}
	}
	for _, name := range procNames {
		if limit := l.MaxRSSGrowth * float64(second.End[name].RSSKiB); float64(last.End[name].RSSKiB) > limit {
			r.Problems = append(r.Problems, fmt.Sprintf("%s RSS grew from %.1f MiB after batch 2 to %.1f MiB after batch %d (limit %.1f×)",
				name, second.End[name].RSSMiB(), last.End[name].RSSMiB(), last.N, l.MaxRSSGrowth))
		}
	}
	if l.MaxDrainGrowth > 0 && last.DrainSecs > l.MaxDrainGrowth*second.DrainSecs {
		r.Problems = append(r.Problems, fmt.Sprintf("batch %d's cycles drained in %.2f s (median), batch 2's in %.2f s (limit %.1f×)",
			last.N, last.DrainSecs, second.DrainSecs, l.MaxDrainGrowth))
	}
}

// awaitRest waits until no process holds more than slack descriptors above
// its start, nor more than restLinks connections to the stack's servers,
// and returns the usage it settled at.
func awaitRest(ctx context.Context, pids map[string]int, servers map[int]string, start map[string]Usage, slack int,
	patience time.Duration) (map[string]Usage, error) {
	deadline := time.Now().Add(patience)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		u, err := readUsage(pids)
		if err != nil {
			return nil, err
		}
		var over []string
		for _, name := range procNames {
			counts, err := classify(pids[name], servers)
			if err != nil {
				return u, err
			}
			if u[name].FDs > start[name].FDs+slack || counts.links() > restLinks {
				over = append(over, fmt.Sprintf("%s %d descriptors (started with %d), %d connections between the parts: %s",
					name, u[name].FDs, start[name].FDs, counts.links(), counts))
			}
		}
		if len(over) == 0 {
			return u, nil
		}
		if time.Now().After(deadline) {
			return u, fmt.Errorf("idle for %s, still holding: %s", patience.Round(time.Second), strings.Join(over, "; "))
		}
		select {
		case <-ctx.Done():
			return u, ctx.Err()
		case <-t.C:
		}
	}
}

// simCalls reads each provider's executions from the simulator, and the
// attempt keys any executed more than once.
func simCalls(ctx context.Context, hc *http.Client, simURL string) (map[string]int, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, simURL+"/calls", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("simulator calls: %w", err)
	}
	defer resp.Body.Close()
	var stats map[string]sim.DemoStats
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		return nil, nil, fmt.Errorf("simulator calls: %w", err)
	}
	out := map[string]int{}
	var twice []string
	for name, st := range stats {
		out[name] = st.Executions
		twice = append(twice, st.ExecutedMoreThanOnce...)
	}
	return out, twice, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func percentile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(float64(len(s))*q))].Microseconds()) / 1000
}

// loadavg is the machine's 1-, 5- and 15-minute load.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// line is a batch's progress line.
func (b Batch) line() string {
	var parts []string
	for _, name := range procNames {
		part := fmt.Sprintf("%s %d/%d fds %.0f MiB", name, b.MaxFDs[name], b.End[name].FDs, b.End[name].RSSMiB())
		part += fmt.Sprintf(" (files %.0f", float64(b.End[name].FileKiB)/1024)
		if h := b.End[name].HeapKiB; h > 0 {
			part += fmt.Sprintf(", heap %.0f", float64(h)/1024)
		}
		part += ")"
		parts = append(parts, part)
	}
	return fmt.Sprintf("batch %d: %d jobs (%d errors) %.1f jobs/s, create p50 %.1f ms p99 %.1f ms, drain %.2f s (max %.2f); %s; load %s",
		b.N, b.Jobs, b.Errors, b.JobsPerSec, b.P50Millis, b.P99Millis, b.DrainSecs, b.MaxDrainSecs, strings.Join(parts, ", "), b.Load)
}

// Table is the report as a Markdown table.
func (r *Report) Table() string {
	var sb strings.Builder
	sb.WriteString("| batch | jobs | errors | jobs/s | create p50 ms | create p99 ms | drain s (median/max) |")
	for _, name := range procNames {
		fmt.Fprintf(&sb, " %s fds max/end | %s RSS MiB |", name, name)
	}
	sb.WriteString(" load |\n|---|---|---|---|---|---|---|")
	for range procNames {
		sb.WriteString("---|---|")
	}
	sb.WriteString("---|\n")
	usageRow := func(label string, u map[string]Usage) {
		fmt.Fprintf(&sb, "| %s | | | | | | |", label)
		for _, name := range procNames {
			fmt.Fprintf(&sb, " %d | %.1f |", u[name].FDs, u[name].RSSMiB())
		}
		sb.WriteString(" |\n")
	}
	if r.Start != nil {
		usageRow("start", r.Start)
	}
	for _, b := range r.Batches {
		fmt.Fprintf(&sb, "| %d | %d | %d | %.1f | %.1f | %.1f | %.2f/%.2f |", b.N, b.Jobs, b.Errors, b.JobsPerSec, b.P50Millis, b.P99Millis, b.DrainSecs, b.MaxDrainSecs)
		for _, name := range procNames {
			fmt.Fprintf(&sb, " %d/%d | %.1f |", b.MaxFDs[name], b.End[name].FDs, b.End[name].RSSMiB())
		}
		fmt.Fprintf(&sb, " %s |\n", b.Load)
	}
	if r.Rest != nil {
		usageRow(fmt.Sprintf("rest (+%.0f s)", r.RestWait), r.Rest)
	}
	return sb.String()
}
