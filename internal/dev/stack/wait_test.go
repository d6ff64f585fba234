package stack_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
)

// heldGet is one GET /v1/jobs/{id}, conditional when etag is set.
type heldGet struct {
	status  int
	etag    string
	applied string
	body    apiclient.Job
	updated time.Time
	took    time.Duration
	at      time.Time
}

func getJob(t *testing.T, s *stack.Stack, token, id, etag, prefer string) heldGet {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.APIURL+"/v1/jobs/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	start := time.Now()
	resp, err := ownClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	g := heldGet{status: resp.StatusCode, etag: resp.Header.Get("ETag"), applied: resp.Header.Get("Preference-Applied"),
		took: time.Since(start), at: time.Now()}
	if g.status == http.StatusOK {
		var raw struct {
			apiclient.Job
			UpdatedAt time.Time `json:"updated_at"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		g.body, g.updated = raw.Job, raw.UpdatedAt
	}
	return g
}

// TestWaitForChanges measures Prefer: wait against the whole local stack: a
// job whose provider answers after 1 s is followed change by change (each
// held request answered with the change, not at the end of its wait), an
// unchanged job is held for the whole wait and answered 304, and a wait
// above 20 s is capped, not refused. The figures are logged; the bounds on
// them are asserted on a virtual clock in internal/apigw (TestPreferWait).
func TestWaitForChanges(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "waiter")
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(s.JWTSecret())})
	if err != nil {
		t.Fatal(err)
	}
	token, err := tokens.Mint(apigwlocal.Grant{Subject: "waiter", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("FollowsAJobThatFinishesAfter1s", func(t *testing.T) {
		t.Parallel()
		j := c.submit("demo", "wait-slow", script{sim.DemoPrimary: {"latency_ms": 1000}})
		g := getJob(t, s, token, j.ID, "", "")
		if g.status != http.StatusOK || g.etag == "" {
			t.Fatalf("GET: %d ETag %q", g.status, g.etag)
		}
		if again := getJob(t, s, token, j.ID, g.etag, ""); again.status != http.StatusNotModified && again.etag == g.etag {
			t.Fatalf("If-None-Match with the current tag: %d", again.status)
		}
		woken := 0 // held requests answered by a change before their wait ran out
		for i := 0; !g.body.Terminal(); i++ {
			prev, body := g.etag, g.body
			prefer := "wait=5"
			if i == 0 {
				prefer = "wait=600" // capped, not refused
			}
			g = getJob(t, s, token, j.ID, prev, prefer)
			switch {
			case i == 0 && g.applied != "wait=20":
				t.Fatalf("Prefer: wait=600 applied as %q, want wait=20", g.applied)
			case i > 0 && g.applied != "wait=5":
				t.Fatalf("Preference-Applied %q", g.applied)
			case g.status == http.StatusNotModified && g.etag == prev:
				// Nothing changed within the wait (a loaded machine): wait again.
				t.Logf("held request %d: 304 after %v", i, g.took.Round(time.Millisecond))
				g.body = body
				continue
			case g.status != http.StatusOK || g.etag == prev:
				t.Fatalf("held request %d: %d, ETag %s after %s", i, g.status, g.etag, prev)
			}
			if g.took < 4500*time.Millisecond {
				woken++
			}
			// The change was written at updated_at; the answer arrived at g.at.
			t.Logf("change: status %s (%s) answered %v after it was written, request held %v",
				g.body.Status, g.body.States(), g.at.Sub(g.updated).Round(time.Millisecond), g.took.Round(time.Millisecond))
			if i > 20 {
				t.Fatalf("still %s after %d held requests", g.body.Status, i)
			}
		}
		if g.body.Status != "succeeded" || woken == 0 {
			t.Fatalf("job ended %s (%s); %d held requests woken by a change", g.body.Status, g.body.States(), woken)
		}
	})

	t.Run("HoldsAnUnchangedJobForTheWholeWait", func(t *testing.T) {
		t.Parallel()
		j := c.submit("demo", "wait-done", nil)
		j = c.await(j.ID, 15*time.Second, "an outcome", apiclient.Job.Terminal)
		g := getJob(t, s, token, j.ID, "", "")
		held := getJob(t, s, token, j.ID, g.etag, "wait=5")
		if held.status != http.StatusNotModified || held.applied != "wait=5" || held.etag != g.etag {
			t.Fatalf("unchanged job: %d Preference-Applied %q ETag %s (was %s)", held.status, held.applied, held.etag, g.etag)
		}
		if held.took < 5*time.Second {
			t.Fatalf("answered 304 after %v: it did not hold the request for the wait", held.took)
		}
		t.Logf("unchanged job: 304 after %v (Prefer: wait=5)", held.took.Round(time.Millisecond))
	})
}
