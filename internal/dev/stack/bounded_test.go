package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// Issue 20's drill, on make run's per-owner bounds (stack.DefaultQuotas:
// 100 unfinished jobs, 20 held GETs): one owner's burst of 300 blocking
// creates and 300 concurrent held GETs are refused past the bounds with
// 429s that say which bound and when to retry, never a 5xx, while a replay
// of an accepted key still answers its job and another owner is served.
func TestOneOwnerIsBounded(t *testing.T) {
	t.Parallel()
	const burst = 300
	quotas := stack.DefaultQuotas()
	// Blocked jobs wait a minute between checks, so that 100 of them do not
	// keep the machine busy while the drill lasts.
	s := ownStack(t, "bounded", stack.Config{CertifyDemo: true, Wait: job.WaitSchedule{Steps: []time.Duration{time.Minute}}})
	greedy := newClient(t, s, "greedy")
	other := newClient(t, s, "bystander")
	ctx := context.Background()
	var mu sync.Mutex
	var problems []string
	expect := func(ok bool, format string, args ...any) {
		if !ok {
			mu.Lock()
			problems = append(problems, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
	}
	// Every answer carries nosniff and is never a 5xx.
	checkAnswer := func(what string, code int, h http.Header) {
		expect(code < 500, "%s: %d", what, code)
		expect(h.Get("X-Content-Type-Options") == "nosniff", "%s: X-Content-Type-Options %q", what, h.Get("X-Content-Type-Options"))
	}
	check429 := func(what string, code int, h http.Header, body []byte, limit string) {
		var p struct {
			Type  string `json:"type"`
			Limit string `json:"limit"`
		}
		_ = json.Unmarshal(body, &p)
		expect(p.Type == "https://onejob.dev/problems/quota-exceeded" && p.Limit == limit && h.Get("Retry-After") != "" &&
			h.Get("RateLimit-Policy") != "" && strings.Contains(h.Get("RateLimit"), "r=0") &&
			h.Get("Content-Type") == "application/problem+json",
			"%s: 429 %s (Retry-After %q, RateLimit-Policy %q, RateLimit %q)", what, body, h.Get("Retry-After"), h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}

	// 300 creates of jobs that block (their primary never answers), 16 at
	// a time.
	blocking := map[string]any{"prompt": "bounded", "simulate": map[string]any{sim.DemoPrimary: map[string]any{"outcome": "timeout"}}}
	accepted := make([]string, 0, quotas.UnfinishedJobs)
	var acceptedKey string
	var refused int
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				key := fmt.Sprintf("burst-%03d", i)
				code, h, body, err := greedy.api.Do(ctx, http.MethodPost, "/v1/jobs", key, map[string]any{"type": "demo", "input": blocking})
				if err != nil {
					expect(false, "create %s: %v", key, err)
					continue
				}
				checkAnswer("create "+key, code, h)
				mu.Lock()
				switch code {
				case http.StatusCreated:
					var j apiclient.Job
					_ = json.Unmarshal(body, &j)
					accepted = append(accepted, j.ID)
					acceptedKey = key
				case http.StatusTooManyRequests:
					refused++
				}
				mu.Unlock()
				if code == http.StatusTooManyRequests {
					check429("create "+key, code, h, body, job.LimitUnfinishedJobs)
				} else {
					expect(code == http.StatusCreated, "create %s: %d %s", key, code, body)
				}
			}
		})
	}
	for i := range burst {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(accepted) != quotas.UnfinishedJobs || refused != burst-quotas.UnfinishedJobs {
		t.Fatalf("%d accepted and %d refused of %d, want %d accepted; the others: %s", len(accepted), refused, burst,
			quotas.UnfinishedJobs, strings.Join(problems[:min(len(problems), 5)], "; "))
	}
	t.Cleanup(func() { // the blocked jobs end with the test
		ids := make(chan string)
		var cancels sync.WaitGroup
		for range 8 {
			cancels.Go(func() {
				for id := range ids {
					_, _, _, _ = greedy.api.Do(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel", "", map[string]any{"reason": "drill over"})
				}
			})
		}
		for _, id := range accepted {
			ids <- id
		}
		close(ids)
		cancels.Wait()
	})
	// A replay of an accepted key is answered with its job, quota or not.
	code, h, body, err := greedy.api.Do(ctx, http.MethodPost, "/v1/jobs", acceptedKey, map[string]any{"type": "demo", "input": blocking})
	if err != nil || code >= 300 {
		t.Fatalf("replay of %s: %d %v %s", acceptedKey, code, err, body)
	}
	checkAnswer("replay", code, h)

	// 300 concurrent held GETs on one of the owner's blocked jobs: at most
	// 20 are held; the rest are refused at once, while another owner's
	// creates are served.
	target := greedy.get(accepted[0])
	etag := ""
	if _, h, _, err := greedy.api.DoWith(ctx, http.MethodGet, "/v1/jobs/"+target.ID, nil, nil); err == nil {
		etag = h.Get("ETag")
	}
	if etag == "" {
		t.Fatal("no ETag on a job")
	}
	held := http.Header{"If-None-Match": {etag}, "Prefer": {"wait=20"}}
	var holds sync.WaitGroup
	var heldRefused, heldAnswered int
	refusedAll := make(chan struct{})
	for range burst {
		holds.Go(func() {
			code, h, body, err := greedy.api.DoWith(ctx, http.MethodGet, "/v1/jobs/"+target.ID, held, nil)
			if err != nil {
				expect(false, "held GET: %v", err)
				return
			}
			checkAnswer("held GET", code, h)
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusTooManyRequests {
				check429("held GET", code, h, body, job.LimitHeldRequests)
				heldRefused++
				if heldRefused == burst-quotas.HeldRequests {
					close(refusedAll)
				}
				return
			}
			expect(code == http.StatusOK || code == http.StatusNotModified, "held GET: %d %s", code, body)
			heldAnswered++
		})
	}
	// The refusals come at once; while the 20 are held, another owner is served.
	select {
	case <-refusedAll:
	case <-time.After(20 * time.Second):
		t.Errorf("fewer than %d of %d held GETs refused while %d may be held", burst-quotas.HeldRequests, burst, quotas.HeldRequests)
	}
	var bystander time.Duration
	for i := range 5 {
		t0 := time.Now()
		code, h, body, err := other.api.Do(ctx, http.MethodPost, "/v1/jobs", fmt.Sprintf("bystander-%d", i), map[string]any{"type": "demo", "input": map[string]any{"prompt": "hi"}})
		bystander = max(bystander, time.Since(t0))
		if err != nil || code != http.StatusCreated {
			t.Errorf("another owner's create: %d %v %s", code, err, body)
			continue
		}
		checkAnswer("bystander", code, h)
	}
	// The held ones end when their job changes.
	if code, _, body, err := greedy.api.Do(ctx, http.MethodPost, "/v1/jobs/"+target.ID+"/cancel", "", map[string]any{"reason": "ends the holds"}); err != nil || code != http.StatusOK {
		t.Fatalf("cancel: %d %v %s", code, err, body)
	}
	holds.Wait()

	// The operators' listing of 100 blocked jobs is bounded and pages.
	admin := newClient(t, s, "bounded-operator", "jobs:admin")
	code, h, body, err = admin.api.DoWith(ctx, http.MethodGet, "/v1/admin/jobs?status=unknown", nil, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("operators' listing: %d %v %s", code, err, body)
	}
	checkAnswer("operators' listing", code, h)
	var page struct {
		Jobs       []json.RawMessage `json:"jobs"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Jobs) == 0 || page.NextCursor == "" || len(body) > 5<<20 {
		t.Errorf("operators' listing: %d jobs, next_cursor %q, %d bytes (%v): want a bounded first page", len(page.Jobs), page.NextCursor, len(body), err)
	}
	// A forged cursor is the client's error; a foreign Host is refused.
	code, h, _, _ = admin.api.DoWith(ctx, http.MethodGet, "/v1/admin/jobs?cursor=forged", nil, nil)
	checkAnswer("forged cursor", code, h)
	expect(code == http.StatusBadRequest, "forged admin cursor: %d, want 400", code)
	code, _, _, _ = admin.api.DoWith(ctx, http.MethodGet, "/v1/jobs", http.Header{"Host": {"rebound.example:8080"}}, nil)
	expect(code == http.StatusForbidden, "a foreign Host: %d, want 403", code)

	t.Logf("one owner: %d of %d blocking creates accepted, %d refused with 429; %d of %d held GETs refused, %d held; "+
		"another owner's creates answered within %s; the operators' first page %d bytes",
		len(accepted), burst, refused, heldRefused, burst, heldAnswered, bystander.Round(time.Millisecond), len(body))
	for _, p := range problems {
		t.Error(p)
	}
}
