package lifecycle_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// These tests run webhook-async attempts through the lifecycle against
// the strict webhook-async simulator over loopback (its signed work.ended
// callbacks posted to an inbound route that hands them to
// Tasks.ProviderEvent), on memstore with the rig's clock, which the
// simulator's clock follows: the asyncRig's pattern, with the receiver's
// contract in place of OpenAI's background mode.

const (
	hookAsyncName  = "sim-hook-async"
	hookAsyncToken = "tok-hook-async"
)

// hookAsyncRig runs attempts on the webhook-async simulator.
type hookAsyncRig struct {
	*asyncTasks
	sim *sim.WebhookAsync
}

func newHookAsyncRig(t *testing.T) *hookAsyncRig {
	t.Helper()
	r := &hookAsyncRig{asyncTasks: newAsyncTasks(t, hookAsyncName)}
	var err error
	r.sim, err = sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: good(hookAsyncName)}, Token: hookAsyncToken,
		ProcessingTime: providerWork, CallbackSecret: asyncSecret, NowFunc: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.sim.Close)
	srv := httptest.NewServer(r.sim.Handler())
	t.Cleanup(srv.Close)
	a, err := webhook.NewAsync(webhook.AsyncConfig{Name: hookAsyncName, URL: srv.URL + sim.WebhookAsyncPath,
		CallbackURL: r.callbackURL(), Token: hookAsyncToken, WebhookSecret: asyncSecret,
		HTTPClient: srv.Client(), Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, a)
	return r
}

// executedOnce holds the receiver to one execution of the job's attempt.
func (r *hookAsyncRig) executedOnce(t *testing.T, j job.Job) {
	t.Helper()
	key := j.Attempts[0].SentKey()
	if n := r.sim.Executions(key); n != 1 {
		t.Fatalf("job %s's attempt (key %s) executed %d times", j.ID, key, n)
	}
}

// TestWebhookAsyncJobsEndByCallback: two owners' jobs are submitted (one
// submit each), recorded with their work's id and parked; when the
// receiver's work ends, each signed callback ends its own job, the work
// executed once; a retried callback is a duplicate, a forged one refused,
// and neither writes the job.
func TestWebhookAsyncJobsEndByCallback(t *testing.T) {
	t.Parallel()
	r := newHookAsyncRig(t)
	jobs := []job.Job{r.createFor(t, "owner-a"), r.createFor(t, "owner-b")}
	for _, j := range jobs {
		r.runUntilParked(t, j.ID)
		got := r.get(t, j.ID)
		rem := remoteOf(t, got, 1)
		if a, _ := got.Attempt(1); a.State != job.AttemptRunning || rem.ID == "" || rem.Status != webhook.WorkQueued || rem.Tier != job.TierNow {
			t.Fatalf("after submit: attempt %+v, remote %+v", a, rem)
		}
		if rec, ok := r.sim.Get(rem.ID); !ok || rec.Key != got.Attempts[0].SentKey() || rec.CompletionWindow != "" {
			t.Fatalf("the receiver has %+v", rec)
		}
	}
	if n := r.sim.Submits(); n != 2 {
		t.Fatalf("submits = %d, want 2", n)
	}
	r.clock.Advance(providerWork)
	r.sim.Step()
	for range jobs {
		if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventApplied {
			t.Fatalf("callback: %+v", a)
		}
	}
	for _, j := range jobs {
		got := r.get(t, j.ID)
		if got.Status != job.StatusSucceeded || got.CompletedBy != 1 || string(got.Result) != string(good(hookAsyncName)) {
			t.Fatalf("job %s: %s, completed by %d, result %s", j.Owner, got.Status, got.CompletedBy, got.Result)
		}
		if a, _ := got.Attempt(1); a.Usage == nil || a.Usage.OutputTokens == 0 || a.ProviderRequestID != remoteOf(t, got, 1).ID {
			t.Fatalf("attempt records no usage or no work id: %+v", a)
		}
		if rem := remoteOf(t, got, 1); rem.Status != webhook.WorkSucceeded {
			t.Fatalf("the work's end is not recorded on it: %+v", rem)
		}
		r.executedOnce(t, got)
	}
	before := r.get(t, jobs[0].ID)
	cbs := r.sim.Callbacks()
	if len(cbs) != 2 {
		t.Fatalf("callbacks = %d", len(cbs))
	}
	if _, err := r.sim.Redeliver(t.Context(), cbs[0].WebhookID); err != nil {
		t.Fatal(err)
	}
	if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventDuplicate {
		t.Fatalf("retried callback: %+v", a)
	}
	// Signed for the body as sent, delivered with another work's id.
	header, err := webhooks.Headers([]string{asyncSecret}, cbs[0].WebhookID, r.clock.Now(), cbs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(cbs[0].Body), cbs[0].WorkID, cbs[1].WorkID, 1)
	if _, err := r.tasks.ProviderEvent(t.Context(), hookAsyncName, header, []byte(forged)); !errors.Is(err, lifecycle.ErrEventRefused) {
		t.Fatalf("forged callback: %v, want refused", err)
	}
	if after := r.get(t, jobs[0].ID); after.Revision != before.Revision {
		t.Fatalf("a repeated or refused callback wrote the job: revision %d → %d", before.Revision, after.Revision)
	}
	r.runToEnd(t, jobs[0].ID, job.StatusSucceeded)
	if n := r.sim.Submits(); n != 2 {
		t.Fatalf("submits = %d, want 2", n)
	}
}

