package apigw_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// withProviders wires the providers' health on the env's own store.
func withProviders(c *apigw.Config, s *dynamo.Config) {
	st, err := dynamo.New(*s)
	if err != nil {
		panic(err)
	}
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: st})
	if err != nil {
		panic(err)
	}
	c.Providers = b
}

func postJSON(e *env, t *testing.T, path, token, body string) result {
	t.Helper()
	return e.do(t, call{method: http.MethodPost, path: path, token: token, headers: map[string]string{"Content-Type": "application/json"},
		body: []byte(body)})
}

type providersBody struct {
	Providers []struct {
		Name         string         `json:"name"`
		State        string         `json:"state"`
		BreakerState string         `json:"breaker_state"`
		Failures     map[string]int `json:"failures"`
		Forced       *struct {
			State, By, Reason, At string
		} `json:"forced"`
	} `json:"providers"`
}

func TestOperatorsSeeAndForceProviders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withProviders)
	admin, user := e.token(t, "op-1", apigw.AdminScope), e.token(t, "user-1")

	list := func() providersBody {
		t.Helper()
		r := e.do(t, call{method: http.MethodGet, path: "/v1/admin/providers", token: admin})
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var b providersBody
		if err := json.Unmarshal(r.body, &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := list()
	if len(b.Providers) != 2 || b.Providers[0].Name != "sim-fallback" || b.Providers[1].State != "closed" {
		t.Fatalf("providers %+v", b)
	}
	wantProblem(t, e.do(t, call{method: http.MethodGet, path: "/v1/admin/providers", token: user}), http.StatusForbidden, apigw.CodeForbidden)

	force := "/v1/admin/providers/sim-primary/force"
	wantProblem(t, postJSON(e, t, force, user, `{"state":"open","reason":"x"}`), http.StatusForbidden, apigw.CodeForbidden)
	wantProblem(t, postJSON(e, t, force, admin, `{"state":"open"}`), http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, postJSON(e, t, force, admin, `{"state":"sideways","reason":"x"}`), http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, postJSON(e, t, "/v1/admin/providers/no-such/force", admin, `{"state":"open","reason":"x"}`),
		http.StatusNotFound, apigw.CodeNotFound)

	r := postJSON(e, t, force, admin, `{"state":"open","reason":"incident 42: it hangs"}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"state":"open"`) {
		t.Fatalf("force open: %d %s", r.status, r.body)
	}
	b = list()
	p := b.Providers[1]
	if p.State != "open" || p.BreakerState != "closed" || p.Forced == nil || p.Forced.By != "op-1" || p.Forced.Reason != "incident 42: it hangs" {
		t.Fatalf("after forcing: %+v", p)
	}
	if !strings.Contains(e.logs.String(), `"msg":"provider_forced"`) {
		t.Fatalf("not audited in the log:\n%s", e.logs)
	}
	if r := postJSON(e, t, force, admin, `{"state":"auto","reason":"resolved"}`); r.status != http.StatusOK {
		t.Fatalf("lift: %d %s", r.status, r.body)
	}
	if p := list().Providers[1]; p.State != "closed" || p.Forced != nil {
		t.Fatalf("after lifting: %+v", p)
	}
}

// unknownAttempt makes attempt 1 of a new job of owner unknown on provider.
func (e *env) unknownAttempt(t *testing.T, owner, key, provider string) string {
	t.Helper()
	id := e.mustCreate(t, owner, key, demoBody)
	ctx := context.Background()
	if _, _, err := e.eng.StartAttempt(ctx, id, provider); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.MarkUnknown(ctx, id, 1, "no answer within the run's timeout"); err != nil {
		t.Fatal(err)
	}
	return id
}

type bulkResult struct {
	DryRun     bool   `json:"dry_run"`
	Matched    int    `json:"matched"`
	Resolved   int    `json:"resolved"`
	Conflicts  int    `json:"conflicts"`
	NextCursor string `json:"next_cursor"`
	Attempts   []struct {
		JobID  string `json:"job_id"`
		Result string `json:"result"`
	} `json:"attempts"`
}

func TestBulkResolveByProviderAndWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := e.token(t, "op-1", apigw.AdminScope)
	before := time.Now().UTC()
	a := e.unknownAttempt(t, "alice", "k1", "sim-primary")
	b := e.unknownAttempt(t, "bob", "k2", "sim-primary")
	other := e.unknownAttempt(t, "bob", "k3", "sim-fallback")
	path := "/v1/admin/attempts/resolve"
	bulk := func(body string) bulkResult {
		t.Helper()
		r := postJSON(e, t, path, admin, body)
		if r.status != http.StatusOK {
			t.Fatalf("bulk %s: %d %s", body, r.status, r.body)
		}
		var out bulkResult
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	wantProblem(t, postJSON(e, t, path, e.token(t, "alice"), `{"provider":"sim-primary","outcome":"failed","reason":"x"}`),
		http.StatusForbidden, apigw.CodeForbidden)
	wantProblem(t, postJSON(e, t, path, admin, `{"provider":"sim-primary","outcome":"succeeded","reason":"x"}`),
		http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, postJSON(e, t, path, admin, `{"provider":"sim-primary","outcome":"failed"}`),
		http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, postJSON(e, t, path, admin, `{"provider":"sim-primary","outcome":"failed","reason":"x","unknown_since_from":"yesterday"}`),
		http.StatusUnprocessableEntity, apigw.CodeValidationFailed)

	// A window that ended before the incident matches nothing.
	past := before.Add(-time.Hour).Format(time.RFC3339)
	if got := bulk(`{"provider":"sim-primary","outcome":"failed","reason":"x","unknown_since_to":"` + past + `","dry_run":true}`); got.Matched != 0 {
		t.Fatalf("a window in the past matched %d", got.Matched)
	}
	from := before.Format(time.RFC3339Nano)
	dry := bulk(`{"provider":"sim-primary","outcome":"failed","reason":"the provider says it never ran them","unknown_since_from":"` + from + `","dry_run":true}`)
	if !dry.DryRun || dry.Matched != 2 || dry.Resolved != 0 || len(dry.Attempts) != 2 || dry.Attempts[0].Result != "would_resolve" {
		t.Fatalf("dry run %+v", dry)
	}
	for _, id := range []string{a, b} {
		if j, _ := e.eng.Get(context.Background(), id); j.Status != job.StatusUnknown {
			t.Fatalf("a dry run changed %s: %s", id, j.Status)
		}
	}
	done := bulk(`{"provider":"sim-primary","outcome":"failed","reason":"the provider says it never ran them","unknown_since_from":"` + from + `"}`)
	if done.Matched != 2 || done.Resolved != 2 || done.Conflicts != 0 {
		t.Fatalf("resolution %+v", done)
	}
	for _, id := range []string{a, b} {
		j, _ := e.eng.Get(context.Background(), id)
		at, _ := j.Attempt(1)
		if at.State != job.AttemptFailed || at.Resolution == nil || at.Resolution.By != "op-1" ||
			at.Resolution.Reason != "the provider says it never ran them" {
			t.Fatalf("%s attempt %+v", id, at)
		}
	}
	if j, _ := e.eng.Get(context.Background(), other); j.Status != job.StatusUnknown {
		t.Fatalf("another provider's attempt was resolved: %s", j.Status)
	}
	if again := bulk(`{"provider":"sim-primary","outcome":"failed","reason":"again"}`); again.Matched != 0 {
		t.Fatalf("resolving again matched %d", again.Matched)
	}
}

func TestAWaitingJobSaysWhyAndWhenToAskAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	id := e.mustCreate(t, "alice", "w1", demoBody)
	j, _ := e.eng.Get(ctx, id)
	until := time.Now().UTC().Add(45 * time.Second)
	if _, err := e.eng.WaitOn(ctx, j, job.Waiting{Reason: job.WaitProviders, Since: time.Now().UTC(), Until: until,
		Detail: "sim-primary: forced open by op-1: incident 42"}); err != nil {
		t.Fatal(err)
	}
	owner := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: e.token(t, "alice")})
	body := owner.jobBody(t)
	w, _ := body["waiting"].(map[string]any)
	if body["status"] != "pending" || w["reason"] != "providers_unavailable" || w["until"] == nil || w["detail"] != nil {
		t.Fatalf("owner's view: %s", owner.body)
	}
	ra, err := strconv.Atoi(owner.header.Get("Retry-After"))
	if err != nil || ra < 30 || ra > 46 {
		t.Fatalf("Retry-After %q, want about 45", owner.header.Get("Retry-After"))
	}
	op := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: e.token(t, "op-1", apigw.AdminScope)}).jobBody(t)
	if ow, _ := op["waiting"].(map[string]any); ow["detail"] != "sim-primary: forced open by op-1: incident 42" {
		t.Fatalf("operator's view: %v", op["waiting"])
	}

	blocked := e.unknownAttempt(t, "alice", "w2", "sim-primary")
	bb := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + blocked, token: e.token(t, "alice")}).jobBody(t)
	if bw, _ := bb["waiting"].(map[string]any); bw["reason"] != "attempt_unknown" || bw["attempt"] != float64(1) || bw["provider"] != "sim-primary" {
		t.Fatalf("blocked job: %v", bb["waiting"])
	}
}

