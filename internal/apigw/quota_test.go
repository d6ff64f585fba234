package apigw_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
)

func TestQuotaOfUnfinishedJobs(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, job.Quotas{UnfinishedJobs: 3, HeldRequests: 2})
	for i := range 3 {
		r := e.create(t, "mallory", fmt.Sprint("k", i), demoBody)
		if r.status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, r.status, r.body)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"unfinished-jobs";q=3;qu="concurrent-requests", "held-requests";q=2;qu="concurrent-requests"` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
	}
	r := e.create(t, "mallory", "k3", demoBody)
	p := wantProblem(t, r, http.StatusTooManyRequests, apigw.CodeQuotaExceeded)
	if p["limit"] != job.LimitUnfinishedJobs || p["quota"] != float64(3) || fmt.Sprint(p["violated_policies"]) != "[unfinished-jobs]" ||
		r.header.Get("Retry-After") != "10" ||
		r.header.Get("RateLimit") != `"unfinished-jobs";r=0;t=10` {
		t.Fatalf("429: %s %v", r.body, r.header)
	}
	// Nothing was written for the refused create.
	if n := e.count(t, e.names.Jobs); n != 3 {
		t.Fatalf("%d jobs stored, want 3", n)
	}
	// A replay of an accepted key is answered with its job, quota or not.
	if r := e.create(t, "mallory", "k1", demoBody); r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay at the quota: %d %s", r.status, r.body)
	}
	// The same key with other input is still a conflict, not a quota.
	wantProblem(t, e.create(t, "mallory", "k1", `{"type":"demo","input":{"prompt":"other"}}`), http.StatusConflict, apigw.CodeIdempotencyKeyReused)
	// Another owner is not held to mallory's quota.
	if r := e.create(t, "alice", "k0", demoBody); r.status != http.StatusCreated {
		t.Fatalf("another owner: %d %s", r.status, r.body)
	}
	// A finished job frees its slot.
	mal := e.do(t, call{method: http.MethodGet, path: "/v1/jobs?limit=1", token: e.token(t, "mallory")}).jobBody(t)
	first := mal["jobs"].([]any)[0].(map[string]any)["id"].(string)
	if r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + first + "/cancel", token: e.token(t, "mallory")}); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r := e.create(t, "mallory", "k4", demoBody); r.status != http.StatusCreated {
		t.Fatalf("after a job finished: %d %s", r.status, r.body)
	}
}

func TestQuotaOfHeldRequests(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, job.Quotas{UnfinishedJobs: 100, HeldRequests: 2})
	id := e.mustCreate(t, "mallory", "w", demoBody)
	tag := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: e.token(t, "mallory")}).header.Get("ETag")
	held := func(token string, wait int) result {
		return e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: token,
			headers: map[string]string{"If-None-Match": tag, "Prefer": fmt.Sprintf("wait=%d", wait)}})
	}
	// Two held requests fill the quota; the test waits for the store to
	// count them, not for a duration.
	var wg sync.WaitGroup
	mal := e.token(t, "mallory")
	for range 2 {
		wg.Go(func() {
			if r := held(mal, 4); r.status != http.StatusNotModified {
				t.Errorf("held: %d %s", r.status, r.body)
			}
		})
	}
	waitUntil(t, func() bool {
		u, err := e.eng.Usage(t.Context(), "mallory")
		return err == nil && u.Holds == 2
	})
	r := held(mal, 4)
	p := wantProblem(t, r, http.StatusTooManyRequests, apigw.CodeQuotaExceeded)
	if p["limit"] != job.LimitHeldRequests || r.header.Get("Retry-After") != "5" {
		t.Fatalf("third held request: %s %v", r.body, r.header)
	}
	// An unconditional read is no held request; operators are not held.
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: mal}); r.status != http.StatusOK {
		t.Fatalf("plain read: %d", r.status)
	}
	op := e.token(t, "op", apigw.AdminScope)
	opTag := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: op}).header.Get("ETag")
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: op,
		headers: map[string]string{"If-None-Match": opTag, "Prefer": "wait=1"}}); r.status != http.StatusNotModified {
		t.Fatalf("operator's held read: %d %s", r.status, r.body)
	}
	wg.Wait()
	if u, _ := e.eng.Usage(t.Context(), "mallory"); u.Holds != 0 {
		t.Fatalf("held requests still counted after they ended: %+v", u)
	}
}

// waitUntil polls cond on real (short) time: for a state another goroutine
// writes, not for a duration.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 26: an owner's create rate, a token bucket spent in the counting
// write: its burst goes through, the next create is refused with the
// RateLimit fields and nothing written, a replay is still answered, and
// other owners have buckets of their own.
func TestCreateRate(t *testing.T) {
	t.Parallel()
	// The store and the engine read a clock that stands still, so the
	// refill between the burst and the refusal is none however slow the
	// machine (it was 3 s once, under load: Retry-After 7).
	now := time.Now()
	e := newEnvWith(t, job.Quotas{UnfinishedJobs: 100, Creates: job.CreateRate{PerMinute: 6, Burst: 3}},
		func(_ *apigw.Config, c *dynamo.Config) { c.NowFunc = func() time.Time { return now } })
	for i := range 3 {
		r := e.create(t, "mallory", fmt.Sprint("k", i), demoBody)
		if r.status != http.StatusCreated {
			t.Fatalf("create %d of the burst: %d %s", i, r.status, r.body)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"unfinished-jobs";q=100;qu="concurrent-requests", "create-rate";q=3;w=30` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
	}
	r := e.create(t, "mallory", "k3", demoBody)
	p := wantProblem(t, r, http.StatusTooManyRequests, apigw.CodeQuotaExceeded)
	// The next token is 10 s away (one every 10 s).
	retry := r.header.Get("Retry-After")
	if p["limit"] != job.LimitCreateRate || p["quota"] != float64(3) || retry != "10" ||
		r.header.Get("RateLimit") != `"create-rate";r=0;t=`+retry {
		t.Fatalf("429: %s %v", r.body, r.header)
	}
	if n := e.count(t, e.names.Jobs); n != 3 {
		t.Fatalf("%d jobs stored, want 3", n)
	}
	if r := e.create(t, "mallory", "k1", demoBody); r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay past the rate: %d %s", r.status, r.body)
	}
	if r := e.create(t, "alice", "k0", demoBody); r.status != http.StatusCreated {
		t.Fatalf("another owner: %d %s", r.status, r.body)
	}
}
