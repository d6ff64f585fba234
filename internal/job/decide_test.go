package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/onejob/onejob/internal/job"
)

func TestTransitionTable(t *testing.T) {
	t.Parallel()
	edges := map[[2]job.AttemptState]bool{}
	for _, e := range job.AttemptEdges() {
		if len(e.By) == 0 {
			t.Errorf("edge %s → %s names no decision", e.From, e.To)
		}
		edges[[2]job.AttemptState{e.From, e.To}] = true
	}
	for _, from := range job.AttemptStates() {
		for _, to := range job.AttemptStates() {
			if got, want := job.CanTransition(from, to), edges[[2]job.AttemptState{from, to}]; got != want {
				t.Errorf("CanTransition(%s, %s) = %v, table says %v", from, to, got, want)
			}
		}
		outgoing := slices.ContainsFunc(job.AttemptEdges(), func(e job.Edge) bool { return e.From == from })
		if from.Terminal() == outgoing {
			t.Errorf("%s: Terminal() = %v but it has outgoing edges = %v", from, from.Terminal(), outgoing)
		}
		if from.Open() == from.Terminal() {
			t.Errorf("%s: Open() = Terminal() = %v", from, from.Open())
		}
	}
}

// withAttemptIn builds a job whose only attempt is in state s, through
// decisions only.
func withAttemptIn(t *testing.T, s job.AttemptState) job.Job {
	t.Helper()
	j := after(job.DecideStart(newJob(t), "p1", t0))
	step := func(tr job.Transition, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		j = tr.After()
	}
	switch s {
	case job.AttemptStarting:
	case job.AttemptRunning:
		step(job.DecideRunning(j, 1, t0))
	case job.AttemptUnknown:
		step(job.DecideRunning(j, 1, t0))
		step(job.DecideUnknown(j, 1, "t", t0))
	case job.AttemptSucceeded:
		step(job.DecideRunning(j, 1, t0))
		step(job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0))
	case job.AttemptFailed:
		step(job.DecideRunning(j, 1, t0))
		step(job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "503"}, "", t0))
	case job.AttemptCancelled:
		step(job.DecideRunning(j, 1, t0))
		step(job.DecideUnknown(j, 1, "t", t0))
		step(job.DecideResolve(j, 1, job.Resolution{Outcome: job.AttemptCancelled, Reason: "r"}, t0))
	case job.AttemptDiscarded:
		step(job.DecideRunning(j, 1, t0))
		step(job.DecideCancel(j, t0))
		step(job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0))
	}
	if a, _ := j.Attempt(1); a.State != s {
		t.Fatalf("built attempt in %s, want %s", a.State, s)
	}
	return j
}

// TestDecisionsFollowTheTable applies every decision to an attempt in every
// state: each either refuses, changes nothing, or moves the attempt along an
// edge of the table.
func TestDecisionsFollowTheTable(t *testing.T) {
	t.Parallel()
	decisions := map[string]func(job.Job) (job.Transition, error){
		"Running": func(j job.Job) (job.Transition, error) { return job.DecideRunning(j, 1, t0) },
		"Unknown": func(j job.Job) (job.Transition, error) { return job.DecideUnknown(j, 1, "t", t0) },
		"Failed": func(j job.Job) (job.Transition, error) {
			return job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassRetryable, Message: "x"}, "", t0)
		},
		"Ambiguous": func(j job.Job) (job.Transition, error) {
			return job.DecideAttemptFailed(j, 1, job.Failure{Class: job.ClassAmbiguous, Message: "x"}, "", t0)
		},
		"Complete": func(j job.Job) (job.Transition, error) {
			return job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0)
		},
		"CompleteAfterCancel": func(j job.Job) (job.Transition, error) {
			if tr, err := job.DecideCancel(j, t0); err == nil {
				j = tr.After()
			}
			return job.DecideComplete(j, 1, json.RawMessage(`{}`), "", t0)
		},
		"RunningAfterCancel": func(j job.Job) (job.Transition, error) {
			if tr, err := job.DecideCancel(j, t0); err == nil {
				j = tr.After()
			}
			return job.DecideRunning(j, 1, t0)
		},
	}
	for _, outcome := range []job.AttemptState{job.AttemptSucceeded, job.AttemptFailed, job.AttemptCancelled} {
		decisions["Resolve"+string(outcome)] = func(j job.Job) (job.Transition, error) {
			return job.DecideResolve(j, 1, job.Resolution{Outcome: outcome, Result: json.RawMessage(`{}`), Reason: "r"}, t0)
		}
	}
	for _, s := range job.AttemptStates() {
		for name, decide := range decisions {
			t.Run(fmt.Sprintf("%s/%s", s, name), func(t *testing.T) {
				t.Parallel()
				j := withAttemptIn(t, s)
				tr, err := decide(j)
				if err != nil {
					return
				}
				from, _ := tr.Before().Attempt(1)
				to, _ := tr.After().Attempt(1)
				if from.State != to.State && !job.CanTransition(from.State, to.State) {
					t.Fatalf("%s moved attempt %s → %s, which the table does not allow", name, from.State, to.State)
				}
			})
		}
	}
}

