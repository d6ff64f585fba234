package lifecycle_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
)

// These tests run asynchronous attempts against the OpenAI Responses
// simulator over loopback (background mode, its signed webhooks posted to
// an inbound route that hands them to Tasks.ProviderEvent), on memstore
// with the rig's clock, which the simulator's clock follows.

const (
	asyncName = "sim-async"
	// asyncSecret signs the simulator's webhooks (openai-python's test
	// secret).
	asyncSecret = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
	// providerWork is how long the simulated provider works on a response.
	providerWork = 2 * time.Minute
)

// asyncTasks is a rig whose tasks also reach one asynchronous provider
// (name), its webhooks posted to an inbound route that hands them to
// Tasks.ProviderEvent: what both asynchronous kinds' tests share.
type asyncTasks struct {
	*rig
	name    string
	tasks   *lifecycle.Tasks
	async   provider.Async   // the provider start was given
	hooked  chan eventAnswer // what the inbound route answered, per delivery
	inbound string           // the inbound route's base URL
	// starts records the executions the appliers start (wakes); poller is
	// the scheduled pass over the work due.
	starts *execStarter
	poller *lifecycle.Poller
}

type eventAnswer struct {
	outcome lifecycle.EventOutcome
	err     error
}

// withAsync adds the asynchronous provider beside the rig's fakes.
type withAsync struct {
	providers
	name  string
	async provider.Provider
}

func (p withAsync) Get(name string) (provider.Provider, bool) {
	if name == p.name {
		return p.async, true
	}
	return p.providers.Get(name)
}

// newAsyncTasks serves the inbound route (POST
// /v1/provider-events/{provider}); start makes the tasks once the
// provider is built.
func newAsyncTasks(t *testing.T, name string) *asyncTasks {
	t.Helper()
	r := &asyncTasks{rig: newRig(t), name: name, hooked: make(chan eventAnswer, 16), starts: newExecStarter()}
	inbound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		outcome, err := r.tasks.ProviderEvent(req.Context(), strings.TrimPrefix(req.URL.Path, provider.CallbackPath), req.Header, body)
		r.hooked <- eventAnswer{outcome, err}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(inbound.Close)
	r.inbound = inbound.URL
	return r
}

// callbackURL is where the provider's webhooks reach the inbound route.
func (r *asyncTasks) callbackURL() string { return r.inbound + provider.CallbackPath + r.name }

func (r *asyncTasks) start(t *testing.T, p provider.Async) {
	t.Helper()
	r.async = p
	r.tasks = r.tasksWith(t, p)
}

