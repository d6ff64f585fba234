package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// parkPolicy gives up work 10 min + 10 min after its submit (tier now),
// a cancel 10 min after it is asked.
var parkPolicy = job.RemotePolicy{Poll: job.DefaultPollSchedule()}

// parkedOn is j with attempt n (running) submitted at at as work id.
func parkedOn(t *testing.T, j job.Job, n int, id string, at time.Time) job.Job {
	t.Helper()
	return after(job.DecideSubmitted(j, n, job.Remote{ID: id, Tier: job.TierNow, SubmittedAt: at}, parkPolicy, at))
}

// failed is j with attempt n failed retryable at at.
func failed(j job.Job, n int, at time.Time) job.Job {
	return after(job.DecideAttemptFailed(j, n, job.Failure{Class: job.ClassRetryable, Message: "5xx", ProviderStatus: 500}, "", at))
}

func TestParkedAndNeedsRun(t *testing.T) {
	t.Parallel()
	fresh := newJob(t)
	running := submitted(t)
	parked := parkedOn(t, running, 1, "resp_1", t0)
	unknownRemote := after(job.DecideAttemptFailed(parked, 1, job.Failure{Class: job.ClassAmbiguous, Message: "lost"}, "", t0))
	ended := failed(parked, 1, t0.Add(time.Minute))
	cancelled := after(job.DecideCancel(parked, t0.Add(time.Second)))
	hedged := after(job.DecideLaunchHedge(parked, "p2", t0.Add(time.Second)))
	syncUnknown := after(job.DecideUnknown(running, 1, "timeout", t0.Add(time.Minute)))
	tests := []struct {
		name             string
		j                job.Job
		parked, needsRun bool
	}{
		{"Pending", fresh, false, true},
		{"SynchronousCallRunning", running, false, false},
		{"SynchronousUnknown", syncUnknown, false, false},
		{"WorkAtItsProvider", parked, true, false},
		{"UnknownWorkWithAnID", unknownRemote, true, false},
		{"WorkEndedFallbackLeft", ended, false, true},
		{"CancelledWithWorkOpen", cancelled, true, false},
		{"WorkAndASynchronousHedge", hedged, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.Parked(tc.j); got != tc.parked {
				t.Errorf("Parked = %v, want %v", got, tc.parked)
			}
			if got := job.NeedsRun(tc.j); got != tc.needsRun {
				t.Errorf("NeedsRun = %v, want %v", got, tc.needsRun)
			}
		})
	}
	// A parked job's plan is a wait on its work: the run ends there.
	if p := job.Next(unknownRemote, job.Policy{MaxAttempts: 3}, t0.Add(time.Second)); p.Action != job.ActionWait || !job.Parked(unknownRemote) {
		t.Fatalf("unknown work: plan %+v", p)
	}
}