// The providers' view names owners by their keys in the health, as many
// as the health holds (review N-L4): the contract's bounds hold them all.
func TestProviderViewBoundsHoldTheOwnerKeys(t *testing.T) {
	t.Parallel()
	props := sharedContract(t).doc.Components.Schemas["Provider"].Value.Properties
	for _, name := range []string{"backing_off", "waiting", "rate_waiting"} {
		list := props[name].Value
		if list.MaxItems == nil || *list.MaxItems != uint64(job.MaxTrackedOwners+job.OwnerBuckets) {
			t.Errorf("%s: maxItems %v, want %d (job.MaxTrackedOwners + job.OwnerBuckets)", name, list.MaxItems, job.MaxTrackedOwners+job.OwnerBuckets)
		}
		item := list.Items.Value
		if name == "backing_off" {
			item = item.Properties["owner"].Value
		}
		if item.MaxLength == nil || *item.MaxLength != uint64(job.MaxOwnerKeyBytes) {
			t.Errorf("%s: owners' maxLength %v, want %d (job.MaxOwnerKeyBytes)", name, item.MaxLength, job.MaxOwnerKeyBytes)
		}
	}
	if n := len(job.OwnerKey(strings.Repeat("o", 1024))); n > job.MaxOwnerKeyBytes {
		t.Fatalf("a digest key of %d bytes", n)
	}
}
