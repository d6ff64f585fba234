package apigw_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apigwlocal"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/jobtype"
)

// unknownJob creates owner's job and leaves its attempt 1 unknown.
func (e *env) unknownJob(t *testing.T, owner, key string) string {
	t.Helper()
	return e.unknownJobOf(t, owner, key, demoBody)
}

// unknownJobOf is unknownJob with the create's body.
func (e *env) unknownJobOf(t *testing.T, owner, key, body string) string {
	t.Helper()
	ctx := context.Background()
	id := e.mustCreate(t, owner, key, body)
	if _, _, err := e.eng.StartAttempt(ctx, id, "sim-primary"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.eng.MarkRunning(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.MarkUnknown(ctx, id, 1, "provider timeout"); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *env) resolve(t *testing.T, tok, id string, n int, body string) result {
	t.Helper()
	return e.do(t, call{method: http.MethodPost, path: fmt.Sprintf("/v1/jobs/%s/attempts/%d/resolve", id, n), token: tok,
		headers: map[string]string{"Content-Type": "application/json"}, body: []byte(body)})
}

// TestConcurrentResolutions: operators racing to resolve one unknown attempt
// with different results — exactly one is told 200, and its result is the
// one stored; the others are told 409 and why; 20 rounds.
func TestConcurrentResolutions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := e.token(t, "operator", apigw.AdminScope)
	const rounds, operators = 20, 16
	for round := range rounds {
		id := e.unknownJob(t, "owner-1", fmt.Sprintf("k-%d", round))
		results := make([]result, operators)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range operators {
			wg.Go(func() {
				<-start
				results[i] = e.resolve(t, admin, id, 1,
					fmt.Sprintf(`{"outcome":"succeeded","result":{"text":"by operator %d"},"reason":"seen in the provider's console"}`, i))
			})
		}
		close(start)
		wg.Wait()
		winner, conflicts := -1, 0
		for i, r := range results {
			switch r.status {
			case http.StatusOK:
				if winner >= 0 {
					t.Fatalf("round %d: operators %d and %d were both told 200", round, winner, i)
				}
				winner = i
			case http.StatusConflict:
				p := wantProblem(t, r, http.StatusConflict, apigw.CodeResolutionConflict)
				if p["attempt_state"] != "succeeded" || strings.Contains(string(r.body), "by operator") {
					t.Fatalf("round %d: conflict %s", round, r.body)
				}
				conflicts++
			default:
				t.Fatalf("round %d: %d %s", round, r.status, r.body)
			}
		}
		if winner < 0 || conflicts != operators-1 {
			t.Fatalf("round %d: winner %d, %d conflicts", round, winner, conflicts)
		}
		j, err := e.eng.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"text":"by operator %d"}`, winner); string(j.Result) != want {
			t.Fatalf("round %d: operator %d was told 200, the job holds %s", round, winner, j.Result)
		}
	}
}

// TestResolutionResultMeetsTheContract: a succeeded resolution's result is
// checked against the job type's output contract (the real catalog) and
// refused whole, with the violations, when it fails.
func TestResolutionResultMeetsTheContract(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *apigw.Config, _ *dynamo.Config) { c.Catalog = apigw.JobTypes{Catalog: cat} })
	admin := e.token(t, "operator", apigw.AdminScope)
	id := e.unknownJob(t, "owner-1", "k")
	before, _ := e.eng.Get(context.Background(), id)
	tests := []struct {
		name, result string
		pointer      string
	}{
		{"UnknownMember", `{"foo":1}`, "/result"},
		{"WrongType", `{"text":1,"provider":"sim-primary"}`, "/result/text"},
		{"FailsACheck", `{"text":"no name here","provider":"sim-primary"}`, "/result"},
	}
	for _, tc := range tests {
		r := e.resolve(t, admin, id, 1, `{"outcome":"succeeded","reason":"r","result":`+tc.result+`}`)
		p := wantProblem(t, r, http.StatusUnprocessableEntity, apigw.CodeResultViolatesContract)
		errs, _ := p["errors"].([]any)
		found := false
		for _, fe := range errs {
			if ptr, _ := fe.(map[string]any)["pointer"].(string); strings.HasPrefix(ptr, tc.pointer) {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: no violation under %s: %s", tc.name, tc.pointer, r.body)
		}
	}
	if after, _ := e.eng.Get(context.Background(), id); after.Revision != before.Revision {
		t.Fatalf("a refused resolution was written: revision %d→%d", before.Revision, after.Revision)
	}
	r := e.resolve(t, admin, id, 1, `{"outcome":"succeeded","reason":"r","result":{"text":"answer from sim-primary","provider":"sim-primary"}}`)
	if b := r.jobBody(t); r.status != http.StatusOK || b["status"] != "succeeded" {
		t.Fatalf("a valid result: %d %s", r.status, r.body)
	}
}

// TestResolutionRecord: the attempts list shows the resolution — who, when
// and why to operators, what and when to the owner.
func TestResolutionRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin, owner := e.token(t, "ops-anna", apigw.AdminScope), e.token(t, "owner-1")
	id := e.unknownJob(t, "owner-1", "k")
	if r := e.resolve(t, admin, id, 1, `{"outcome":"failed","reason":"ticket 42: never processed"}`); r.status != http.StatusOK {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	type res struct {
		Outcome, At, By, Reason string
	}
	read := func(tok string) res {
		r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id + "/attempts", token: tok})
		var body struct {
			Attempts []struct {
				Resolution *res `json:"resolution"`
			} `json:"attempts"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || len(body.Attempts) != 1 || body.Attempts[0].Resolution == nil {
			t.Fatalf("%v %s", err, r.body)
		}
		return *body.Attempts[0].Resolution
	}
	if got := read(admin); got.Outcome != "failed" || got.By != "ops-anna" || got.Reason != "ticket 42: never processed" || got.At == "" {
		t.Fatalf("operator's view of the resolution: %+v", got)
	}
	if got := read(owner); got.Outcome != "failed" || got.At == "" || got.By != "" || got.Reason != "" {
		t.Fatalf("owner's view of the resolution: %+v", got)
	}
}

