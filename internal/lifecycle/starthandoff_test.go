package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// failingHandoff refuses every hand-off.
type failingHandoff struct{ err error }

func (f failingHandoff) Handoff(context.Context, string) error { return f.err }

// TestHandoffStarter: a start that fails is handed to the sweeper, and is
// then no error of the caller's; a start that succeeds hands nothing off.
func TestHandoffStarter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	throttled := errors.New("start execution: ThrottlingException: Rate exceeded")
	j := job.Job{ID: "job_x", Status: job.StatusPending}

	t.Run("StartedHandsNothingOff", func(t *testing.T) {
		t.Parallel()
		st, h := &starter{started: map[string]bool{j.ID: true}}, &recordingHandoff{}
		started, err := lifecycle.HandoffStarter{Starter: st, Handoff: h}.Start(ctx, j)
		if !started || err != nil || len(h.handed()) != 0 {
			t.Fatalf("started=%v err=%v handed off %v", started, err, h.handed())
		}
	})
	t.Run("FailedIsHandedOff", func(t *testing.T) {
		t.Parallel()
		st, h, logs := &starter{errs: map[string]error{j.ID: throttled}}, &recordingHandoff{}, &testenv.SyncBuffer{}
		started, err := lifecycle.HandoffStarter{Starter: st, Handoff: h, Logger: slog.New(slog.NewJSONHandler(logs, nil))}.Start(ctx, j)
		if started || err != nil || !slices.Equal(h.handed(), []string{j.ID}) {
			t.Fatalf("started=%v err=%v handed off %v, want the job handed off and no error", started, err, h.handed())
		}
		if logged(logs, "execution_start_handed_off") != 1 || !strings.Contains(logs.String(), "ThrottlingException") {
			t.Fatalf("logs:\n%s", logs)
		}
	})
	t.Run("HandoffFailedReturnsBoth", func(t *testing.T) {
		t.Parallel()
		refused := errors.New("lambda invoke: 429 TooManyRequestsException")
		st := &starter{errs: map[string]error{j.ID: throttled}}
		started, err := lifecycle.HandoffStarter{Starter: st, Handoff: failingHandoff{refused}}.Start(ctx, j)
		if started || !errors.Is(err, throttled) || !errors.Is(err, refused) {
			t.Fatalf("started=%v err=%v, want both errors", started, err)
		}
	})
	t.Run("NoHandoffReturnsTheStartsError", func(t *testing.T) {
		t.Parallel()
		st := &starter{errs: map[string]error{j.ID: throttled}}
		if started, err := (lifecycle.HandoffStarter{Starter: st}).Start(ctx, j); started || !errors.Is(err, throttled) {
			t.Fatalf("started=%v err=%v", started, err)
		}
	})
}

// TestSweeperPrompt: a job handed off is started at once, young as it is,
// through the prompt's own starter; a job no longer pending or gone is
// nothing to do; the schedule's input sweeps.
func TestSweeperPrompt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newSweeper := func(t *testing.T, s *sweepRig, sweep, prompt lifecycle.Starter, logs *testenv.SyncBuffer) *lifecycle.Sweeper {
		t.Helper()
		sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: s.st, Starter: sweep, PromptStarter: prompt,
			Grace: time.Minute, NowFunc: s.clock.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}

	t.Run("StartsAPendingJobAtOnce", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		young := s.demo(t) // well within the sweep's grace
		sweep, prompt, logs := &starter{}, &starter{started: map[string]bool{young.ID: true}}, &testenv.SyncBuffer{}
		rep, err := newSweeper(t, s, sweep, prompt, logs).Prompt(ctx, young.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "report", rep, lifecycle.SweepReport{Open: 1, Pending: 1, Started: 1, HandedOff: young.ID})
		if !slices.Equal(prompt.asked, []string{young.ID}) || len(sweep.asked) != 0 {
			t.Fatalf("prompt's starter asked %v, the sweep's %v; want only the prompt's, for %s", prompt.asked, sweep.asked, young.ID)
		}
		if logged(logs, "handoff_start_done") != 1 {
			t.Fatalf("logs:\n%s", logs)
		}
	})
	t.Run("NothingToDo", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		prompt := &starter{}
		sw := newSweeper(t, s, &starter{}, prompt, &testenv.SyncBuffer{})
		for _, id := range []string{s.running.ID, s.unknown.ID, "job_gone"} {
			if rep, err := sw.Prompt(ctx, id); err != nil || rep != (lifecycle.SweepReport{HandedOff: id}) {
				t.Fatalf("prompt %s: report %+v err=%v", id, rep, err)
			}
		}
		if len(prompt.asked) != 0 {
			t.Fatalf("asked to start %v, want nothing", prompt.asked)
		}
	})
	t.Run("FailedAgainIsAnError", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		throttled := errors.New("ThrottlingException")
		prompt, logs := &starter{errs: map[string]error{s.pending.ID: throttled}}, &testenv.SyncBuffer{}
		if _, err := newSweeper(t, s, &starter{}, prompt, logs).Prompt(ctx, s.pending.ID); !errors.Is(err, throttled) {
			t.Fatalf("err = %v, want the start's", err)
		}
		if logged(logs, "handoff_start_failed") != 1 {
			t.Fatalf("logs:\n%s", logs)
		}
	})
	t.Run("InvokedByAHandoffOrTheSchedule", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		sweep, prompt := &starter{}, &starter{}
		invoked := newSweeper(t, s, sweep, prompt, &testenv.SyncBuffer{}).Invoked()
		in, _ := json.Marshal(lifecycle.HandoffEvent{JobID: s.pending.ID})
		if _, err := invoked(ctx, in); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(prompt.asked, []string{s.pending.ID}) || len(sweep.asked) != 0 {
			t.Fatalf("a hand-off: prompt asked %v, sweep %v", prompt.asked, sweep.asked)
		}
		// EventBridge's scheduled event.
		scheduled := `{"version":"0","id":"e1","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`
		rep, err := invoked(ctx, json.RawMessage(scheduled))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Open != 3 || !slices.Equal(sweep.asked, []string{s.pending.ID}) {
			t.Fatalf("the schedule: report %+v, sweep asked %v; want a sweep of the 3 open jobs starting the pending one", rep, sweep.asked)
		}
	})
}

// TestSweeperRestartsOnlyJobsOlderThanItself: locally an execution is lost
// only with the stack, so the sweeper restarts the running jobs created
// before it, never its own stack's: a job's start is then never one among
// hundreds of restarts of executions that run.
func TestSweeperRestartsOnlyJobsOlderThanItself(t *testing.T) {
	t.Parallel()
	s := newSweepRig(t)
	st := &starter{}
	sw := s.sweeper(t, st, 0, &events{}, &testenv.SyncBuffer{})
	s.clock.Advance(time.Second)
	newer := s.demo(t)
	s.claim(t, newer.ID, s.start(t, newer.ID, primary).Number)
	s.clock.Advance(10 * time.Minute) // past the grace
	rep, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Open != 5 {
		t.Fatalf("report %+v, want the 4 open jobs older than the sweeper and the newer one", rep)
	}
	if slices.Contains(st.asked, newer.ID) || !slices.Contains(st.asked, s.running.ID) || !slices.Contains(st.asked, s.unknown.ID) {
		t.Fatalf("asked to start %v: want the older running jobs %s and %s restarted, never the newer %s",
			st.asked, s.running.ID, s.unknown.ID, newer.ID)
	}
}
