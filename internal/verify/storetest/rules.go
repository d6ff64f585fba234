package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The job rules that rest on the store, driven through a real engine.

var ruleTests = []test{
	{"DoubleClickYieldsOneJob", testDoubleClickYieldsOneJob},
	{"IdempotencyKeyScope", testIdempotencyKeyScope},
	{"StartAttemptGuard", testStartAttemptGuard},
	{"ConcurrentStartsCreateOneAttempt", testConcurrentStartsCreateOneAttempt},
	{"TimeoutMakesUnknownAndBlocksUntilResolved", testTimeoutMakesUnknownAndBlocksUntilResolved},
	{"ReverseOrderFinish", testReverseOrderFinish},
	{"ConcurrentCompletersOneWinner", testConcurrentCompletersOneWinner},
	{"AttemptBookkeepingDoesNotMoveVersion", testAttemptBookkeepingDoesNotMoveVersion},
	{"Cancel", testCancel},
	{"ListNewestFirstWithCursor", testListNewestFirstWithCursor},
	{"OneResolutionApplies", testOneResolutionApplies},
	{"ResolvingAFinishedJobsAttempt", testResolvingAFinishedJobsAttempt},
}

// env is one test's engine on its own store.
type env struct {
	eng  *lifecycle.Engine
	st   Store
	logs *testenv.SyncBuffer
}

// newEnv builds an engine over a fresh store, logging JSON into env.logs;
// now is its clock (time.Now when nil).
func newEnv(t *testing.T, fresh func(*testing.T) Store, now func() time.Time) *env {
	t.Helper()
	st := fresh(t)
	logs := &testenv.SyncBuffer{}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, NowFunc: now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &env{eng: eng, st: st, logs: logs}
}

func (e *env) create(t *testing.T, r job.Request) job.Job {
	t.Helper()
	j, _, err := e.eng.Create(context.Background(), r)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return j
}

// running starts attempts on the given providers and marks each running.
func (e *env) running(t *testing.T, id string, providers ...string) {
	t.Helper()
	ctx := context.Background()
	for _, p := range providers {
		_, a, err := e.eng.StartAttempt(ctx, id, p)
		if err != nil {
			t.Fatalf("start on %s: %v", p, err)
		}
		if _, claimed, err := e.eng.MarkRunning(ctx, id, a.Number); err != nil || !claimed {
			t.Fatalf("mark running %d: claimed=%v err=%v", a.Number, claimed, err)
		}
	}
}