// TestAdminClaims: which claim makes an operator is the deployment's choice;
// tokens of each identity provider's shape grant it or not, and look-alike
// values never do.
func TestAdminClaims(t *testing.T) {
	t.Parallel()
	rules := map[string]apigw.AdminRule{
		"Scope":   {Claim: "scope", Value: "jobs:admin"},
		"Scp":     {Claim: "scp", Value: "jobs:admin"},
		"Cognito": {Claim: "cognito:groups", Value: "onejob-operators"},
		"Groups":  {Claim: "groups", Value: "jobs:admin"},
	}
	tests := []struct {
		name   string
		rule   string
		grant  apigwlocal.Grant
		admits bool
	}{
		{"ScopeString", "Scope", apigwlocal.Grant{Scopes: []string{"openid jobs:admin"}}, true},
		{"ScopeLookAlike", "Scope", apigwlocal.Grant{Scopes: []string{"jobs:admin2 xjobs:admin JOBS:ADMIN"}}, false},
		{"ScopeInAnotherClaim", "Scope", apigwlocal.Grant{Claims: map[string]any{"scp": []string{"jobs:admin"}}}, false},
		{"ScpArray", "Scp", apigwlocal.Grant{Claims: map[string]any{"scp": []string{"openid", "jobs:admin"}}}, true},
		{"ScpString", "Scp", apigwlocal.Grant{Claims: map[string]any{"scp": "jobs:admin"}}, true},
		{"ScpLookAlike", "Scp", apigwlocal.Grant{Claims: map[string]any{"scp": []string{"jobs:admin:read", "[jobs:admin]x"}}}, false},
		{"ScpButScopeGiven", "Scp", apigwlocal.Grant{Scopes: []string{"jobs:admin"}}, false},
		{"CognitoGroup", "Cognito", apigwlocal.Grant{Claims: map[string]any{"cognito:groups": []string{"staff", "onejob-operators"}}}, true},
		{"CognitoOtherGroup", "Cognito", apigwlocal.Grant{Claims: map[string]any{"cognito:groups": []string{"onejob-operators-readonly"}}}, false},
		{"CognitoNoGroups", "Cognito", apigwlocal.Grant{}, false},
		// API Gateway renders ["Sales jobs:admin"] as "[Sales jobs:admin]",
		// which a split on spaces cannot tell from two groups: a claim whose
		// elements may hold spaces grants only when it is the value itself.
		{"GroupNameWithTheValue", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": []string{"Sales jobs:admin"}}}, false},
		{"GroupNameEndingBefore", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": []string{"jobs:admin Sales"}}}, false},
		{"GroupStringWithTheValue", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": "Sales jobs:admin"}}, false},
		{"GroupsOneElement", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": []string{"jobs:admin"}}}, true},
		{"GroupsString", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": "jobs:admin"}}, true},
		{"GroupsAmongOthers", "Groups", apigwlocal.Grant{Claims: map[string]any{"groups": []string{"staff", "jobs:admin"}}}, false},
	}
	envs := map[string]*env{}
	for name, rule := range rules {
		envs[name] = newEnv(t, func(c *apigw.Config, _ *dynamo.Config) { c.Admin = rule })
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := envs[tc.rule]
			tc.grant.Subject, tc.grant.TTL = "someone", time.Hour
			tok, err := e.tokens.Mint(tc.grant)
			if err != nil {
				t.Fatal(err)
			}
			r := e.do(t, call{method: http.MethodGet, path: "/v1/admin/jobs", token: tok})
			if admitted := r.status == http.StatusOK; admitted != tc.admits {
				t.Fatalf("admitted = %v, want %v: %d %s", admitted, tc.admits, r.status, r.body)
			}
			if !tc.admits {
				wantProblem(t, r, http.StatusForbidden, apigw.CodeForbidden)
			}
		})
	}
	for _, bad := range []apigw.AdminRule{{Claim: "scope"}, {Claim: "sub", Value: "x"}, {Claim: "groups", Value: "a b"}, {Claim: "groups", Value: "[a]"}} {
		if _, err := apigw.New(apigw.Config{Jobs: envs["Scope"].eng, Catalog: fakeCatalog{}, Admin: bad}); err == nil {
			t.Errorf("admin rule %+v accepted", bad)
		}
	}
}

// TestOperatorListing: operators list every owner's open jobs oldest first,
// by status, a page at a time, and read any job; owners may not list.
func TestOperatorListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	admin, owner := e.token(t, "operator", apigw.AdminScope), e.token(t, "owner-2")
	var unknown []string
	for i := range 5 {
		unknown = append(unknown, e.unknownJob(t, fmt.Sprintf("owner-%d", i%2+1), fmt.Sprintf("u-%d", i)))
	}
	pending := e.mustCreate(t, "owner-3", "p", demoBody)
	done := e.mustCreate(t, "owner-3", "d", demoBody)
	if _, err := e.eng.Cancel(ctx, done); err != nil {
		t.Fatal(err)
	}
	list := func(tok, query string) (result, []string, string) {
		r := e.do(t, call{method: http.MethodGet, path: "/v1/admin/jobs" + query, token: tok})
		var body struct {
			Jobs []struct {
				ID, Owner, Status string
			} `json:"jobs"`
			Next string `json:"next_cursor"`
		}
		_ = json.Unmarshal(r.body, &body)
		var ids []string
		for _, j := range body.Jobs {
			if j.Owner == "" {
				t.Fatalf("a listed job without its owner: %s", r.body)
			}
			ids = append(ids, j.ID)
		}
		return r, ids, body.Next
	}
	r, all, _ := list(admin, "")
	if r.status != http.StatusOK || !slices.Equal(all, append(slices.Clone(unknown), pending)) {
		t.Fatalf("all open jobs: %d %v, want %v then %s", r.status, all, unknown, pending)
	}
	var paged []string
	cursor := ""
	for range 10 {
		q := "?status=unknown&limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		_, ids, next := list(admin, q)
		paged = append(paged, ids...)
		if cursor = next; cursor == "" {
			break
		}
	}
	if !slices.Equal(paged, unknown) {
		t.Fatalf("unknown jobs page by page: %v, want %v", paged, unknown)
	}
	r, _, _ = list(admin, "?status=succeeded")
	wantProblem(t, r, http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	// A forged cursor ("fg" is "~", past every position) is the caller's
	// mistake, never a 500.
	for _, forged := range []string{"fg", "not-a-position", "MjAyNg"} {
		r, _, _ = list(admin, "?cursor="+forged)
		wantProblem(t, r, http.StatusBadRequest, apigw.CodeInvalidCursor)
	}
	r, _, _ = list(owner, "")
	wantProblem(t, r, http.StatusForbidden, apigw.CodeForbidden)
	if r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + pending, token: admin}); r.status != http.StatusOK {
		t.Fatalf("an operator reading another owner's job: %d %s", r.status, r.body)
	}
	if r := e.do(t, call{method: http.MethodPost, path: "/v1/jobs/" + pending + "/cancel", token: admin}); r.status != http.StatusOK {
		t.Fatalf("an operator cancelling another owner's job: %d %s", r.status, r.body)
	}
}

// TestCancellationRecord: a cancel may say why; the job keeps who, when and
// why. An owner reads who and why only of their own cancel; operators
// always. A body that is not a {"reason"} object is refused.
func TestCancellationRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	owner, admin := e.token(t, "owner-1"), e.token(t, "ops-bo", apigw.AdminScope)
	cancel := func(tok, id, body string) result {
		c := call{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", token: tok}
		if body != "" {
			c.headers, c.body = map[string]string{"Content-Type": "application/json"}, []byte(body)
		}
		return e.do(t, c)
	}
	type view struct {
		Cancellation *struct{ At, By, Reason string } `json:"cancellation"`
	}
	read := func(tok, id string) view {
		var v view
		if err := json.Unmarshal(e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + id, token: tok}).body, &v); err != nil || v.Cancellation == nil {
			t.Fatalf("no cancellation: %v", err)
		}
		return v
	}

	mine := e.mustCreate(t, "owner-1", "mine", demoBody)
	if r := cancel(owner, mine, `{"reason":"ordered twice"}`); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if c := read(owner, mine).Cancellation; c.By != "owner-1" || c.Reason != "ordered twice" || c.At == "" {
		t.Fatalf("the owner's own cancel: %+v", c)
	}

	theirs := e.mustCreate(t, "owner-1", "theirs", demoBody)
	if r := cancel(admin, theirs, `{"reason":"provider account suspended"}`); r.status != http.StatusOK {
		t.Fatalf("operator's cancel: %d %s", r.status, r.body)
	}
	if c := read(owner, theirs).Cancellation; c.By != "" || c.Reason != "" || c.At == "" {
		t.Fatalf("the owner sees an operator's cancel as %+v", c)
	}
	if c := read(admin, theirs).Cancellation; c.By != "ops-bo" || c.Reason != "provider account suspended" {
		t.Fatalf("the operator's view: %+v", c)
	}

	plain := e.mustCreate(t, "owner-1", "plain", demoBody)
	if r := cancel(owner, plain, ""); r.status != http.StatusOK {
		t.Fatalf("a cancel without a body: %d %s", r.status, r.body)
	}
	other := e.mustCreate(t, "owner-1", "other", demoBody)
	wantProblem(t, cancel(owner, other, `{"why":"x"}`), http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, cancel(owner, other, `{"reason":""}`), http.StatusUnprocessableEntity, apigw.CodeValidationFailed)
	wantProblem(t, cancel(owner, other, `{"reason":`), http.StatusBadRequest, apigw.CodeMalformedJSON)
	if j, _ := e.eng.Get(context.Background(), other); j.Status == "cancelled" {
		t.Fatal("a refused cancel was written")
	}
}