func TestDecideComplete(t *testing.T) {
	t.Parallel()
	running := withAttemptIn(t, job.AttemptRunning)
	won := after(job.DecideComplete(running, 1, json.RawMessage(`{"r":1}`), "req-1", t0))
	if a, _ := won.Attempt(1); won.Status != job.StatusSucceeded || won.CompletedBy != 1 || won.Version != 1 ||
		a.State != job.AttemptSucceeded || a.Outcome != "won" || a.ProviderRequestID != "req-1" || string(won.Result) != `{"r":1}` {
		t.Fatalf("won: %+v / %+v", won, a)
	}
	tests := []struct {
		name      string
		j         job.Job
		n         int
		noop      bool
		lost      bool
		wantState job.AttemptState
	}{
		{"RedeliveredWinnerIsNoop", won, 1, true, false, job.AttemptSucceeded},
		{"LateResultOfCancelledJobIsDiscarded", after(job.DecideCancel(running, t0)), 1, false, true, job.AttemptDiscarded},
		{"LateResultOfClosedAttemptIsNoop", withAttemptIn(t, job.AttemptDiscarded), 1, true, true, job.AttemptDiscarded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := job.DecideComplete(tc.j, tc.n, json.RawMessage(`{"late":true}`), "", t0)
			if err != nil {
				t.Fatal(err)
			}
			_, lost := tr.LostRace()
			a, _ := tr.After().Attempt(tc.n)
			if tr.Noop() != tc.noop || lost != tc.lost || a.State != tc.wantState || string(tr.After().Result) == `{"late":true}` {
				t.Fatalf("noop=%v lost=%v state=%s result=%s", tr.Noop(), lost, a.State, tr.After().Result)
			}
		})
	}
	if _, err := job.DecideComplete(running, 9, nil, "", t0); !errors.Is(err, job.ErrAttemptNotFound) {
		t.Fatalf("missing attempt: %v", err)
	}
}