func testDoubleClickYieldsOneJob(t *testing.T, fresh func(*testing.T) Store) {
	e := newEnv(t, fresh, nil)
	rounds := e.st.rounds()
	const clients = 64
	for round := range rounds {
		r := request("owner-1", fmt.Sprintf("click-%d", round), `{"prompt":"hi"}`)
		var wg sync.WaitGroup
		ids := make([]string, clients)
		replayed := make([]bool, clients)
		errs := make([]error, clients)
		start := make(chan struct{})
		for i := range clients {
			wg.Go(func() {
				<-start
				j, rep, err := e.eng.Create(context.Background(), r)
				ids[i], replayed[i], errs[i] = j.ID, rep, err
			})
		}
		close(start)
		wg.Wait()
		replays := 0
		for i := range clients {
			if errs[i] != nil {
				t.Fatalf("round %d client %d: %v", round, i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("round %d: ids differ: %s vs %s", round, ids[i], ids[0])
			}
			if replayed[i] {
				replays++
			}
		}
		if replays != clients-1 {
			t.Fatalf("round %d: %d replays, want %d", round, replays, clients-1)
		}
	}
	if got := e.st.Count(t).Jobs; got != rounds {
		t.Fatalf("jobs stored = %d, want %d", got, rounds)
	}
}

func testIdempotencyKeyScope(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	tests := []struct {
		name       string
		second     job.Request
		wantReplay bool
		wantReused bool
		wantNewJob bool
	}{
		{name: "SameInputReplays", second: request("a", "k", `{"prompt":"hi","n":1}`), wantReplay: true},
		{name: "ReorderedKeysReplay", second: request("a", "k", `{"n":1,"prompt":"hi"}`), wantReplay: true},
		{name: "WhitespaceReplays", second: request("a", "k", " {\n\t\"prompt\" : \"hi\" ,\"n\": 1 }\n"), wantReplay: true},
		{name: "NumberSpellingReplays", second: request("a", "k", `{"prompt":"hi","n":1.0e0}`), wantReplay: true},
		{name: "DifferentInputConflicts", second: request("a", "k", `{"prompt":"hello","n":1}`), wantReused: true},
		{name: "DifferentTypeConflicts", second: func() job.Request {
			r := request("a", "k", `{"prompt":"hi","n":1}`)
			r.Type = "demo-hedge"
			return r
		}(), wantReused: true},
		{name: "DifferentProvidersConflict", second: func() job.Request {
			r := request("a", "k", `{"prompt":"hi","n":1}`)
			r.Providers = []string{"sim-fallback", "sim-primary"}
			return r
		}(), wantReused: true},
		{name: "OtherOwnerGetsOwnJob", second: request("b", "k", `{"prompt":"hi","n":1}`), wantNewJob: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fresh, nil)
			first := e.create(t, request("a", "k", `{"prompt":"hi","n":1}`))
			got, replayed, err := e.eng.Create(ctx, tc.second)
			switch {
			case tc.wantReused:
				if !isKeyReused(err, first.ID) {
					t.Fatalf("err = %v, want KeyReusedError for %s", err, first.ID)
				}
				stored, err := e.eng.Get(ctx, first.ID)
				if err != nil || stored.Fingerprint != first.Fingerprint || string(stored.Input) != string(first.Input) || stored.Revision != first.Revision {
					t.Fatalf("stored job changed: %+v (err %v)", stored, err)
				}
			case tc.wantReplay:
				if err != nil || !replayed || got.ID != first.ID {
					t.Fatalf("got id=%s replayed=%v err=%v, want replay of %s", got.ID, replayed, err, first.ID)
				}
			case tc.wantNewJob:
				if err != nil || replayed || got.ID == first.ID {
					t.Fatalf("got id=%s replayed=%v err=%v, want a new job", got.ID, replayed, err)
				}
			}
			wantJobs := 1
			if tc.wantNewJob {
				wantJobs = 2
			}
			if n := e.st.Count(t).Jobs; n != wantJobs {
				t.Fatalf("jobs stored = %d, want %d", n, wantJobs)
			}
		})
	}
}

func testStartAttemptGuard(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env, id string)
		state job.AttemptState
	}{
		{name: "BlockedWhileStarting", state: job.AttemptStarting, setup: func(t *testing.T, e *env, id string) {
			if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "BlockedWhileUnknown", state: job.AttemptUnknown, setup: func(t *testing.T, e *env, id string) {
			e.running(t, id, "sim-primary")
			if _, err := e.eng.MarkUnknown(ctx, id, 1, "timeout"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fresh, nil)
			j := e.create(t, request("a", "k", `{"prompt":"x"}`))
			tc.setup(t, e, j.ID)
			before, _ := e.eng.Get(ctx, j.ID)
			ledger := e.st.Count(t).Ledger
			_, _, err := e.eng.StartAttempt(ctx, j.ID, "sim-fallback")
			var blocked *job.BlockedError
			if !errors.As(err, &blocked) || blocked.Attempt != 1 || blocked.State != tc.state {
				t.Fatalf("err = %v, want BlockedError on attempt 1 (%s)", err, tc.state)
			}
			after, _ := e.eng.Get(ctx, j.ID)
			if after.Revision != before.Revision || after.AttemptCount != 1 || e.st.Count(t).Ledger != ledger {
				t.Fatalf("something was written: revision %d→%d, attempts %d", before.Revision, after.Revision, after.AttemptCount)
			}
		})
	}
}

