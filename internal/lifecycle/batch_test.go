package lifecycle_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/provider/openai"
)

// These tests run jobs that may wait a day as lines of provider batches,
// against the strict Batch and Message Batches simulators over loopback,
// on memstore with the rig's clock, which the simulators' clocks follow.

// batchSim is what the tests drive of either batch simulator.
type batchSim interface {
	Advance(d time.Duration)
	Complete(id string) error
	LoseAnswers(n int)
	FailLines(ids ...string)
	Creates() int
	Batches() []sim.BatchRecord
}

// batchRig is a rig whose tasks reach one batch provider (name).
type batchRig struct {
	*rig
	name    string
	tasks   *lifecycle.Tasks
	sim     batchSim
	lines   *sim.Simulator
	p       provider.Batcher
	poller  *lifecycle.Poller
	starter *starter
}

// newBatchRig serves kind's batch simulator (openai or anthropic) and
// makes the tasks.
func newBatchRig(t *testing.T, kind string) *batchRig {
	t.Helper()
	r := &batchRig{rig: newRig(t), name: "batch-" + kind, starter: &starter{}}
	r.lines = sim.New(sim.Options{Oracle: sim.Demo{Provider: r.name}})
	opts := sim.BatchOptions{Lines: r.lines, APIKey: "sk-batch", NowFunc: r.clock.Now}
	var handler http.Handler
	switch kind {
	case provider.KindOpenAI:
		s, err := sim.NewOpenAIBatch(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		r.sim, handler = s, s.Handler()
	default:
		s, err := sim.NewMessageBatches(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		r.sim, handler = s, s.Handler()
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	switch kind {
	case provider.KindOpenAI:
		a, err := openai.New(openai.Config{Name: r.name, BaseURL: srv.URL + "/v1", Model: "gpt-test", APIKey: "sk-batch", HTTPClient: srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		r.p = a
	default:
		a, err := anthropic.New(anthropic.Config{Name: r.name, BaseURL: srv.URL, Model: "claude-test", APIKey: "sk-batch", HTTPClient: srv.Client()})
		if err != nil {
			t.Fatal(err)
		}
		r.p = a
	}
	reg, err := provider.RegistryOf(r.p)
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := catalog()
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: reg, Certifications: r.st, Batches: r.st.Store, Starter: r.starter, CallTimeout: callTimeout, PollInterval: pollInterval,
		OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if r.poller, err = lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: r.tasks, Due: r.st.Store, NowFunc: r.clock.Now}); err != nil {
		t.Fatal(err)
	}
	return r
}

// pass runs the scheduled pass once.
func (r *batchRig) pass(t *testing.T) lifecycle.BatchReport {
	t.Helper()
	rep, err := r.poller.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rep.Batches
}

// createAndRun makes owner's demo job that may wait a day on the batch
// provider alone and runs it: its attempt is launched and queued.
func (r *batchRig) createAndRun(t *testing.T, owner, key string) job.Job {
	t.Helper()
	j, _, err := r.eng.Create(t.Context(), job.Request{Owner: owner, IdempotencyKey: key, Type: "demo",
		Input: json.RawMessage(`{"prompt":"` + owner + ` asks ` + key + `"}`), Providers: []string{r.name}, Primary: r.name,
		Tier: job.TierBatch24h})
	if err != nil {
		t.Fatal(err)
	}
	// The run queues its line and ends the execution, the job parked:
	// nothing of onejob runs for it until its batch ends.
	res, err := r.tasks.Run(t.Context(), lifecycle.RunInput{JobID: j.ID})
	if err != nil || res.Parked == "" {
		t.Fatalf("run of a batch line: %+v, %v; want it parked on its line", res, err)
	}
	j = r.get(t, j.ID)
	a, _ := j.Attempt(1)
	if a.State != job.AttemptRunning || a.Remote == nil || !a.Remote.IsLine() || a.Remote.Batch != "" || a.Remote.Tier != job.TierBatch24h {
		t.Fatalf("after its run: %s %+v", a.State, a.Remote)
	}
	return j
}

// due reads the jobs again and lists those whose lines are due now.
func (r *batchRig) due(t *testing.T, jobs []job.Job) []job.Job {
	t.Helper()
	now := make([]job.Job, 0, len(jobs))
	for _, j := range jobs {
		now = append(now, r.get(t, j.ID))
	}
	return lifecycle.LinesDue(now, r.clock.Now())
}

// TestBatchLinesOfSeveralOwners (issue 40): twelve jobs of three owners
// that may wait a day go out as one batch of the provider's, recorded
// before it is sent and sent once; a job cancelled before it was sent is
// dropped (never sent, not billed), one cancelled after is discarded when
// its line's result comes (billed as the provider bills it) while the rest
// of the batch succeeds, each with its own line's result; a line the
// provider reports errored fails only its job; the provider is asked once
// per due time about the batch, never per line.
func TestBatchLinesOfSeveralOwners(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := newBatchRig(t, kind)
			var jobs []job.Job
			for _, owner := range []string{"ana", "bo", "cy"} {
				for i := range 4 {
					jobs = append(jobs, r.createAndRun(t, owner, owner+"-"+string(rune('a'+i))))
				}
			}
			// Queued, each listed for the batcher; not yet gathered: a pass
			// sends nothing.
			if due := r.due(t, jobs); len(due) != len(jobs) {
				t.Fatalf("%d of %d queued lines listed for the batcher", len(due), len(jobs))
			}
			if rep := r.pass(t); rep != (lifecycle.BatchReport{}) || r.sim.Creates() != 0 {
				t.Fatalf("a pass before the gathering time: %+v, %d creates", rep, r.sim.Creates())
			}
			dropped := jobs[4] // bo's first, cancelled before its line is sent
			if _, err := r.eng.Cancel(t.Context(), dropped.ID); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(job.DefaultBatchPolicy().MaxGather)
			rep := r.pass(t)
			if rep.Batches != 1 || rep.Submits != 1 || rep.Dropped != 1 || r.sim.Creates() != 1 {
				t.Fatalf("sent %+v, %d creates; want one batch of 11 lines, sent once", rep, r.sim.Creates())
			}
			sent := r.sim.Batches()[0]
			if len(sent.Lines) != 11 {
				t.Fatalf("the batch holds %d lines", len(sent.Lines))
			}
			if d := r.get(t, dropped.ID); d.Status != job.StatusCancelled || d.Unsettled() {
				t.Fatalf("the job cancelled first: %s, unsettled %v", d.Status, d.Unsettled())
			}
			if a, _ := r.get(t, dropped.ID).Attempt(1); a.State != job.AttemptFailed || !a.Error.NotActed() {
				t.Fatalf("its attempt: %s %+v: never sent, not billed", a.State, a.Error)
			}
			open, err := r.st.Store.OpenBatches(t.Context(), r.name)
			if err != nil || len(open) != 1 || open[0].State != job.BatchSubmitted || open[0].Work != sent.ID {
				t.Fatalf("open batches: %+v, %v", open, err)
			}
			for _, j := range jobs {
				if j.ID == dropped.ID {
					continue
				}
				if a, _ := r.get(t, j.ID).Attempt(1); a.Remote.Batch != open[0].ID {
					t.Fatalf("job %s's line is in batch %q, want %s", j.ID, a.Remote.Batch, open[0].ID)
				}
			}
			// Cancelled after it was sent: the rest of the batch is left alone.
			late := jobs[8]
			if _, err := r.eng.Cancel(t.Context(), late.ID); err != nil {
				t.Fatal(err)
			}
			failing := jobs[1]
			a, _ := r.get(t, failing.ID).Attempt(1)
			r.sim.FailLines(a.Remote.Line)
			// Asked when due, once per batch.
			if rep := r.pass(t); rep.Asked != 0 {
				t.Fatalf("asked %d times before it was due", rep.Asked)
			}
			r.clock.Advance(30 * time.Second)
			if rep := r.pass(t); rep.Asked != 1 || rep.Lines != 0 {
				t.Fatalf("first poll: %+v", rep)
			}
			if err := r.sim.Complete(sent.ID); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(time.Minute)
			rep = r.pass(t)
			if rep.Asked != 1 || rep.Lines != 11 {
				t.Fatalf("the pass after it ended: %+v", rep)
			}
			if rec, _ := batchRecord(r.sim, sent.ID); rec.Reads+rec.Cancels != 2 {
				t.Fatalf("the provider was asked %d times about its batch, want 2 (one per due time)", rec.Reads)
			}
			for _, j := range jobs {
				got := r.get(t, j.ID)
				a, _ := got.Attempt(1)
				switch j.ID {
				case dropped.ID:
				case late.ID:
					if got.Status != job.StatusCancelled || a.State != job.AttemptDiscarded || a.Usage == nil || a.Usage.OutputTokens == 0 {
						t.Fatalf("the job cancelled after its line was sent: %s, attempt %s %+v", got.Status, a.State, a.Usage)
					}
				case failing.ID:
					if a.State != job.AttemptFailed || a.Error.Class != job.ClassRetryable || !a.Error.NotActed() || got.Status.Terminal() {
						t.Fatalf("the errored line's job: %s, attempt %s %+v", got.Status, a.State, a.Error)
					}
				default:
					var out struct{ Text, Provider string }
					if got.Status != job.StatusSucceeded || json.Unmarshal(got.Result, &out) != nil ||
						!strings.Contains(out.Text, j.Owner+" asks "+j.IdempotencyKey) || out.Provider != r.name {
						t.Fatalf("job %s: %s %s", j.ID, got.Status, got.Result)
					}
					if a.Remote.ID != sent.ID || a.Remote.Status != "succeeded" || a.Usage == nil || a.Usage.OutputTokens == 0 {
						t.Fatalf("job %s's work: %+v, usage %+v", j.ID, a.Remote, a.Usage)
					}
				}
			}
			// The pass that ended its line woke it (its run decides what
			// it does next: it has no other provider, so it fails).
			if !slices.Contains(r.starter.asked, failing.ID) || len(r.starter.asked) != 1 {
				t.Fatalf("woken: %v, want the errored line's job alone", r.starter.asked)
			}
			if _, err := r.tasks.Run(t.Context(), lifecycle.RunInput{JobID: failing.ID}); err != nil {
				t.Fatal(err)
			}
			if got := r.get(t, failing.ID); got.Status != job.StatusFailed {
				t.Fatalf("the errored line's job after its run: %s", got.Status)
			}
			if open, _ := r.st.Store.OpenBatches(t.Context(), r.name); len(open) != 0 {
				t.Fatalf("%d batches left open", len(open))
			}
			for _, id := range sent.Lines {
				if n := r.lines.Executions(id); n > 1 {
					t.Fatalf("line %s ran %d times", id, n)
				}
			}
		})
	}
}