func TestDecideRunningDiscardsAttemptOfFinishedJob(t *testing.T) {
	t.Parallel()
	j := after(job.DecideCancel(withAttemptIn(t, job.AttemptStarting), t0))
	tr, err := job.DecideRunning(j, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tr.After().Attempt(1)
	lost, isLost := tr.LostRace()
	if a.State != job.AttemptDiscarded || !isLost || lost.Status != job.StatusCancelled || tr.After().Version != j.Version {
		t.Fatalf("attempt %s lost=%v %+v version %d", a.State, isLost, lost, tr.After().Version)
	}
}

func TestDecideFailNeedsNoOpenAttempt(t *testing.T) {
	t.Parallel()
	_, err := job.DecideFail(withAttemptIn(t, job.AttemptUnknown), job.Failure{Class: job.ClassRetryable, Message: "x"}, t0)
	var open *job.OpenAttemptError
	if !errors.As(err, &open) || open.Attempt != 1 || open.State != job.AttemptUnknown || errors.Is(err, job.ErrAttemptBlocked) {
		t.Fatalf("err = %v", err)
	}
	failed := after(job.DecideFail(withAttemptIn(t, job.AttemptFailed), job.Failure{Class: job.ClassRetryable, Message: "x"}, t0))
	if failed.Status != job.StatusFailed || failed.Version != 1 {
		t.Fatalf("failed: %s v%d", failed.Status, failed.Version)
	}
}

func TestDecideCancelLeavesOpenAttempts(t *testing.T) {
	t.Parallel()
	j := after(job.DecideCancel(withAttemptIn(t, job.AttemptRunning), t0))
	if a, _ := j.Attempt(1); j.Status != job.StatusCancelled || a.State != job.AttemptRunning {
		t.Fatalf("job %s attempt %s", j.Status, a.State)
	}
}

func TestNextHedge(t *testing.T) {
	t.Parallel()
	all := job.Policy{CertifiedFunc: func(string) bool { return true }}
	none := job.Policy{CertifiedFunc: func(string) bool { return false }}
	running := withAttemptIn(t, job.AttemptRunning)
	hedged := after(job.DecideHedge(running, "p2", t0))
	tests := []struct {
		name    string
		j       job.Job
		n       int
		p       job.Policy
		ok      bool
		want    string
		attempt int
	}{
		{"RunningGetsCertifiedFallback", running, 1, all, true, "p2", 0},
		{"UnclaimedHedgeIsReissued", hedged, 1, none, true, "p2", 2},
		{"UncertifiedIsNotHedged", running, 1, none, false, "", 0},
		{"FinishedJobIsNotHedged", after(job.DecideCancel(running, t0)), 1, all, false, "", 0},
		{"NotRunningIsNotHedged", withAttemptIn(t, job.AttemptUnknown), 1, all, false, "", 0},
		{"MaxAttemptsReached", running, 1, job.Policy{MaxAttempts: 1, CertifiedFunc: all.CertifiedFunc}, false, "", 0},
		{"LaterAttemptExists", after(job.DecideRunning(hedged, 2, t0)), 1, all, false, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan, ok := job.NextHedge(tc.j, tc.n, tc.p)
			if ok != tc.ok || plan.Provider != tc.want || plan.Attempt != tc.attempt {
				t.Fatalf("NextHedge = %+v, %v", plan, ok)
			}
		})
	}
	if a, _ := hedged.Attempt(2); !a.Hedge || a.Provider != "p2" {
		t.Fatalf("DecideHedge made %+v", a)
	}
}