func testConcurrentStartsCreateOneAttempt(t *testing.T, fresh func(*testing.T) Store) {
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	const n = 32
	var wg sync.WaitGroup
	var ok, blocked atomic.Int64
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, _, err := e.eng.StartAttempt(context.Background(), j.ID, fmt.Sprintf("p%d", i))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, job.ErrAttemptBlocked):
				blocked.Add(1)
			default:
				t.Errorf("start: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	got, _ := e.eng.Get(context.Background(), j.ID)
	if ok.Load() != 1 || blocked.Load() != n-1 || got.AttemptCount != 1 || len(got.Attempts) != 1 {
		t.Fatalf("ok=%d blocked=%d attempts=%d, want exactly one attempt", ok.Load(), blocked.Load(), got.AttemptCount)
	}
	if c := e.st.Count(t).Ledger; c != 1 {
		t.Fatalf("ledger holds %d attempts, want 1", c)
	}
}

func testTimeoutMakesUnknownAndBlocksUntilResolved(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	e.running(t, j.ID, "sim-primary")
	got, err := e.eng.MarkUnknown(ctx, j.ID, 1, "provider timeout after 2s")
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := got.Attempt(1); got.Status != job.StatusUnknown || a.State != job.AttemptUnknown {
		t.Fatalf("status=%s attempt=%s, want unknown/unknown", got.Status, a.State)
	}
	// Redelivered timeout: a no-op.
	if again, err := e.eng.MarkUnknown(ctx, j.ID, 1, "again"); err != nil || again.Revision != got.Revision {
		t.Fatalf("second mark unknown wrote: err=%v rev %d→%d", err, got.Revision, again.Revision)
	}
	for range 3 {
		if _, _, err := e.eng.StartAttempt(ctx, j.ID, "sim-fallback"); !errors.Is(err, job.ErrAttemptBlocked) {
			t.Fatalf("start while unknown: %v", err)
		}
	}
	res, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "provider confirmed no work"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != job.StatusRunning {
		t.Fatalf("after resolve: status %s, want running", res.Status)
	}
	if _, a, err := e.eng.StartAttempt(ctx, j.ID, "sim-fallback"); err != nil || a.Number != 2 {
		t.Fatalf("start after resolve: attempt %d err %v", a.Number, err)
	}
}

