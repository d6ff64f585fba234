package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Issue 26's first drill, on a stack of its own with the demo providers'
// real limits (max_concurrent 8, counted from admission; 3 failures within
// 10 s open a breaker, at most 2 of them from one owner): one owner's 20
// jobs make both providers hang 30 s on their inputs (the providers answer
// everyone else at once). Once those calls have gone slow (which used to
// open both breakers and fill both bulkheads), another owner's 5 jobs must
// each succeed while the first owner's calls still hang, the providers
// stay closed, and the first owner is the one backing off.
func TestOneOwnerCannotTakeTheProviders(t *testing.T) {
	t.Parallel()
	const (
		heavyJobs = 20
		lightJobs = 5
		hang      = 30 * time.Second
	)
	s := ownStack(t, "fair", stack.Config{CertifyDemo: true, SweepInterval: time.Second,
		DemoProviders: func(c provider.Config) provider.Config { return c }}) // sim.DemoConfig's limits, as make run has them
	heavy, light := newClient(t, s, "fair-heavy"), newClient(t, s, "fair-light")
	admin := newClient(t, s, "fair-operator", "jobs:admin")
	slow := script{sim.DemoPrimary: {"latency_ms": hang.Milliseconds()}, sim.DemoFallback: {"latency_ms": hang.Milliseconds()}}
	started := time.Now()
	for i := range heavyJobs {
		heavy.submit("demo", fmt.Sprintf("heavy-%02d", i), slow)
	}
	// The heavy owner's calls have gone slow at both providers: what used
	// to open both breakers (3 failures each).
	awaitLogs(t, s, `"provider_slow"`, 6, hang)

	// The light owner's jobs, watched together until each has succeeded
	// (the hang bounds only a failure).
	submitted := make([]time.Time, lightJobs)
	ids := make([]string, lightJobs)
	for i := range lightJobs {
		submitted[i] = time.Now()
		ids[i] = light.submit("demo", fmt.Sprintf("light-%d", i), nil).ID
	}
	took := make([]time.Duration, lightJobs)
	for left := lightJobs; left > 0; {
		for i, id := range ids {
			if took[i] != 0 {
				continue
			}
			if j := light.get(id); j.Status == string(job.StatusSucceeded) {
				took[i] = time.Since(submitted[i]).Round(10 * time.Millisecond)
				left--
			} else if j.Status == string(job.StatusFailed) || j.Status == string(job.StatusCancelled) || time.Since(started) > hang {
				t.Fatalf("light job %s: %s (%s) %s after the heavy owner's calls began", id, j.Status, j.States(), time.Since(started))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Each light job ended while the heavy owner's calls still hung.
	if since := time.Since(started); since >= hang {
		t.Fatalf("the light owner's jobs ended %s after the heavy owner's calls began, past their %s hang: they waited for them", since, hang)
	}
	_, _, body := admin.do(http.MethodGet, "/v1/admin/providers", "", nil)
	var view struct {
		Providers []struct {
			Name       string `json:"name"`
			State      string `json:"state"`
			Held       int    `json:"held"`
			Running    int    `json:"running"`
			BackingOff []struct {
				Owner string `json:"owner"`
			} `json:"backing_off"`
		} `json:"providers"`
	}
	if err := json.Unmarshal(body, &view); err != nil {
		t.Fatalf("providers: %v %s", err, body)
	}
	for _, p := range view.Providers {
		if p.Name != sim.DemoPrimary && p.Name != sim.DemoFallback {
			continue // configured, never called here
		}
		if p.State != string(job.ProviderClosed) {
			t.Errorf("%s is %s: one owner's inputs opened it for everyone", p.Name, p.State)
		}
		if len(p.BackingOff) != 1 || p.BackingOff[0].Owner != "fair-heavy" {
			t.Errorf("%s: owners backing off %+v, want the heavy owner alone", p.Name, p.BackingOff)
		}
		if p.Held+p.Running > 8 {
			t.Errorf("%s: %d held and %d running, past max_concurrent 8", p.Name, p.Held, p.Running)
		}
	}
	t.Logf("fair share: %d jobs of one owner hanging both providers %s; another owner's %d jobs each succeeded in %v; providers %+v",
		heavyJobs, hang, lightJobs, took, view.Providers)
}

// Issue 26's second drill (review H2 and H4), and issue 40's: 16 jobs of
// 8 owners hang on both providers, which answer "in progress" to every
// question about them, and are cancelled while their calls are unknown.
// The cancel gives no slot back at once; once the providers'
// max_processing_time and margin (job.OverdueAfter) have passed since the
// calls, no slot of them counts as held (overdue, as operators see them)
// and a new owner's 5 jobs each succeed within 5 s while the calls still
// hang. Once the providers finish the work, the reconciler settles every
// attempt with no operator, the providers hold nothing, not even overdue,
// the cancelled jobs leave the open index and their owners' slots come
// back, and a new owner's jobs succeed.
func TestCancelledJobsFreeTheProviders(t *testing.T) {
	t.Parallel()
	const (
		owners     = 8
		perOne     = 2
		newcomer   = 5
		processing = 3 * time.Second  // the demo providers' declared max_processing_time here
		hang       = 15 * time.Second // bounds a failure only: the work is held (sim Hold)
		settled    = 2 * time.Minute  // bounds a failure only
		each       = 5 * time.Second  // a newcomer's job, the bound
		pass       = 250 * time.Millisecond
	)
	// The demo's bulkhead (8 at a time at each provider, an owner's share
	// of it) and its tracking of held calls, but breakers that never open:
	// with the demo's, whether three hung calls went slow before the last
	// jobs launched depended on the machine's pace (on a busy one, jobs
	// then waited out growing cooldowns for a probe, past any bound).
	s := ownStack(t, "cancelled", stack.Config{CertifyDemo: true, SweepInterval: time.Second, PassInterval: pass,
		DemoProviders: func(c provider.Config) provider.Config {
			for i := range c.Providers {
				c.Providers[i].Breaker = &provider.BreakerConfig{Failures: 1_000_000}
				c.Providers[i].MaxProcessingTime = processing.String()
			}
			return c
		}})
	admin := newClient(t, s, "cancelled-operator", "jobs:admin")
	// Both providers hold the work until every job is cancelled: a fixed
	// latency let a busy machine's slow cancel loop find a job the
	// reconciler had already settled as succeeded.
	var releases []func()
	for _, p := range []string{sim.DemoPrimary, sim.DemoFallback} {
		for k := range perOne {
			releases = append(releases, s.Sim.Hold(p, fmt.Sprintf("e2e hung-%d", k)))
		}
	}
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	t.Cleanup(release)
	type hung struct {
		c  *client
		id string
	}
	var jobs []hung
	for o := range owners {
		c := newClient(t, s, fmt.Sprintf("cancelled-%d", o))
		for k := range perOne {
			jobs = append(jobs, hung{c, c.submit("demo", fmt.Sprintf("hung-%d", k), nil).ID})
		}
	}
	for _, h := range jobs {
		h.c.await(h.id, settled, "an unknown attempt", func(j apiclient.Job) bool { return j.Status == string(job.StatusUnknown) })
		if code, _, body := h.c.do(http.MethodPost, "/v1/jobs/"+h.id+"/cancel", "", map[string]any{"reason": "drill"}); code != http.StatusOK {
			t.Fatalf("cancel %s: %d %s", h.id, code, body)
		}
	}
	holds := func() (n, overdue int) {
		t.Helper()
		_, _, body := admin.do(http.MethodGet, "/v1/admin/providers", "", nil)
		var view struct {
			Providers []struct {
				Held    int `json:"held"`
				Running int `json:"running"`
				Overdue int `json:"overdue"`
			} `json:"providers"`
		}
		if err := json.Unmarshal(body, &view); err != nil {
			t.Fatalf("providers: %v %s", err, body)
		}
		for _, p := range view.Providers {
			n += p.Held + p.Running
			overdue += p.Overdue
		}
		return n, overdue
	}
	held := func() int { n, _ := holds(); return n }
	hungCalls := held()
	if hungCalls == 0 {
		t.Fatal("the cancelled jobs' calls, still unknown, hold nothing")
	}

	// Issue 40: the providers still answer "in progress" about every call,
	// but past their max_processing_time and margin since the calls began
	// no slot of them counts: the scheduled pass declares them overdue.
	var lastCall time.Time
	for _, h := range jobs {
		for _, a := range storedJob(t, s, h.id).Attempts {
			if a.StartedAt.After(lastCall) {
				lastCall = a.StartedAt
			}
		}
	}
	// (An attempt the reconciler settled meanwhile, its hold released, is
	// freed too: every hold ends overdue or released.)
	for {
		n, overdue := holds()
		if n == 0 && overdue > 0 {
			break
		}
		if time.Since(lastCall) > settled {
			t.Fatalf("%d calls still hold the providers, %d overdue, %s after the last call began (max_processing_time %s)",
				n, overdue, time.Since(lastCall).Round(time.Second), processing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	freedAfter := time.Since(lastCall).Round(100 * time.Millisecond)
	// None was declared before its bound.
	for _, line := range strings.Split(logsOf(s), "\n") {
		if !strings.Contains(line, `"msg":"hold_overdue"`) {
			continue
		}
		var e struct {
			Time      time.Time `json:"time"`
			StartedAt time.Time `json:"started_at"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if over := processing + time.Second; e.Time.Sub(e.StartedAt) < over { // the demo's slow_call_after: 1 s
			t.Fatalf("a hold declared overdue %s after its call began, before %s: %s", e.Time.Sub(e.StartedAt), over, line)
		}
	}
	// A new owner's jobs each succeed within 5 s while those calls hang.
	fresh := newClient(t, s, "cancelled-newcomer")
	var tookEach []time.Duration
	for i := range newcomer {
		began := time.Now()
		j := fresh.submit("demo", fmt.Sprintf("while-hung-%d", i), nil)
		fresh.await(j.ID, settled, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
		took := time.Since(began).Round(10 * time.Millisecond)
		if took > each {
			t.Errorf("the new owner's job %d took %s, past %s", i, took, each)
		}
		tookEach = append(tookEach, took)
	}
	overdueCalls := 0
	if n, overdue := holds(); n != 0 || overdue == 0 {
		t.Fatalf("after the new owner's jobs: %d held, %d overdue; want none held, the hung calls overdue", n, overdue)
	} else {
		overdueCalls = overdue
	}
	// The providers finish the work; from then on the holds must end with
	// no operator.
	release()
	for _, p := range []string{sim.DemoPrimary, sim.DemoFallback} {
		for _, key := range s.Sim.IdempotencyKeys(p) {
			select {
			case <-s.Sim.Finished(p, key):
			case <-time.After(2 * hang):
				t.Fatalf("%s's work on %s did not end", p, key)
			}
		}
	}
	finished := time.Now()
	for {
		n, overdue := holds()
		if n+overdue == 0 {
			break
		}
		if time.Since(finished) > settled {
			t.Fatalf("%d attempts still hold the providers, %d overdue, %s after they finished", n, overdue, settled)
		}
		time.Sleep(100 * time.Millisecond)
	}
	freedIn := time.Since(finished).Round(100 * time.Millisecond)
	for _, h := range jobs {
		j := h.c.get(h.id)
		if j.Status != string(job.StatusCancelled) {
			t.Errorf("job %s is %s, want cancelled", h.id, j.Status)
		}
		for _, a := range h.c.attempts(h.id) {
			if a.State == string(job.AttemptUnknown) || a.State == string(job.AttemptRunning) {
				t.Errorf("job %s attempt %d still %s", h.id, a.Number, a.State)
			}
		}
	}
	for name, st := range s.Sim.Stats() {
		if len(st.ExecutedMoreThanOnce) > 0 {
			t.Errorf("%s executed attempt keys more than once: %v", name, st.ExecutedMoreThanOnce)
		}
	}
	for i := range 3 {
		j := fresh.submit("demo", fmt.Sprintf("after-%d", i), nil)
		fresh.await(j.ID, settled, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	}
	t.Logf("cancelled jobs: %d jobs of %d owners cancelled while unknown, %d calls holding the providers then; %d overdue, none held, %s after the last began "+
		"(max_processing_time %s + 1 s); a new owner's %d jobs took %v while they hung; every hold ended %s after the providers finished, no operator",
		len(jobs), owners, hungCalls, overdueCalls, freedAfter, processing, newcomer, tookEach, freedIn)
}