// listed is one page of a listing as the tests read it.
type listed struct {
	Jobs []struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Input  json.RawMessage `json:"input"`
	} `json:"jobs"`
	Next string `json:"next_cursor"`
}

// listAll pages through a listing (path, then its next_cursor), checking
// that each page fits in limit bytes and that no item carries its input.
// It returns the jobs listed and the number of pages.
func (e *env) listAll(t *testing.T, tok, path string, limit int) ([]string, int) {
	t.Helper()
	var ids []string
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cursor := ""
	for pages := 1; pages <= 100; pages++ {
		p := path
		if cursor != "" {
			p += sep + "cursor=" + cursor
		}
		r := e.do(t, call{method: http.MethodGet, path: p, token: tok})
		if r.status != http.StatusOK || len(r.body) > limit {
			t.Fatalf("%s: %d, %d bytes (at most %d wanted)", p, r.status, len(r.body), limit)
		}
		var page listed
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.Input != nil {
				t.Fatalf("%s: job %s listed with its input (%d bytes)", p, j.ID, len(j.Input))
			}
			ids = append(ids, j.ID)
		}
		if cursor = page.Next; cursor == "" {
			return ids, pages
		}
	}
	t.Fatalf("%s: no last page after 100", path)
	return nil, 0
}

// TestListingsOfLargeJobs is the security review's proof: 25 blocked jobs
// with inputs of 250 KB made the operators' listing 6.3 MB, past what a
// Lambda may answer. Listings carry no input (a job's own GET does), every
// page stays within 5 MiB, and paging reaches every job once.
func TestListingsOfLargeJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin, owner := e.token(t, "operator", apigw.AdminScope), e.token(t, "big-owner")
	body := fmt.Sprintf(`{"type":"demo","input":{"prompt":"x","simulate":%q}}`, strings.Repeat("p", 250_000))
	var oldestFirst []string
	for i := range 25 {
		oldestFirst = append(oldestFirst, e.unknownJobOf(t, "big-owner", fmt.Sprintf("big-%02d", i), body))
	}
	newestFirst := slices.Clone(oldestFirst)
	slices.Reverse(newestFirst)
	tests := []struct {
		name, tok, path string
		want            []string
		pages           int
	}{
		{"OperatorsAllAtOnce", admin, "/v1/admin/jobs?status=unknown&limit=50", oldestFirst, 1},
		{"OperatorsByTen", admin, "/v1/admin/jobs?status=unknown&limit=10", oldestFirst, 3},
		{"OwnersAllAtOnce", owner, "/v1/jobs?limit=50", newestFirst, 1},
		{"OwnersByTen", owner, "/v1/jobs?limit=10", newestFirst, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, pages := e.listAll(t, tc.tok, tc.path, 5<<20)
			if !slices.Equal(got, tc.want) || pages != tc.pages {
				t.Fatalf("listed %v in %d pages, want %v in %d", got, pages, tc.want, tc.pages)
			}
		})
	}
	r := e.do(t, call{method: http.MethodGet, path: "/v1/jobs/" + oldestFirst[0], token: owner})
	if in, _ := json.Marshal(r.jobBody(t)["input"]); r.status != http.StatusOK || len(in) < 250_000 {
		t.Fatalf("the job's own GET: %d, input of %d bytes", r.status, len(in))
	}
}

// TestOperatorListingStaysUnderResponseLimit: a page of the operators'
// listing that would outgrow the response bound is read again with half the
// limit until it fits, as the owners' listing is, and its next_cursor still
// leads to every job once; the status filter applies after each read.
func TestOperatorListingStaysUnderResponseLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, smallResponses) // 3000 bytes
	admin := e.token(t, "operator", apigw.AdminScope)
	var all, unknown []string
	for i := range 12 {
		if i%3 == 2 {
			all = append(all, e.mustCreate(t, "owner-p", fmt.Sprintf("p-%d", i), demoBody))
			continue
		}
		id := e.unknownJob(t, fmt.Sprintf("owner-%d", i%2), fmt.Sprintf("u-%d", i))
		all, unknown = append(all, id), append(unknown, id)
	}
	tests := []struct {
		name, path string
		want       []string
	}{
		{"Open", "/v1/admin/jobs?limit=100", all},
		{"Unknown", "/v1/admin/jobs?status=unknown&limit=100", unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, pages := e.listAll(t, admin, tc.path, 3000)
			if !slices.Equal(got, tc.want) || pages < 2 {
				t.Fatalf("listed %v in %d pages, want %v in several", got, pages, tc.want)
			}
		})
	}
}