// tasksWith are tasks like the rig's, reaching p as its asynchronous
// provider.
func (r *asyncTasks) tasksWith(t *testing.T, p provider.Async) *lifecycle.Tasks {
	t.Helper()
	cat, _ := catalog()
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
		Providers: withAsync{r.prov, r.name, p}, Certifications: r.st, Inbound: r.st, CallTimeout: callTimeout, PollInterval: pollInterval,
		OverdueGrace: overdue, NowFunc: r.clock.Now, AfterFunc: r.timers.after, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)),
		Starter: r.starts})
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// pass runs the scheduled pass once (over the rig's tasks).
func (r *asyncTasks) pass(t *testing.T) lifecycle.PollReport {
	t.Helper()
	if r.poller == nil {
		var err error
		if r.poller, err = lifecycle.NewPoller(lifecycle.PollerConfig{Tasks: r.tasks, Due: r.st.Store}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := r.poller.Pass(t.Context())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return rep
}

// runUntilParked runs the job once and expects its execution to end with
// the job parked on its work at the provider.
func (r *asyncTasks) runUntilParked(t *testing.T, id string) lifecycle.RunResult {
	t.Helper()
	res, err := r.tasks.Run(t.Context(), r.runInput(t, id))
	if err != nil || res.Parked == "" || res.Status.Terminal() {
		t.Fatalf("run = %+v, %v; want the job parked", res, err)
	}
	return res
}

// createFor makes a demo job of owner on the asynchronous provider alone.
func (r *asyncTasks) createFor(t *testing.T, owner string) job.Job {
	t.Helper()
	j, _, err := r.eng.Create(t.Context(), job.Request{Owner: owner, IdempotencyKey: "k-" + owner,
		Type: "demo", Input: json.RawMessage(`{"prompt":"hello from ` + owner + `"}`), Providers: []string{r.name}, Primary: r.name})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// runUntilWait runs the job once and expects it to wait on its open
// attempt (the state machine's WaitOpen).
func (r *asyncTasks) runUntilWait(t *testing.T, id string) {
	t.Helper()
	_, err := r.tasks.Run(t.Context(), r.runInput(t, id))
	var te *lifecycle.TaskError
	if !errors.As(err, &te) || te.Name != string(job.SignalWaitOpen) {
		t.Fatalf("run = %v, want %s", err, job.SignalWaitOpen)
	}
}

// runToEnd runs the job once and expects it ended with want.
func (r *asyncTasks) runToEnd(t *testing.T, id string, want job.Status) {
	t.Helper()
	res, err := r.tasks.Run(t.Context(), r.runInput(t, id))
	if err != nil || res.Status != want {
		t.Fatalf("run = %+v, %v; want %s", res, err, want)
	}
}

// event waits for the inbound route's answer to the next delivery.
func (r *asyncTasks) event(t *testing.T) eventAnswer {
	t.Helper()
	select {
	case a := <-r.hooked:
		return a
	case <-t.Context().Done():
		t.Fatal("no webhook reached the inbound route")
	}
	return eventAnswer{}
}

// asyncRig runs attempts on the Responses simulator (OpenAI's background
// mode).
type asyncRig struct {
	*asyncTasks
	sim *sim.Responses
}

func newAsyncRig(t *testing.T) *asyncRig {
	t.Helper()
	r := &asyncRig{asyncTasks: newAsyncTasks(t, asyncName)}
	var err error
	r.sim, err = sim.NewResponses(sim.ResponsesOptions{Oracle: sim.Fixed{GoodOutput: good(asyncName)}, APIKey: "sk-test",
		ProcessingTime: providerWork, WebhookURL: r.callbackURL(), WebhookSecret: asyncSecret, NowFunc: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.sim.Close)
	srv := httptest.NewServer(r.sim.Handler())
	t.Cleanup(srv.Close)
	a, err := openai.NewAsync(openai.Config{Name: asyncName, BaseURL: srv.URL + "/v1", Model: "gpt-test",
		APIKey: provider.Secret("sk-test"), HTTPClient: srv.Client(), Now: r.clock.Now}, asyncSecret)
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, a)
	return r
}

func remoteOf(t *testing.T, j job.Job, n int) job.Remote {
	t.Helper()
	a, ok := j.Attempt(n)
	if !ok || a.Remote == nil {
		t.Fatalf("attempt %d records no work at its provider: %+v", n, a)
	}
	return *a.Remote
}

// TestAsyncJobsRunInTheirTiersWindow: a job created to wait 2h or 8h is
// submitted in that completion window, and its work records the tier; a
// job of another owner that waits now is submitted without one.
func TestAsyncJobsRunInTheirTiersWindow(t *testing.T) {
	t.Parallel()
	r := newAsyncRig(t)
	for _, c := range []struct {
		owner  string
		tier   job.Tier
		window string // what the provider saw
	}{
		{"owner-a", job.TierFlex2h, "2h"},
		{"owner-b", job.TierNow, ""},
		{"owner-c", job.TierFlex8h, "8h"},
	} {
		j, _, err := r.eng.Create(t.Context(), job.Request{Owner: c.owner, IdempotencyKey: "k", Type: "demo",
			Input: json.RawMessage(`{"prompt":"hello"}`), Providers: []string{asyncName}, Primary: asyncName, Tier: c.tier})
		if err != nil {
			t.Fatal(err)
		}
		r.runUntilParked(t, j.ID)
		rem := remoteOf(t, r.get(t, j.ID), 1)
		got, ok := r.sim.Get(rem.ID)
		if !ok || rem.Tier != c.tier || got.CompletionWindow != c.window {
			t.Fatalf("%s's job (tier %s): work tier %q, submitted in window %q (found %v), want %q", c.owner, c.tier, rem.Tier, got.CompletionWindow, ok, c.window)
		}
	}
}

// TestAsyncJobsEndByWebhook: two owners' jobs are submitted, recorded with
// their work's id, and their runs end their executions (parked: nothing
// waits); after the provider worked 2 minutes each webhook ends its own
// job through the compare-and-swap, the work executed once, and no run is
// started for it; the same delivery again, a forged and a replayed one
// change nothing.
func TestAsyncJobsEndByWebhook(t *testing.T) {
	t.Parallel()
	r := newAsyncRig(t)
	jobs := []job.Job{r.createFor(t, "owner-a"), r.createFor(t, "owner-b")}
	for _, j := range jobs {
		res := r.runUntilParked(t, j.ID)
		got := r.get(t, j.ID)
		rem := remoteOf(t, got, 1)
		if a, _ := got.Attempt(1); a.State != job.AttemptRunning || rem.ID == "" || rem.Status != "queued" || rem.Tier != job.TierNow ||
			!strings.Contains(res.Parked, rem.ID) {
			t.Fatalf("after submit: attempt %+v, remote %+v, parked %q", a, rem, res.Parked)
		}
	}
	if r.sim.Creates() != 2 {
		t.Fatalf("creates = %d, want 2", r.sim.Creates())
	}
	r.clock.Advance(providerWork)
	r.sim.Step()
	for range jobs {
		if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventApplied {
			t.Fatalf("webhook: %+v", a)
		}
	}
	for _, j := range jobs {
		got := r.get(t, j.ID)
		if got.Status != job.StatusSucceeded || got.CompletedBy != 1 {
			t.Fatalf("job %s: %s, completed by %d", j.Owner, got.Status, got.CompletedBy)
		}
		if want := string(good(asyncName)); string(got.Result) != want {
			t.Fatalf("result = %s, want %s", got.Result, want)
		}
		if a, _ := got.Attempt(1); a.Usage == nil || a.Usage.OutputTokens == 0 || a.ProviderRequestID != remoteOf(t, got, 1).ID ||
			a.Usage.Latency != providerWork {
			t.Fatalf("attempt records no billed usage, no id, or not the work's latency (%s): %+v %+v", providerWork, a, a.Usage)
		}
		if rem := remoteOf(t, got, 1); rem.Status != "completed" || !rem.HeardAt.Equal(r.clock.Now()) {
			t.Fatalf("the work's end is not recorded on it: %+v", rem)
		}
		if n := r.sim.Executed(openai.MetadataKey, got.Attempts[0].SentKey()); n != 1 {
			t.Fatalf("work of %s executed %d times", j.Owner, n)
		}
	}
	before := r.get(t, jobs[0].ID)
	events := r.sim.Events()
	if len(events) != 2 {
		t.Fatalf("events = %d", len(events))
	}

	// The same delivery again (a webhook retry): a duplicate.
	if _, err := r.sim.Redeliver(t.Context(), events[0].EventID); err != nil {
		t.Fatal(err)
	}
	if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventDuplicate {
		t.Fatalf("redelivery: %+v", a)
	}
	// Forged: the body changed under a real signature; replayed: a
	// genuine delivery signed 10 minutes ago.
	ev := events[0]
	forged := strings.Replace(string(ev.Body), ev.ResponseID, "resp_forged", 1)
	signed, err := webhooks.Headers([]string{asyncSecret}, ev.WebhookID, r.clock.Now(), ev.Body)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := webhooks.Headers([]string{asyncSecret}, ev.WebhookID, r.clock.Now().Add(-10*time.Minute), ev.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]struct {
		header http.Header
		body   string
	}{
		"forged":   {signed, forged},
		"replayed": {stale, string(ev.Body)},
	} {
		_, err := r.tasks.ProviderEvent(t.Context(), asyncName, d.header, []byte(d.body))
		if !errors.Is(err, lifecycle.ErrEventRefused) {
			t.Fatalf("%s delivery: %v, want refused", name, err)
		}
	}
	after := r.get(t, jobs[0].ID)
	if after.Revision != before.Revision || after.Version != before.Version {
		t.Fatalf("a refused or repeated delivery wrote the job: revision %d → %d", before.Revision, after.Revision)
	}
	// A run (a sweeper's restart, say) finds the job done.
	res, err := r.tasks.Run(t.Context(), r.runInput(t, jobs[0].ID))
	if err != nil || res.Status != job.StatusSucceeded {
		t.Fatalf("run after the webhook: %+v, %v", res, err)
	}
	if r.sim.Creates() != 2 {
		t.Fatalf("creates = %d, want 2", r.sim.Creates())
	}
	if started := r.starts.names(); len(started) != 0 {
		t.Fatalf("executions started for jobs that ended: %v", started)
	}
}

// TestAsyncJobEndsByPollingWhenTheWebhookIsLost: the provider's webhook
// never arrives; the scheduled pass asks by id when the schedule says and
// ends the job; before the work ends, a poll records the status and the
// next ask. No run is started: the job ended.
func TestAsyncJobEndsByPollingWhenTheWebhookIsLost(t *testing.T) {
	t.Parallel()
	r := newAsyncRig(t)
	r.sim.DropWebhooks(true)
	j := r.createFor(t, "owner-a")
	other := r.createFor(t, "owner-b")
	r.runUntilParked(t, j.ID)
	r.runUntilParked(t, other.ID)

	// Before its first poll is due, a pass asks nothing.
	if rep := r.pass(t); rep.Jobs != 0 {
		t.Fatalf("a pass before the first poll was due: %+v", rep)
	}
	r.clock.Advance(40 * time.Second)
	r.sim.Step()
	if rep := r.pass(t); rep.Jobs != 2 || rep.Asked[job.DuePoll] != 2 {
		t.Fatalf("the pass at 40 s: %+v, want both jobs polled", rep)
	}
	got := remoteOf(t, r.get(t, j.ID), 1)
	if got.Polls != 1 || got.Status != "in_progress" || !got.HeardAt.Equal(r.clock.Now()) ||
		!got.NextPollAt.Equal(r.clock.Now().Add(40*time.Second)) {
		t.Fatalf("after a poll at 40 s: %+v", got)
	}
	if rep := r.pass(t); rep.Jobs != 0 {
		t.Fatalf("a pass right after the polls: %+v", rep)
	}

	r.clock.Advance(providerWork)
	r.sim.Step()
	if rep := r.pass(t); rep.Ended != 2 {
		t.Fatalf("the pass after the work ended: %+v", rep)
	}
	for _, id := range []string{j.ID, other.ID} {
		if got := r.get(t, id); got.Status != job.StatusSucceeded {
			t.Fatalf("job %s after the pass: %s", id, got.Status)
		}
	}
	for _, ev := range r.sim.Events() {
		if len(ev.Deliveries) != 1 || !ev.Deliveries[0].Dropped {
			t.Fatalf("a webhook was delivered: %+v", ev.Deliveries)
		}
	}
	if r.sim.Creates() != 2 || len(r.starts.names()) != 0 {
		t.Fatalf("creates = %d, want 2; executions started: %v", r.sim.Creates(), r.starts.names())
	}
}

// TestAsyncLostSubmitIsFoundAgain: the submit's answer is lost, so the
// attempt is unknown and blocks every other; the webhook of the work it
// created carries its key, finds it again and ends the job. The provider
// executed the work once, and no second submit was made.
func TestAsyncLostSubmitIsFoundAgain(t *testing.T) {
	t.Parallel()
	r := newAsyncRig(t)
	r.sim.LoseAnswers(1)
	j := r.createFor(t, "owner-a")
	bystander := r.createFor(t, "owner-b")
	r.runUntilWait(t, j.ID)
	if a, _ := r.get(t, j.ID).Attempt(1); a.State != job.AttemptUnknown || a.Remote != nil {
		t.Fatalf("after a lost submit: %+v", a)
	}
	r.runUntilParked(t, bystander.ID)
	r.hold(t, j.ID, string(job.SignalWaitOpen))
	r.runUntilWait(t, j.ID) // blocked: nothing new is submitted
	if r.sim.Creates() != 2 {
		t.Fatalf("creates = %d, want 2 (one per job)", r.sim.Creates())
	}
	r.clock.Advance(providerWork)
	r.sim.Step()
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
	got := r.get(t, j.ID)
	if got.Status != job.StatusSucceeded || got.AttemptCount != 1 {
		t.Fatalf("job %s with %d attempts", got.Status, got.AttemptCount)
	}
	if rem := remoteOf(t, got, 1); !rem.Found {
		t.Fatalf("remote not marked found: %+v", rem)
	}
	if n := r.sim.Executed(openai.MetadataKey, got.Attempts[0].SentKey()); n != 1 {
		t.Fatalf("executed %d times", n)
	}
}

// TestAsyncCancelReachesTheProvider: cancelling a parked job makes the
// next pass cancel its work at the provider, once; the attempt ends
// cancelled, and no run is started.
func TestAsyncCancelReachesTheProvider(t *testing.T) {
	t.Parallel()
	r := newAsyncRig(t)
	j := r.createFor(t, "owner-a")
	kept := r.createFor(t, "owner-b")
	r.runUntilParked(t, j.ID)
	r.runUntilParked(t, kept.ID)
	if _, err := r.eng.Cancel(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	// The cancel is due at once; the provider confirms it at once, and
	// the pass records it.
	if rep := r.pass(t); rep.Asked[job.DueCancel] != 1 || rep.Ended != 1 || rep.Jobs != 1 {
		t.Fatalf("the pass after the cancel: %+v", rep)
	}
	// Its response.cancelled webhook, racing that write, applies the same
	// end or finds it applied.
	if a := r.event(t); a.err != nil || (a.outcome != lifecycle.EventDuplicate && a.outcome != lifecycle.EventApplied) {
		t.Fatalf("the cancelled event: %+v", a)
	}
	got := r.get(t, j.ID)
	a, _ := got.Attempt(1)
	if got.Status != job.StatusCancelled || a.State != job.AttemptCancelled || a.Remote.CancelAt.IsZero() || a.Remote.Status != "cancelled" {
		t.Fatalf("job %s, attempt %+v, remote %+v", got.Status, a, a.Remote)
	}
	if res, err := r.tasks.Run(t.Context(), r.runInput(t, j.ID)); err != nil || res.Status != job.StatusCancelled {
		t.Fatalf("a later run: %+v, %v", res, err)
	}
	if rep := r.pass(t); rep.Jobs != 0 {
		t.Fatalf("a pass after the cancel was confirmed: %+v", rep)
	}
	rec, _ := r.sim.Get(a.Remote.ID)
	if rec.Cancels != 1 || rec.Executions != 0 {
		t.Fatalf("provider saw %d cancels, %d executions", rec.Cancels, rec.Executions)
	}
	// The other owner's work is untouched and ends as it would.
	r.clock.Advance(providerWork)
	r.sim.Step()
	if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventApplied {
		t.Fatalf("other owner's event: %+v", a)
	}
	if got := r.get(t, kept.ID); got.Status != job.StatusSucceeded {
		t.Fatalf("other owner's job %s", got.Status)
	}
	if !strings.Contains(r.logs.String(), `"msg":"attempt_cancelled_at_provider"`) {
		t.Fatal(fmt.Errorf("no attempt_cancelled_at_provider log"))
	}
	if len(r.starts.names()) != 0 {
		t.Fatalf("executions started: %v", r.starts.names())
	}
}
