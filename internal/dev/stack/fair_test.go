package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
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

// Issue 26's second drill (review H2 and H4): 16 jobs of 8 owners hang on
// both providers and are cancelled while their calls are unknown. The
// cancel gives no slot back while the calls may run; once the providers
// finish the work, the reconciler settles every attempt with no operator,
// the providers hold nothing, the cancelled jobs leave the open index and
// their owners' slots come back, and a new owner's jobs succeed.
func TestCancelledJobsFreeTheProviders(t *testing.T) {
	t.Parallel()
	const (
		owners  = 8
		perOne  = 2
		hang    = 15 * time.Second // bounds a failure only: the work is held (sim Hold)
		settled = 2 * time.Minute  // bounds a failure only
	)
	// The demo's bulkhead (8 at a time at each provider, an owner's share
	// of it) and its tracking of held calls, but breakers that never open:
	// with the demo's, whether three hung calls went slow before the last
	// jobs launched depended on the machine's pace (on a busy one, jobs
	// then waited out growing cooldowns for a probe, past any bound).
	s := ownStack(t, "cancelled", stack.Config{CertifyDemo: true, SweepInterval: time.Second,
		DemoProviders: func(c provider.Config) provider.Config {
			for i := range c.Providers {
				c.Providers[i].Breaker = &provider.BreakerConfig{Failures: 1_000_000}
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
	held := func() (n int) {
		t.Helper()
		_, _, body := admin.do(http.MethodGet, "/v1/admin/providers", "", nil)
		var view struct {
			Providers []struct {
				Held    int `json:"held"`
				Running int `json:"running"`
			} `json:"providers"`
		}
		if err := json.Unmarshal(body, &view); err != nil {
			t.Fatalf("providers: %v %s", err, body)
		}
		for _, p := range view.Providers {
			n += p.Held + p.Running
		}
		return n
	}
	if n := held(); n == 0 {
		t.Fatal("the cancelled jobs' calls, still unknown, hold nothing")
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
	for held() > 0 {
		if time.Since(finished) > settled {
			t.Fatalf("%d attempts still hold the providers %s after they finished", held(), settled)
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
	fresh := newClient(t, s, "cancelled-newcomer")
	for i := range 3 {
		j := fresh.submit("demo", fmt.Sprintf("after-%d", i), nil)
		fresh.await(j.ID, settled, "succeeded", func(j apiclient.Job) bool { return j.Status == string(job.StatusSucceeded) })
	}
	t.Logf("cancelled jobs: %d jobs of %d owners cancelled while unknown; every hold ended %s after the providers finished, no operator",
		len(jobs), owners, freedIn)
}
