package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// starter is a fake lifecycle.Starter: per job, whether it starts a new
// execution or fails; it records the jobs it was asked to start.
type starter struct {
	mu      sync.Mutex
	started map[string]bool
	errs    map[string]error
	asked   []string
}

func (s *starter) Start(_ context.Context, j job.Job) (bool, error) {
	id := j.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, id)
	return s.started[id], s.errs[id]
}

// sweepRig holds open jobs of every kind, created 10 minutes ago, and a
// young one.
type sweepRig struct {
	*rig
	pending, running, unknown job.Job
	unknownAge                time.Duration
}

func newSweepRig(t *testing.T) *sweepRig {
	t.Helper()
	ctx := context.Background()
	r := newRig(t)
	s := &sweepRig{rig: r}
	s.pending = r.demo(t)
	s.running = r.demo(t)
	r.claim(t, s.running.ID, r.start(t, s.running.ID, primary).Number)
	s.unknown = r.demo(t)
	r.claim(t, s.unknown.ID, r.start(t, s.unknown.ID, primary).Number)
	if _, err := r.eng.MarkUnknown(ctx, s.unknown.ID, 1, "timeout"); err != nil {
		t.Fatal(err)
	}
	done := r.demo(t)
	if _, err := r.eng.Cancel(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(10 * time.Minute)
	r.demo(t) // young: left to the API's own start
	s.unknownAge = r.clock.Now().Sub(attemptOf(t, r.get(t, s.unknown.ID), 1).UnknownSince)
	return s
}

func (s *sweepRig) sweeper(t *testing.T, st lifecycle.Starter, limit int, ev lifecycle.Events, logs *testenv.SyncBuffer) *lifecycle.Sweeper {
	t.Helper()
	return s.sweeperWith(t, st, limit, ev, logs, true)
}

func (s *sweepRig) sweeperWith(t *testing.T, st lifecycle.Starter, limit int, ev lifecycle.Events, logs *testenv.SyncBuffer,
	restartRunning bool) *lifecycle.Sweeper {
	t.Helper()
	sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: s.st, Starter: st, Grace: time.Minute, Limit: limit,
		RestartRunning: restartRunning, NowFunc: s.clock.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func TestSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RestartsOpenJobs", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		st := &starter{started: map[string]bool{s.pending.ID: true}}
		ev, logs := &events{}, &testenv.SyncBuffer{}
		rep, err := s.sweeper(t, st, 0, ev, logs).Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "report", rep, lifecycle.SweepReport{Open: 3, Pending: 1, Started: 1, OldestUnknownSeconds: s.unknownAge.Seconds()})
		if want := []string{s.pending.ID, s.running.ID, s.unknown.ID}; !slices.Equal(st.asked, want) {
			t.Fatalf("asked to start %v, want %v (oldest first)", st.asked, want)
		}
		sameEvents(t, ev, fmt.Sprintf("oldest_unknown %s", s.unknownAge))
		if logged(logs, "execution_restarted") != 1 || logged(logs, "sweep_done") != 1 {
			t.Fatalf("logs:\n%s", logs)
		}
	})

	t.Run("OnlyPendingJobsInAWS", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		st := &starter{started: map[string]bool{s.pending.ID: true}}
		ev := &events{}
		rep, err := s.sweeperWith(t, st, 0, ev, &testenv.SyncBuffer{}, false).Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "report", rep, lifecycle.SweepReport{Open: 3, Pending: 1, Started: 1, OldestUnknownSeconds: s.unknownAge.Seconds()})
		if want := []string{s.pending.ID}; !slices.Equal(st.asked, want) {
			t.Fatalf("asked to start %v, want only the pending job %v", st.asked, want)
		}
		sameEvents(t, ev, fmt.Sprintf("oldest_unknown %s", s.unknownAge))
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		st := &starter{}
		rep, err := s.sweeper(t, st, 2, &events{}, &testenv.SyncBuffer{}).Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "report", rep, lifecycle.SweepReport{Open: 2, Pending: 1})
		if want := []string{s.pending.ID, s.running.ID}; !slices.Equal(st.asked, want) {
			t.Fatalf("asked to start %v, want %v", st.asked, want)
		}
	})

	// Review M5: a sweep reads at most Limit open jobs and the next goes on
	// after them, back to the oldest after the last; the oldest-unknown
	// metric covers every page.
	t.Run("LimitGoesOnNextSweep", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		st := &starter{}
		sw := s.sweeper(t, st, 2, &events{}, &testenv.SyncBuffer{})
		var reps []lifecycle.SweepReport
		for range 3 {
			rep, err := sw.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			reps = append(reps, rep)
		}
		if want := []string{s.pending.ID, s.running.ID, s.unknown.ID, s.pending.ID, s.running.ID}; !slices.Equal(st.asked, want) {
			t.Fatalf("asked to start %v over three sweeps, want %v", st.asked, want)
		}
		age := s.unknownAge.Seconds()
		sameJSON(t, "reports", reps, []lifecycle.SweepReport{{Open: 2, Pending: 1}, {Open: 1, OldestUnknownSeconds: age},
			{Open: 2, Pending: 1, OldestUnknownSeconds: age}})
	})

	// The M5 residual, kept by choice: the cursor lives in the sweeper's
	// instance, so a cold start (a new Sweeper on the same store, mid
	// cycle) begins again with the oldest page, the jobs stranded longest,
	// and goes on from there. A cycle of P pages then needs P runs of one
	// instance; the scheduled function reuses its instance from minute to
	// minute, so only an instance recycled more often than every P minutes
	// (P = open jobs / 1000) would leave the newest pages for later.
	t.Run("AColdStartBeginsAtTheOldest", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		st := &starter{}
		if _, err := s.sweeper(t, st, 2, &events{}, &testenv.SyncBuffer{}).Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		cold := s.sweeper(t, st, 2, &events{}, &testenv.SyncBuffer{})
		for range 2 {
			if _, err := cold.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if want := []string{s.pending.ID, s.running.ID, s.pending.ID, s.running.ID, s.unknown.ID}; !slices.Equal(st.asked, want) {
			t.Fatalf("asked to start %v, want the first page, then (cold) the first page again and the next", st.asked)
		}
	})

	// Issue 40's safety net: a parked job whose work ended needs a run its
	// applier starts; when that start was lost, the sweeper starts it,
	// under the same name, once it was quiet for its grace. A job still
	// parked needs none, in AWS or locally.
	t.Run("StartsAWokenJobWhoseStartWasLost", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		woken, parked := r.demo(t), r.demo(t)
		for _, j := range []job.Job{woken, parked} {
			r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
			if _, err := r.eng.SubmittedOn(ctx, r.get(t, j.ID), 1, job.Remote{ID: "work-" + j.ID[4:10], Tier: job.TierNow},
				job.RemotePolicy{Poll: job.DefaultPollSchedule()}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.eng.FailAttemptOn(ctx, r.get(t, woken.ID), 1, job.Failure{Class: job.ClassRetryable, Message: "work failed"}, job.Call{}); err != nil {
			t.Fatal(err)
		}
		s := &sweepRig{rig: r}
		r.clock.Advance(59 * time.Second)
		if rep, err := s.sweeper(t, newExecStarter(), 0, &events{}, &testenv.SyncBuffer{}).Sweep(ctx); err != nil || rep.Started != 0 {
			t.Fatalf("within the grace: %+v, %v", rep, err)
		}
		r.clock.Advance(time.Second)
		for _, restart := range []bool{false, true} {
			st := newExecStarter()
			rep, err := s.sweeperWith(t, st, 0, &events{}, &testenv.SyncBuffer{}, restart).Sweep(ctx)
			if err != nil || rep.Started != 1 || !slices.Equal(st.names(), []string{woken.ID + "-1"}) {
				t.Fatalf("restart %v: %+v, %v, started %v; want %s-1 alone", restart, rep, err, st.names(), woken.ID)
			}
		}
	})

	t.Run("NothingOpen", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		s := &sweepRig{rig: r}
		ev := &events{}
		rep, err := s.sweeper(t, &starter{}, 0, ev, &testenv.SyncBuffer{}).Sweep(ctx)
		if err != nil || rep != (lifecycle.SweepReport{}) {
			t.Fatalf("report %+v err=%v", rep, err)
		}
		sameEvents(t, ev, "oldest_unknown 0s")
	})

	t.Run("JoinsStartErrors", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		errA, errB := errors.New("start failed: throttled"), errors.New("start failed: access denied")
		st := &starter{started: map[string]bool{s.running.ID: true}, errs: map[string]error{s.pending.ID: errA, s.unknown.ID: errB}}
		rep, err := s.sweeper(t, st, 0, &events{}, &testenv.SyncBuffer{}).Sweep(ctx)
		if !errors.Is(err, errA) || !errors.Is(err, errB) {
			t.Fatalf("err = %v, want both start errors", err)
		}
		sameJSON(t, "report", rep, lifecycle.SweepReport{Open: 3, Pending: 1, Started: 1, OldestUnknownSeconds: s.unknownAge.Seconds()})
	})

	t.Run("StoreUnavailable", func(t *testing.T) {
		t.Parallel()
		s := newSweepRig(t)
		s.st.listOpenErr = fmt.Errorf("%w: list open: throttled", lifecycle.ErrUnavailable)
		st := &starter{}
		ev := &events{}
		rep, err := s.sweeper(t, st, 0, ev, &testenv.SyncBuffer{}).Sweep(ctx)
		if !errors.Is(err, lifecycle.ErrUnavailable) || rep != (lifecycle.SweepReport{}) || len(st.asked) != 0 {
			t.Fatalf("report %+v err=%v asked=%v", rep, err, st.asked)
		}
		sameEvents(t, ev)
	})
}