// TestWebhookAsyncJobEndsByPollingWhenCallbacksDrop: the receiver's
// callbacks never arrive; the scheduled pass asks by id on the poll
// schedule, records the work running, and ends both owners' jobs once it
// ended.
func TestWebhookAsyncJobEndsByPollingWhenCallbacksDrop(t *testing.T) {
	t.Parallel()
	r := newHookAsyncRig(t)
	r.sim.DropCallbacks(true)
	j, other := r.createFor(t, "owner-a"), r.createFor(t, "owner-b")
	r.runUntilParked(t, j.ID)
	r.runUntilParked(t, other.ID)
	r.clock.Advance(40 * time.Second)
	r.sim.Step()
	r.pass(t)
	if got := remoteOf(t, r.get(t, j.ID), 1); got.Polls != 1 || got.Status != webhook.WorkRunning || !got.HeardAt.Equal(r.clock.Now()) {
		t.Fatalf("after a poll at 40 s: %+v", got)
	}
	r.clock.Advance(providerWork)
	r.sim.Step()
	r.pass(t)
	for _, id := range []string{j.ID, other.ID} {
		if got := r.get(t, id); got.Status != job.StatusSucceeded {
			t.Fatalf("job %s after the pass: %s", id, got.Status)
		}
		r.executedOnce(t, r.get(t, id))
	}
	for _, cb := range r.sim.Callbacks() {
		if len(cb.Deliveries) != 1 || !cb.Deliveries[0].Dropped {
			t.Fatalf("a callback was delivered: %+v", cb.Deliveries)
		}
	}
	if n := r.sim.Submits(); n != 2 {
		t.Fatalf("submits = %d, want 2", n)
	}
}