func TestStranded(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	parked := parkedOn(t, submitted(t), 1, "resp_1", t0)
	woken := failed(parked, 1, t0)
	waiting := woken
	waiting.Waiting = &job.Waiting{Reason: job.WaitProviders, Since: t0, Until: t0.Add(10 * time.Minute)}
	tests := []struct {
		name string
		j    job.Job
		at   time.Time
		want bool
	}{
		{"PendingWithinGrace", newJob(t), t0.Add(30 * time.Second), false},
		{"PendingPastGrace", newJob(t), t0.Add(grace), true},
		{"ParkedForHours", parked, t0.Add(5 * time.Hour), false},
		{"WokenWithinGrace", woken, t0.Add(30 * time.Second), false},
		{"WokenStartLost", woken, t0.Add(grace), true},
		{"WaitingForProviders", waiting, t0.Add(5 * time.Minute), false},
		{"WaitOverdue", waiting, t0.Add(11 * time.Minute), true},
		{"Finished", after(job.DecideFail(woken, job.Failure{Class: job.ClassRetryable}, t0)), t0.Add(time.Hour), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := job.Stranded(tc.j, grace, tc.at); got != tc.want {
				t.Fatalf("Stranded = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExecutionNamesAreUniqueOverAJobsLife drives a job through parks and
// wakes: each waking start has a name of its own, every appliers of the
// same end name it alike, and a run in between keeps its name.
func TestExecutionNamesAreUniqueOverAJobsLife(t *testing.T) {
	t.Parallel()
	j := newJob(t)
	seen := map[string]string{}
	start := func(why string) {
		t.Helper()
		if !job.NeedsRun(j) {
			t.Fatalf("%s: the job needs no run", why)
		}
		name := job.ExecutionName(j)
		if prev, ok := seen[name]; ok {
			t.Fatalf("%s: execution %s was already started (%s)", why, name, prev)
		}
		if !strings.HasPrefix(name, j.ID) || len(name) > 80 || strings.ContainsAny(name, " <>{}[]?*\"#%\\^|~`$&,;:/") {
			t.Fatalf("%s: %q is no execution name carrying the job ID", why, name)
		}
		seen[name] = why
	}
	start("created")
	if job.ExecutionName(j) != j.ID {
		t.Fatalf("first execution %q, want the job ID", job.ExecutionName(j))
	}
	// Attempt 1: asynchronous, parks, then fails: the webhook wakes it.
	at := t0
	j = parkedOn(t, after(job.DecideLaunch(j, "p1", at)), 1, "resp_1", at)
	j = failed(j, 1, at.Add(time.Minute))
	first := job.ExecutionName(j)
	start("attempt 1 failed")
	// A second applier of the same end (a poll after the webhook) finds
	// the same name: one execution.
	if again := job.ExecutionName(failed(j, 1, at.Add(2*time.Minute))); again != first {
		t.Fatalf("the same end names %q then %q", first, again)
	}
	// Attempt 2 synchronous fails in the same run; attempt 3 asynchronous,
	// found unknown then heard of: the run's name never moves meanwhile.
	j = failed(after(job.DecideLaunch(j, "p2", at)), 2, at.Add(3*time.Minute))
	if job.ExecutionName(j) != first {
		t.Fatalf("a synchronous failure renamed the run: %q", job.ExecutionName(j))
	}
	j = parkedOn(t, after(job.DecideLaunch(j, "p3", at)), 3, "resp_3", at.Add(4*time.Minute))
	j = after(job.DecideAttemptFailed(j, 3, job.Failure{Class: job.ClassAmbiguous, Message: "lost"}, "", at.Add(5*time.Minute)))
	if !job.Parked(j) || job.NeedsRun(j) {
		t.Fatal("unknown work with an ID needs no run")
	}
	j = failed(j, 3, at.Add(6*time.Minute))
	start("attempt 3 failed")
	if got := job.ExecutionName(j); got != j.ID+"-3" {
		t.Fatalf("woken by attempt 3: %q", got)
	}
}

func TestDuesAndDueAt(t *testing.T) {
	t.Parallel()
	parked := parkedOn(t, submitted(t), 1, "resp_1", t0)
	a, _ := parked.Attempt(1)
	poll, deadline := a.Remote.NextPollAt, a.Remote.Deadline
	cancelledAt := t0.Add(time.Minute)
	cancelled := after(job.DecideCancel(parked, cancelledAt))
	asked := after(job.DecideCancelRemote(cancelled, 1, parkPolicy, cancelledAt.Add(time.Second)))
	hedged := parkedOn(t, after(job.DecideLaunchHedge(parked, "p2", t0)), 2, "resp_2", t0.Add(10*time.Second))
	tests := []struct {
		name  string
		j     job.Job
		at    time.Time
		kinds []job.DueKind
		dueAt time.Time
	}{
		{"NotYet", parked, t0.Add(time.Second), nil, poll},
		{"PollDue", parked, poll, []job.DueKind{job.DuePoll}, poll},
		{"PastItsDeadline", parked, deadline, []job.DueKind{job.DueDeadline}, poll},
		{"CancelOwed", cancelled, cancelledAt, []job.DueKind{job.DueCancel}, poll},
		{"CancelAskedPollsOn", asked, cancelledAt.Add(2 * time.Second), []job.DueKind{job.DuePoll}, poll},
		{"CancelNeverConfirmed", asked, cancelledAt.Add(time.Second + job.DefaultCancelGrace), []job.DueKind{job.DueDeadline}, poll},
		{"EachWorkItsOwn", hedged, t0.Add(40 * time.Second), []job.DueKind{job.DuePoll, job.DuePoll}, poll},
		{"NoWork", newJob(t), t0.Add(time.Hour), nil, time.Time{}},
		{"Ended", failed(parked, 1, t0), t0.Add(time.Hour), nil, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var kinds []job.DueKind
			for _, d := range job.Dues(tc.j, tc.at) {
				kinds = append(kinds, d.Kind)
			}
			if strings.Join(toStrings(kinds), ",") != strings.Join(toStrings(tc.kinds), ",") {
				t.Errorf("Dues = %v, want %v", kinds, tc.kinds)
			}
			if got := job.DueAt(tc.j); !got.Equal(tc.dueAt) {
				t.Errorf("DueAt = %s, want %s", got, tc.dueAt)
			}
		})
	}
	// A finished job owes its cancel from the write that finished it.
	won := after(job.DecideComplete(hedged, 2, []byte(`{"x":1}`), "", t0.Add(20*time.Second)))
	if got := job.DueAt(won); !got.Equal(won.UpdatedAt) {
		t.Fatalf("won by the hedge: due %s, want %s", got, won.UpdatedAt)
	}
}

func toStrings(ks []job.DueKind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func TestRemoteDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    job.RemotePolicy
		tier job.Tier
		want time.Duration
	}{
		{job.RemotePolicy{}, job.TierNow, 20 * time.Minute},
		{job.RemotePolicy{MaxProcessingTime: time.Minute}, job.TierNow, 11 * time.Minute},
		{job.RemotePolicy{MaxProcessingTime: time.Minute, Grace: time.Second}, job.TierFlex2h, 2*time.Hour + time.Minute + time.Second},
		{job.RemotePolicy{}, job.TierFlex8h, 8*time.Hour + 20*time.Minute},
	}
	for _, tc := range tests {
		if got := tc.p.Deadline(t0, tc.tier).Sub(t0); got != tc.want {
			t.Errorf("%+v %s: deadline after %s, want %s", tc.p, tc.tier, got, tc.want)
		}
	}
}

func TestDecideAbandon(t *testing.T) {
	t.Parallel()
	parked := parkedOn(t, submitted(t), 1, "resp_1", t0)
	a, _ := parked.Attempt(1)
	var re *job.RemoteError
	if _, err := job.DecideAbandon(parked, 1, a.Remote.Deadline.Add(-time.Second)); !errors.As(err, &re) {
		t.Fatalf("abandoned before its deadline: %v", err)
	}
	// Past its deadline the attempt fails settled, and the job, with a
	// provider left, needs a run for it.
	gone := after(job.DecideAbandon(parked, 1, a.Remote.Deadline))
	g, _ := gone.Attempt(1)
	if g.State != job.AttemptFailed || g.Error == nil || g.Error.Class != job.ClassSettled || g.Outcome != "abandoned" ||
		!strings.Contains(g.Error.Message, "resp_1") || !job.NeedsRun(gone) {
		t.Fatalf("abandoned: %+v %+v, needs run %v", g, g.Error, job.NeedsRun(gone))
	}
	if spend, src := job.SpendOf(job.Attempt{State: g.State, Error: g.Error, Spend: &job.Spend{Reserved: 7}}); spend != 7 || src != job.SpendWorstCase {
		t.Fatalf("abandoned work costs %d (%s), want its whole reservation", spend, src)
	}
	// A cancelled job's work whose cancel is never confirmed: abandoned
	// once the cancel's grace ends, which settles the job.
	asked := after(job.DecideCancelRemote(after(job.DecideCancel(parked, t0)), 1, parkPolicy, t0.Add(time.Second)))
	at := t0.Add(time.Second + job.DefaultCancelGrace)
	settled := after(job.DecideAbandon(asked, 1, at))
	if !job.SettlesJob(asked, settled) || !strings.Contains(mustAttempt(t, settled, 1).Error.Message, "nor confirm the cancel") {
		t.Fatalf("the abandoned cancel did not settle the job: %+v", mustAttempt(t, settled, 1))
	}
	// An attempt that ended meanwhile is left as it is.
	if tr, err := job.DecideAbandon(settled, 1, at); err != nil || !tr.Noop() {
		t.Fatalf("abandoned twice: %v", err)
	}
}

func mustAttempt(t *testing.T, j job.Job, n int) job.Attempt {
	t.Helper()
	a, ok := j.Attempt(n)
	if !ok {
		t.Fatalf("no attempt %d", n)
	}
	return a
}

// TestDueActionsCoverEveryKind: the table the docs draw describes each due
// kind once, in DueKinds' order, with the decisions that record it.
func TestDueActionsCoverEveryKind(t *testing.T) {
	t.Parallel()
	acts := job.DueActions()
	if len(acts) != len(job.DueKinds()) {
		t.Fatalf("%d actions for %d kinds", len(acts), len(job.DueKinds()))
	}
	for i, k := range job.DueKinds() {
		if a := acts[i]; a.Kind != k || a.When == "" || a.Asks == "" || a.Then == "" || len(a.By) == 0 {
			t.Errorf("action %d: %+v, want kind %s described", i, a, k)
		}
	}
}

// TestFoundWorkKeepsItsLaunchsDeadline: work found again long after its
// submit's answer was lost is given up counting from the attempt's launch,
// not from when it was found.
func TestFoundWorkKeepsItsLaunchsDeadline(t *testing.T) {
	t.Parallel()
	lost := after(job.DecideAttemptFailed(submitted(t), 1, job.Failure{Class: job.ClassAmbiguous, Message: "lost"}, "", t0))
	found := after(job.DecideSubmitted(lost, 1, job.Remote{ID: "resp_1", Tier: job.TierNow, Found: true}, parkPolicy, t0.Add(time.Hour)))
	if got, want := mustAttempt(t, found, 1).Remote.Deadline, parkPolicy.Deadline(t0, job.TierNow); !got.Equal(want) {
		t.Fatalf("found work's deadline %s, want %s (from its launch)", got, want)
	}
}
