package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

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
// webhook-id each. Not parallel: it runs before TestCrashRecovery rather
// than beside it, whose budget a second stack on the same cores would eat
// into.
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

	run1 := startOnejob(t, root, bin, data, addr, secret, filepath.Join(tmp, "notify1.log"), "--notify-interval", "0")
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
	run1.kill()

	restarted := time.Now()
	run2 := startOnejob(t, root, bin, data, addr, secret, filepath.Join(tmp, "notify2.log"))
	if err := user.waitReady(ctx, run2); err != nil {
		t.Fatalf("run 2: %v\n%s", err, tail(run2.log+".stdout"))
	}
	endsDelivered := func(ds []receiver.Delivery) int {
		ends := map[string]bool{}
		for _, d := range receiver.Delivered(ds) {
			if typ, id, ok := eventOf(d); ok && typ != job.EventAttemptUnknown {
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