func testReverseOrderFinish(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	e.running(t, j.ID, "sim-primary", "sim-fallback")
	read, _ := e.eng.Get(ctx, j.ID)
	a1, _ := read.Attempt(1)
	a2, _ := read.Attempt(2)
	if a1.ReadVersion != read.Version || a2.ReadVersion != read.Version {
		t.Fatalf("attempts read versions %d,%d; job at %d", a1.ReadVersion, a2.ReadVersion, read.Version)
	}
	second, err := e.eng.Complete(ctx, j.ID, 2, json.RawMessage(`{"text":"from fallback"}`), "req-2")
	if err != nil || !second.Won {
		t.Fatalf("attempt 2: won=%v err=%v", second.Won, err)
	}
	first, err := e.eng.Complete(ctx, j.ID, 1, json.RawMessage(`{"text":"from primary"}`), "req-1")
	if err != nil || first.Won || first.Lost == nil || first.Lost.Winner != 2 {
		t.Fatalf("attempt 1: %+v err=%v, want lost to 2", first, err)
	}
	final, _ := e.eng.Get(ctx, j.ID)
	l1, _ := final.Attempt(1)
	l2, _ := final.Attempt(2)
	if string(final.Result) != `{"text":"from fallback"}` || final.CompletedBy != 2 || final.Version != read.Version+1 ||
		final.Status != job.StatusSucceeded || l1.State != job.AttemptDiscarded || l2.State != job.AttemptSucceeded {
		t.Fatalf("final job: result=%s completed_by=%d version=%d (read %d) status=%s a1=%s a2=%s",
			final.Result, final.CompletedBy, final.Version, read.Version, final.Status, l1.State, l2.State)
	}
	if n := strings.Count(e.logs.String(), `"msg":"race_lost"`); n != 1 {
		t.Fatalf("race_lost logged %d times, want 1:\n%s", n, e.logs.String())
	}
	line := lineWith(e.logs.String(), `"msg":"race_lost"`)
	for _, want := range []string{`"job_id":"` + j.ID + `"`, `"losing_attempt":1`, `"winning_attempt":2`} {
		if !strings.Contains(line, want) {
			t.Fatalf("race_lost line %s lacks %s", line, want)
		}
	}
	attempts, err := e.eng.Attempts(ctx, final)
	if err != nil || len(attempts) != 2 || attempts[0].State != job.AttemptDiscarded || attempts[1].Outcome != "won" {
		t.Fatalf("ledger attempts = %+v err=%v", attempts, err)
	}
	// A redelivered result of either attempt changes nothing.
	for _, n := range []int{1, 2} {
		if _, err := e.eng.Complete(ctx, j.ID, n, json.RawMessage(`{"text":"again"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := e.eng.Get(ctx, j.ID)
	if again.Version != final.Version || string(again.Result) != string(final.Result) {
		t.Fatalf("redelivery changed the job: version %d→%d", final.Version, again.Version)
	}
}

func lineWith(logs, substr string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

func testConcurrentCompletersOneWinner(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	const n = 16
	providers := make([]string, n)
	for i := range providers {
		providers[i] = fmt.Sprintf("p%d", i)
	}
	e.running(t, j.ID, providers...)
	var wg sync.WaitGroup
	var won, lost atomic.Int64
	start := make(chan struct{})
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			<-start
			c, err := e.eng.Complete(ctx, j.ID, i, json.RawMessage(fmt.Sprintf(`{"by":%d}`, i)), "")
			switch {
			case err != nil:
				t.Errorf("complete %d: %v", i, err)
			case c.Won:
				won.Add(1)
			case c.Lost != nil:
				lost.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	final, _ := e.eng.Get(ctx, j.ID)
	var result struct{ By int }
	_ = json.Unmarshal(final.Result, &result)
	if won.Load() != 1 || lost.Load() != n-1 || result.By != final.CompletedBy || final.Version != 1 {
		t.Fatalf("won=%d lost=%d completed_by=%d result=%s version=%d", won.Load(), lost.Load(), final.CompletedBy, final.Result, final.Version)
	}
	discarded := 0
	for _, a := range final.Attempts {
		if a.State == job.AttemptDiscarded {
			discarded++
		}
	}
	if discarded != n-1 || strings.Count(e.logs.String(), `"msg":"race_lost"`) != n-1 {
		t.Fatalf("discarded=%d race_lost lines=%d, want %d", discarded, strings.Count(e.logs.String(), `"msg":"race_lost"`), n-1)
	}
}

func testAttemptBookkeepingDoesNotMoveVersion(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	e.running(t, j.ID, "sim-primary")
	// Starting a hedge must not make the running attempt lose.
	if _, _, err := e.eng.StartHedge(ctx, j.ID, "sim-fallback"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.FailAttempt(ctx, j.ID, 2, job.Failure{Class: job.ClassRetryable, Message: "503"}, "r2"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.eng.Get(ctx, j.ID)
	if got.Version != 0 {
		t.Fatalf("bookkeeping moved version to %d", got.Version)
	}
	c, err := e.eng.Complete(ctx, j.ID, 1, json.RawMessage(`{"ok":true}`), "r1")
	if err != nil || !c.Won || c.Job.Version != 1 {
		t.Fatalf("attempt 1 should win after bookkeeping: %+v %v", c, err)
	}
}

func testCancel(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	j := e.create(t, request("a", "k", `{"prompt":"x"}`))
	e.running(t, j.ID, "sim-primary")
	c1, err := e.eng.Cancel(ctx, j.ID)
	if err != nil || c1.Status != job.StatusCancelled || c1.Version != 1 {
		t.Fatalf("cancel: %+v %v", c1, err)
	}
	if c2, err := e.eng.Cancel(ctx, j.ID); err != nil || c2.Version != 1 {
		t.Fatalf("second cancel: version %d err %v", c2.Version, err)
	}
	late, err := e.eng.Complete(ctx, j.ID, 1, json.RawMessage(`{"late":true}`), "")
	if err != nil || late.Won || late.Lost == nil {
		t.Fatalf("late result after cancel: %+v %v", late, err)
	}
	done := e.create(t, request("a", "k2", `{"prompt":"x"}`))
	e.running(t, done.ID, "sim-primary")
	if _, err := e.eng.Complete(ctx, done.ID, 1, json.RawMessage(`{}`), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Cancel(ctx, done.ID); !errors.Is(err, job.ErrJobFinished) {
		t.Fatalf("cancel of a succeeded job: %v", err)
	}
}

// tick is a clock that moves forward by step on every reading.
func tick(start time.Time, step time.Duration) func() time.Time {
	var n atomic.Int64
	return func() time.Time { return start.Add(time.Duration(n.Add(1)) * step) }
}

func testListNewestFirstWithCursor(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	// Each create reads the clock once: 2 ms apart, as if made in turn.
	e := newEnv(t, fresh, tick(t0, 2*time.Millisecond))
	var want []string
	for i := range 7 {
		j := e.create(t, request("lister", fmt.Sprintf("k%d", i), `{"prompt":"x"}`))
		want = append([]string{j.ID}, want...)
	}
	e.create(t, request("someone-else", "k0", `{"prompt":"x"}`))
	var got []string
	cursor := ""
	for range 10 {
		page, err := e.eng.List(ctx, lifecycle.ListQuery{Owner: "lister", Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if _, err := e.eng.List(ctx, lifecycle.ListQuery{Owner: "lister", Cursor: "not-a-cursor"}); !errors.Is(err, lifecycle.ErrInvalidCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

// unknownJob creates a job whose attempt 1 is unknown.
func (e *env) unknownJob(t *testing.T, key string) job.Job {
	t.Helper()
	ctx := context.Background()
	j := e.create(t, request("a", key, `{"prompt":"x"}`))
	e.running(t, j.ID, "sim-primary")
	j, err := e.eng.MarkUnknown(ctx, j.ID, 1, "timeout")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// testOneResolutionApplies: operators racing to resolve one unknown attempt
// with different results — exactly one resolution applies and its result is
// the one stored; every other is refused, and says so; repeating the applied
// one changes nothing; a completed attempt refuses another result.
func testOneResolutionApplies(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	rounds := e.st.rounds()
	const operators = 16
	for round := range rounds {
		j := e.unknownJob(t, fmt.Sprintf("round-%d", round))
		var wg sync.WaitGroup
		applied := make([]bool, operators)
		start := make(chan struct{})
		for i := range operators {
			wg.Go(func() {
				<-start
				_, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptSucceeded, By: fmt.Sprintf("op-%d", i),
					Reason: "seen in the provider's console", Result: json.RawMessage(fmt.Sprintf(`{"text":"by op-%d"}`, i))})
				var conflict *job.ResolutionConflictError
				switch {
				case err == nil:
					applied[i] = true
				case errors.As(err, &conflict):
					if conflict.State != job.AttemptSucceeded || !conflict.Resolved || !conflict.HasResult {
						t.Errorf("round %d op-%d: conflict %+v", round, i, conflict)
					}
				default:
					t.Errorf("round %d op-%d: %v", round, i, err)
				}
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, ok := range applied {
			if ok {
				if winner >= 0 {
					t.Fatalf("round %d: op-%d and op-%d were both told their resolution applied", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no resolution applied", round)
		}
		final, _ := e.eng.Get(ctx, j.ID)
		a, _ := final.Attempt(1)
		if string(final.Result) != fmt.Sprintf(`{"text":"by op-%d"}`, winner) || final.CompletedBy != 1 || final.Version != 1 ||
			a.Resolution == nil || a.Resolution.By != fmt.Sprintf("op-%d", winner) || a.Resolution.Outcome != job.AttemptSucceeded {
			t.Fatalf("round %d: op-%d applied, but the job holds %s (resolution %+v)", round, winner, final.Result, a.Resolution)
		}
		// The same resolution again, keys reordered: a no-op.
		again, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptSucceeded, By: "someone-else", Reason: "again",
			Result: json.RawMessage(fmt.Sprintf(` { "text" : "by op-%d" } `, winner))})
		if err != nil || again.Revision != final.Revision {
			t.Fatalf("round %d: the applied resolution repeated: revision %d→%d, %v", round, final.Revision, again.Revision, err)
		}
		var conflict *job.ResolutionConflictError
		if _, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptFailed, By: "op-x", Reason: "no"}); !errors.As(err, &conflict) {
			t.Fatalf("round %d: failed after succeeded: %v", round, err)
		}
	}

	// An attempt that completed on its own refuses a resolution with
	// another result.
	j := e.unknownJob(t, "completed")
	if _, err := e.eng.Complete(ctx, j.ID, 1, json.RawMessage(`{"text":"late answer"}`), "req-1"); err != nil {
		t.Fatal(err)
	}
	var conflict *job.ResolutionConflictError
	_, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptSucceeded, By: "op", Reason: "r",
		Result: json.RawMessage(`{"text":"other"}`)})
	if !errors.As(err, &conflict) || conflict.Resolved || !conflict.HasResult {
		t.Fatalf("resolving a completed attempt: %v", err)
	}
	if final, _ := e.eng.Get(ctx, j.ID); string(final.Result) != `{"text":"late answer"}` {
		t.Fatalf("the job's result became %s", final.Result)
	}
}

// testResolvingAFinishedJobsAttempt: a cancelled job's unknown attempt can
// still be resolved failed or cancelled, for the record, without moving the
// job; succeeded is refused, since the result could not be kept.
func testResolvingAFinishedJobsAttempt(t *testing.T, fresh func(*testing.T) Store) {
	ctx := context.Background()
	e := newEnv(t, fresh, nil)
	for _, outcome := range []job.AttemptState{job.AttemptFailed, job.AttemptCancelled} {
		j := e.unknownJob(t, "finished-"+string(outcome))
		if _, err := e.eng.Cancel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		var conflict *job.ResolutionConflictError
		if _, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: job.AttemptSucceeded, By: "op", Reason: "r",
			Result: json.RawMessage(`{"text":"x"}`)}); !errors.As(err, &conflict) || conflict.JobStatus != job.StatusCancelled {
			t.Fatalf("succeeded on a cancelled job: %v", err)
		}
		got, err := e.eng.Resolve(ctx, j.ID, 1, job.Resolution{Outcome: outcome, By: "op", Reason: "provider has no record"})
		if err != nil {
			t.Fatalf("%s on a cancelled job: %v", outcome, err)
		}
		a, _ := got.Attempt(1)
		if got.Status != job.StatusCancelled || a.State != outcome || a.Resolution == nil || a.Resolution.By != "op" ||
			a.Resolution.Reason != "provider has no record" || a.Resolution.At.IsZero() {
			t.Fatalf("after resolving %s: job %s, attempt %+v / %+v", outcome, got.Status, a, a.Resolution)
		}
		attempts, err := e.eng.Attempts(ctx, got)
		if err != nil || len(attempts) != 1 || attempts[0].Resolution == nil || attempts[0].Resolution.By != "op" {
			t.Fatalf("the attempts list lacks the resolution: %+v %v", attempts, err)
		}
	}
}