// TestALostBatchSubmitIsFoundAndSentOnce: a submit whose answer was lost
// leaves the batch submitting; the next pass finds it among the
// provider's batches by its ID, records it, and never sends it again.
func TestALostBatchSubmitIsFoundAndSentOnce(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := newBatchRig(t, kind)
			var jobs []job.Job
			for _, owner := range []string{"ana", "bo"} {
				jobs = append(jobs, r.createAndRun(t, owner, owner+"-1"), r.createAndRun(t, owner, owner+"-2"))
			}
			r.sim.LoseAnswers(1)
			r.clock.Advance(job.DefaultBatchPolicy().MaxGather)
			// The pass that sent it, its answer lost, looks for it at once
			// (the batch's ID in its metadata, or its request count).
			rep := r.pass(t)
			open, _ := r.st.Store.OpenBatches(t.Context(), r.name)
			sent := r.sim.Batches()
			if rep.Submits != 1 || rep.Asked != 1 || len(open) != 1 || !open[0].Found || open[0].Work != sent[0].ID ||
				!sent[0].AnswerLost || r.sim.Creates() != 1 {
				t.Fatalf("the pass: %+v, open %+v, %d creates", rep, open, r.sim.Creates())
			}
			if err := r.sim.Complete(sent[0].ID); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(time.Minute)
			r.pass(t)
			for _, j := range jobs {
				if got := r.get(t, j.ID); got.Status != job.StatusSucceeded {
					t.Fatalf("job %s: %s", j.ID, got.Status)
				}
			}
			if r.sim.Creates() != 1 {
				t.Fatalf("%d creates, want the one", r.sim.Creates())
			}
		})
	}
}

func batchRecord(s batchSim, id string) (sim.BatchRecord, bool) {
	for _, b := range s.Batches() {
		if b.ID == id {
			return b, true
		}
	}
	return sim.BatchRecord{}, false
}
