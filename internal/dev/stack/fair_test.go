package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

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
	s := sharedStack(t, "fair", stack.Config{CertifyDemo: true, SweepInterval: time.Second,
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