func TestChooseProviders(t *testing.T) {
	t.Parallel()
	ofType := []string{"a", "b", "c"}
	tests := []struct {
		name      string
		requested []string
		want      []string
		problems  []job.ProviderProblem
	}{
		{"NoneNamedGetsTheTypes", nil, ofType, nil},
		{"Subset", []string{"b", "a"}, []string{"b", "a"}, nil},
		{"Empty", []string{}, []string{}, []job.ProviderProblem{{Index: -1, Reason: "must name 1 to 8 providers"}}},
		{"Unknown", []string{"a", "z"}, []string{"a", "z"}, []job.ProviderProblem{{Index: 1, Reason: "is not a provider of this job type"}}},
		{"Repeated", []string{"a", "a"}, []string{"a", "a"}, []job.ProviderProblem{{Index: 1, Reason: "is repeated"}}},
		{"Blank", []string{""}, []string{""}, []job.ProviderProblem{{Index: 0, Reason: "is empty"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, problems := job.ChooseProviders(tc.requested, ofType)
			if !slices.Equal(got, tc.want) || !slices.Equal(problems, tc.problems) {
				t.Fatalf("ChooseProviders = %v, %v", got, problems)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{job.NewID("o", "k"), job.NewID("ö", "ключ"), "job_x"} {
		if !job.ValidID(id) {
			t.Errorf("ValidID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "job_", "JOB_x", "job_X", "job_a-b", "x_abc", "job_" + string(make([]byte, 65))} {
		if job.ValidID(id) {
			t.Errorf("ValidID(%q) = true", id)
		}
	}
}

func TestSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		action job.Action
		want   job.Signal
		ok     bool
	}{
		{job.ActionRun, job.SignalRunNext, true},
		{job.ActionWait, job.SignalWaitOpen, true},
		{job.ActionDone, "", false},
		{job.ActionFinalize, "", false},
	}
	seen := map[job.Signal]bool{}
	for _, tc := range tests {
		t.Run(string(tc.action), func(t *testing.T) {
			t.Parallel()
			if s, ok := (job.Plan{Action: tc.action}).Signal(); s != tc.want || ok != tc.ok {
				t.Fatalf("Signal = %q, %v", s, ok)
			}
		})
		if tc.ok {
			seen[tc.want] = true
		}
	}
	for _, s := range job.Signals() {
		if !seen[s] {
			t.Errorf("signal %s stands for no action", s)
		}
	}
}

func TestDecideLaunch(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	tr, err := job.DecideLaunch(j, "p1", t0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tr.After().Attempt(1)
	if tr.Kind() != job.KindStartAttempt || tr.AttemptNumber() != 1 || a.State != job.AttemptRunning || a.Hedge ||
		tr.After().Revision != j.Revision+1 || tr.After().AttemptCount != 1 || tr.After().Status != job.StatusRunning {
		t.Fatalf("launch: kind %s attempt %+v job %+v", tr.Kind(), a, tr.After())
	}
	running := tr.After()
	h, err := job.DecideLaunchHedge(running, "p2", t0)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := h.After().Attempt(2); !b.Hedge || b.State != job.AttemptRunning {
		t.Fatalf("hedge launch: %+v", b)
	}
	// The guard holds: no launch while an attempt is unknown, none once the
	// job has an outcome.
	unknown := after(job.DecideUnknown(running, 1, "t", t0))
	if _, err := job.DecideLaunch(unknown, "p2", t0); !errors.Is(err, job.ErrAttemptBlocked) {
		t.Fatalf("launch while unknown: %v", err)
	}
	if _, err := job.DecideLaunch(after(job.DecideCancel(j, t0)), "p1", t0); !errors.Is(err, job.ErrJobFinished) {
		t.Fatalf("launch on a cancelled job: %v", err)
	}
}

func TestStartAndCertificationRules(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	if !job.ShouldStart(j) || job.ShouldStart(withAttemptIn(t, job.AttemptRunning)) {
		t.Error("ShouldStart: only a pending job starts")
	}
	if job.NeedsCertification(j, "p1") || !job.NeedsCertification(j, "p2") ||
		!slices.Equal(job.CertificationsNeeded(j), []string{"p2", "p3"}) {
		t.Error("only the primary needs no certification")
	}
}

// TestPrimaryIsTheTypes: only the job type's primary runs uncertified,
// whichever providers the request names and in whichever order; a job that
// records no primary needs a certification for every provider.
func TestPrimaryIsTheTypes(t *testing.T) {
	t.Parallel()
	ofType := []string{"a", "b", "c"}
	tests := []struct {
		name      string
		requested []string
		primary   string
		needs     []string
	}{
		{"TheTypesOrder", nil, job.PrimaryOf(ofType), []string{"b", "c"}},
		{"AFallbackFirst", []string{"b", "a"}, job.PrimaryOf(ofType), []string{"b"}},
		{"AFallbackAlone", []string{"c"}, job.PrimaryOf(ofType), []string{"c"}},
		{"NoPrimaryRecorded", []string{"a", "b"}, "", []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			providers, problems := job.ChooseProviders(tc.requested, ofType)
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			j := job.Job{Providers: providers, Primary: tc.primary}
			if got := job.CertificationsNeeded(j); !slices.Equal(got, tc.needs) {
				t.Fatalf("CertificationsNeeded = %v, want %v", got, tc.needs)
			}
			plan := job.Next(j, job.Policy{MaxAttempts: 5, CertifiedFunc: func(string) bool { return false }}, t0)
			if runs := plan.Action == job.ActionRun; runs != (tc.primary != "" && slices.Contains(providers, tc.primary)) ||
				(runs && plan.Provider != tc.primary) {
				t.Fatalf("with nothing certified: %+v, want to run only %q", plan, tc.primary)
			}
		})
	}
	if _, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{}`),
		Providers: []string{"a"}}, t0); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("a request without the type's primary: %v, want job.ErrInvalid", err)
	}
	j, err := job.New(job.Request{Owner: "o", IdempotencyKey: "k", Type: "demo", Input: json.RawMessage(`{}`),
		Providers: []string{"b"}, Primary: "a"}, t0)
	if err != nil || j.Primary != "a" || !slices.Equal(j.Providers, []string{"b"}) {
		t.Fatalf("New = %+v, %v", j, err)
	}
}
