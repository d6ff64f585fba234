package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/receiver"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/job"
)

// TestCrashBetweenEndAndDelivery: jobs end while no notifier runs (run 1
// with --notify-interval 0), so each event exists only in its job's
// outbox, written by the write that ended the job; the stack is killed -9;
// restarted on the same data, it delivers every event, signed, under one
// webhook-id each. The same crash lands while an asynchronous provider
// (the Responses simulator, in this process: it outlives the stack, as a
// provider does) works on a job: restarted, the stack ends that job with
// no operator and no second submit. And it lands while owners follow
// their streamed jobs (stream_test.go): each stream resumes after its
// client's last event, no delta twice, every job ending without an
// operator. Not parallel: it runs before TestCrashRecovery rather than
// beside it, whose budget a second stack on the same cores would eat into.
func TestCrashBetweenEndAndDelivery(t *testing.T) {
	root := testenv.MustRoot(t)
	if _, err := os.Stat(filepath.Join(root, "node_modules", "dynalite")); err != nil {
		t.Fatalf("node tools missing (run `make tools`): %v", err)
	}
	tmp := t.TempDir()
	bin := buildOnejob(t.Context(), t, root, tmp)
	hooks, err := receiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), drillBudget)
	defer cancel()
	data := filepath.Join(tmp, "data")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	user := newClient(t, "http://"+addr, secret, "hooks-owner")
	async, asyncURL, asyncEnv := startAsyncProvider(t, ctx, addr)
	// Jobs' streams on a port that outlives the kill, as a function URL
	// does: the clients reconnect to the stream_url they were given.
	streamPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	streamAddr := fmt.Sprintf("127.0.0.1:%d", streamPort)

	run1 := startOnejobWith(t, root, bin, data, addr, secret, filepath.Join(tmp, "notify1.log"), asyncEnv,
		"--notify-interval", "0", "--async-provider", asyncURL, "--stream-addr", streamAddr)
	if err := user.waitReady(ctx, run1); err != nil {
		t.Fatalf("run 1: %v\n%s", err, tail(run1.log+".stdout"))
	}
	code, body, err := user.do(ctx, http.MethodPost, "/v1/webhook-endpoints", "", map[string]any{"url": hooks.URL + "/hooks"})
	var ep struct{ Secret string }
	if err != nil || code != http.StatusCreated || json.Unmarshal(body, &ep) != nil {
		t.Fatalf("register: %d %s %v", code, body, err)
	}
	hooks.Expect("/hooks", ep.Secret)
	const jobs = 10
	var ids []string
	for i := range jobs {
		input := map[string]any{"prompt": "crash hooks"}
		if i%2 == 1 {
			input["simulate"] = map[string]any{sim.DemoPrimary: map[string]any{"outcome": "error"}, sim.DemoFallback: map[string]any{"outcome": "error"}}
		}
		code, body, err := user.do(ctx, http.MethodPost, "/v1/jobs", fmt.Sprintf("hooks-%d", i), map[string]any{"type": "demo", "input": input})
		var j apiclient.Job
		if err != nil || code != http.StatusCreated || json.Unmarshal(body, &j) != nil {
			t.Fatalf("submit %d: %d %s %v", i, code, body, err)
		}
		ids = append(ids, j.ID)
	}
	for {
		got, err := user.getAll(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for _, j := range got {
			if j.Terminal() {
				ended++
			}
		}
		if ended == jobs {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs ended", ended, jobs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if n := len(hooks.Deliveries("")); n != 0 {
		t.Fatalf("%d deliveries before the crash, want none (no notifier ran)", n)
	}
	// Streamed jobs of several owners, each followed from its first delta;
	// then the asynchronous job, submitted and waited for: killed while
	// the streams run and its provider works.
	streams := startStreamedJobs(t, ctx, "http://"+addr)
	awaitDelta(t, ctx, streams)
	asyncID := submitAsync(t, ctx, user, newClient(t, "http://"+addr, secret, "operator", apigw.AdminScope), async)
	run1.kill()
	t.Logf("killed -9 mid-stream: %s", midStream(t, streams))
	if rec := async.List(); len(rec) != 1 || rec[0].Status == "completed" {
		t.Fatalf("the provider's work at the kill: %+v, want one response still working", rec)
	}

	restarted := time.Now()
	run2 := startOnejobWith(t, root, bin, data, addr, secret, filepath.Join(tmp, "notify2.log"), asyncEnv, "--async-provider", asyncURL,
		"--stream-addr", streamAddr)
	if err := user.waitReady(ctx, run2); err != nil {
		t.Fatalf("run 2: %v\n%s", err, tail(run2.log+".stdout"))
	}
	// The ends of the jobs that ended before the crash; the asynchronous
	// job's own end (same owner, same endpoint) may come first and is not
	// one of them.
	endsDelivered := func(ds []receiver.Delivery) int {
		ends := map[string]bool{}
		for _, d := range receiver.Delivered(ds) {
			if typ, id, ok := eventOf(d); ok && typ != job.EventAttemptUnknown && slices.Contains(ids, id) {
				ends[id] = true
			}
		}
		return len(ends)
	}
	if err := hooks.Await(ctx, "/hooks", func(ds []receiver.Delivery) bool { return endsDelivered(ds) >= jobs }); err != nil {
		t.Fatalf("after the restart: %d of %d events delivered\n%s", len(receiver.Delivered(hooks.Deliveries("/hooks"))), jobs,
			tail(run2.log))
	}
	all := hooks.Deliveries("/hooks")
	// One webhook-id per event: a job's end, and on a busy machine also an
	// attempt that went unknown on its way.
	seen := map[string]bool{}
	ended := map[string]bool{}
	for _, d := range receiver.Delivered(all) {
		typ, id, ok := eventOf(d)
		if d.Verified != nil || !ok || seen[string(typ)+" "+id] {
			t.Fatalf("delivery %s: verified %v, %s of job %s seen before %v", d.ID, d.Verified, typ, id, seen[string(typ)+" "+id])
		}
		seen[string(typ)+" "+id] = true
		if typ != job.EventAttemptUnknown {
			ended[id] = true
		}
	}
	for _, id := range ids {
		if !ended[id] {
			t.Errorf("job %s: its end was not delivered", id)
		}
	}
	t.Logf("killed -9 with %d events in outboxes; after the restart %d requests, %d distinct webhook-ids, all verified, the last %s after the restart",
		jobs, len(all), len(receiver.Delivered(all)), time.Since(restarted).Round(time.Millisecond))

	// The asynchronous job ends with no operator, its work submitted and
	// run once.
	for {
		j, err := user.get(ctx, asyncID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == string(job.StatusSucceeded) {
			break
		}
		if j.Terminal() {
			t.Fatalf("the asynchronous job ended %s", j.Status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the asynchronous job did not end after the restart: %s\n%s", j.Status, tail(run2.log))
		case <-time.After(100 * time.Millisecond):
		}
	}
	rec := async.List()
	if async.Creates() != 1 || len(rec) != 1 || rec[0].Executions != 1 {
		t.Fatalf("the provider saw %d submits, %d responses, %+v", async.Creates(), len(rec), rec)
	}
	t.Logf("asynchronous job: killed while its provider worked, ended %s after the restart, one submit, one execution",
		time.Since(restarted).Round(time.Millisecond))
	checkStreams(t, ctx, streams, restarted)
}

// asyncWork is how long the asynchronous provider works on the drill's job:
// longer than the kill and the restart take, so the stack is killed while
// it works (the test checks) and the job ends after the restart.
const asyncWork = 4 * time.Second

// startAsyncProvider serves a Responses simulator (sim-async) that posts
// its webhooks to the stack at addr, moving its work along until the test
// ends; it returns the URL and the environment (its webhook secret) that
// `onejob run --async-provider` takes.
func startAsyncProvider(t *testing.T, ctx context.Context, addr string) (*sim.Responses, string, []string) {
	t.Helper()
	whsec, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	async, err := sim.NewResponses(sim.ResponsesOptions{Oracle: sim.Fixed{GoodOutput: sim.DemoAsyncOutput(sim.DemoAsync)},
		ProcessingTime: asyncWork, WebhookSecret: whsec, WebhookURL: "http://" + addr + "/v1/provider-events/" + sim.DemoAsync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(async.Close)
	srv := httptest.NewServer(async.Handler())
	t.Cleanup(srv.Close)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				async.Step()
			}
		}
	}()
	return async, srv.URL, []string{sim.DemoAsyncSecretRef + "=" + whsec}
}

// submitAsync creates a demo-async job and waits until the provider has
// its work and the stack has recorded the work's id (an operator sees it).
func submitAsync(t *testing.T, ctx context.Context, user, operator *client, async *sim.Responses) string {
	t.Helper()
	code, body, err := user.do(ctx, http.MethodPost, "/v1/jobs", "hooks-async", map[string]any{"type": "demo-async",
		"input": map[string]any{"prompt": "crash while the provider works"}})
	var j apiclient.Job
	if err != nil || code != http.StatusCreated || json.Unmarshal(body, &j) != nil {
		t.Fatalf("submit the asynchronous job: %d %s %v", code, body, err)
	}
	if err := async.WaitFor(ctx, func() bool { return async.Creates() == 1 }); err != nil {
		t.Fatalf("the provider never got the work: %v", err)
	}
	for {
		code, body, err := operator.do(ctx, http.MethodGet, "/v1/jobs/"+j.ID+"/attempts", "", nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("attempts: %d %s %v", code, body, err)
		}
		var list struct {
			Attempts []struct {
				Remote *struct{ ID string } `json:"remote"`
			} `json:"attempts"`
		}
		if json.Unmarshal(body, &list) == nil && len(list.Attempts) == 1 && list.Attempts[0].Remote != nil {
			return j.ID
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the work's id was never recorded: %s", body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// eventOf reads a delivered event's type and job.
func eventOf(d receiver.Delivery) (job.EventType, string, bool) {
	var e struct {
		Type job.EventType `json:"type"`
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err := json.Unmarshal(d.Body, &e)
	return e.Type, e.Data.ID, err == nil
}