// TestWebhookAsyncLostSubmitIsFoundOnce: the submit's answer is lost, so
// the attempt is unknown and blocks its job; the next run's settle looks
// the key up (never executing) and finds the work still running, which
// parks the job; once it ended, the job ends with its answer, by the
// callback that finds the work or, callbacks dropped, by the scheduled
// pass asking by id. Nothing is submitted
// again, the receiver executed the work once, and the other owner's job
// is untouched.
func TestWebhookAsyncLostSubmitIsFoundOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		drop bool
	}{
		{"ByCallback", false},
		{"BySettle", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newHookAsyncRig(t)
			r.sim.DropCallbacks(tc.drop)
			r.sim.LoseAnswers(1)
			j, bystander := r.createFor(t, "owner-a"), r.createFor(t, "owner-b")
			r.runUntilWait(t, j.ID)
			if a, _ := r.get(t, j.ID).Attempt(1); a.State != job.AttemptUnknown || a.Remote != nil {
				t.Fatalf("after a lost submit: %+v", a)
			}
			r.runUntilParked(t, bystander.ID)
			if tc.drop {
				r.runUntilParked(t, j.ID) // settle: found, still running
				if n, l := r.sim.Submits(), r.sim.Lookups(); n != 2 || l != 1 {
					t.Fatalf("submits = %d, lookups = %d; want 2, 1", n, l)
				}
				got := r.get(t, j.ID)
				if a, _ := got.Attempt(1); a.State != job.AttemptUnknown || got.AttemptCount != 1 {
					t.Fatalf("a lookup of running work settled or moved it: %+v", a)
				}
				// Recorded as the submit's answer would have been: from
				// now on it is asked about by id.
				if rem := remoteOf(t, got, 1); !rem.Found || rem.ID == "" || rem.Status != "queued" {
					t.Fatalf("the work found by the lookup is not recorded: %+v", rem)
				}
			}
			r.clock.Advance(providerWork)
			r.sim.Step()
			if tc.drop {
				r.pass(t)
				if l := r.sim.Lookups(); l != 1 {
					t.Fatalf("lookups = %d, want 1: found work is asked about by id", l)
				}
			} else {
				outcomes := map[lifecycle.EventOutcome]int{}
				for range 2 {
					a := r.event(t)
					if a.err != nil {
						t.Fatal(a.err)
					}
					outcomes[a.outcome]++
				}
				if outcomes[lifecycle.EventFound] != 1 || outcomes[lifecycle.EventApplied] != 1 {
					t.Fatalf("outcomes = %v, want one found, one applied", outcomes)
				}
				if rem := remoteOf(t, r.get(t, j.ID), 1); !rem.Found {
					t.Fatalf("remote not marked found: %+v", rem)
				}
			}
			got := r.get(t, j.ID)
			if got.Status != job.StatusSucceeded || got.AttemptCount != 1 || string(got.Result) != string(good(hookAsyncName)) {
				t.Fatalf("job %s with %d attempts, result %s", got.Status, got.AttemptCount, got.Result)
			}
			r.executedOnce(t, got)
			if rec, _ := r.sim.ByKey(got.Attempts[0].SentKey()); !rec.AnswerLost || rec.Repeats != 0 {
				t.Fatalf("the lost work: %+v", rec)
			}
			if n := r.sim.Submits(); n != 2 {
				t.Fatalf("submits = %d, want 2", n)
			}
			if tc.drop {
				r.clock.Advance(providerWork)
				r.pass(t)
				if got := r.get(t, bystander.ID); got.Status != job.StatusSucceeded {
					t.Fatalf("bystander %s", got.Status)
				}
			}
			r.executedOnce(t, r.get(t, bystander.ID))
		})
	}
}

// TestWebhookAsyncCancelReachesTheProvider: cancelling one owner's parked
// job makes the next pass cancel the work at the receiver, once; the attempt
// ends cancelled, never executed. The other owner's work ends as it would.
func TestWebhookAsyncCancelReachesTheProvider(t *testing.T) {
	t.Parallel()
	r := newHookAsyncRig(t)
	j, kept := r.createFor(t, "owner-a"), r.createFor(t, "owner-b")
	r.runUntilParked(t, j.ID)
	r.runUntilParked(t, kept.ID)
	if _, err := r.eng.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if rep := r.pass(t); rep.Asked[job.DueCancel] != 1 {
		t.Fatalf("the pass after the cancel: %+v", rep)
	}
	// Its callback, racing that write, applies the same end or finds it
	// applied.
	if a := r.event(t); a.err != nil || (a.outcome != lifecycle.EventDuplicate && a.outcome != lifecycle.EventApplied) {
		t.Fatalf("the cancelled callback: %+v", a)
	}
	got := r.get(t, j.ID)
	a, _ := got.Attempt(1)
	if got.Status != job.StatusCancelled || a.State != job.AttemptCancelled || a.Remote.CancelAt.IsZero() || a.Remote.Status != webhook.WorkCancelled {
		t.Fatalf("job %s, attempt %+v, remote %+v", got.Status, a, a.Remote)
	}
	r.runToEnd(t, j.ID, job.StatusCancelled)
	rec, _ := r.sim.Get(a.Remote.ID)
	if rec.Cancels != 1 || rec.Executions != 0 {
		t.Fatalf("the receiver saw %d cancels, %d executions", rec.Cancels, rec.Executions)
	}
	r.clock.Advance(providerWork)
	r.sim.Step()
	if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventApplied {
		t.Fatalf("other owner's callback: %+v", a)
	}
	if got := r.get(t, kept.ID); got.Status != job.StatusSucceeded {
		t.Fatalf("other owner's job %s", got.Status)
	}
	r.executedOnce(t, r.get(t, kept.ID))
}
