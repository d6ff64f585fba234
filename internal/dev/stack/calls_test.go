package stack_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dynamo"
)

// TestCallsAreAttributed: each function's code runs on SDK clients of its
// own, so every AWS call is recorded as made by the function that made it —
// the operators' listing as the api's Query on by_open and BatchGetItem of
// the jobs (the grants the deployed api lacked), a job's attempts as run's,
// the sweep as the sweeper's — and the stack's own calls (certifying
// sim-fallback at start) as nobody's.
func TestCallsAreAttributed(t *testing.T) {
	t.Parallel()
	s := defaultStack(t)
	c := newClient(t, s, "attributed")
	admin := newClient(t, s, "operator", "jobs:admin")
	// Slow enough to still be open when listed.
	j := c.submit("demo", "attr-1", script{sim.DemoPrimary: {"outcome": "ok", "latency_ms": 1500}})
	// The operators' listing, page after page: the shared stack holds other
	// tests' open jobs, older than this one (a first page of them was seen
	// on a loaded machine).
	for cursor, pages := "", 0; ; pages++ {
		path := "/v1/admin/jobs?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		code, _, body := admin.do(http.MethodGet, path, "", nil)
		var page struct {
			Next string `json:"next_cursor"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("operators' listing: %d %s", code, body)
		}
		if strings.Contains(string(body), j.ID) {
			break
		}
		if cursor = page.Next; cursor == "" || pages > 100 {
			t.Fatalf("the operators' listing (%d pages) does not hold %s", pages+1, j.ID)
		}
	}
	c.await(j.ID, 15*time.Second, "an outcome", apiclient.Job.Terminal)

	jobs := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.JobsTable().Logical}
	byOpen := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.JobsTable().Logical, Index: dynamo.IndexByOpen}
	attempts := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.AttemptsTable().Logical}
	certs := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.CertificationsTable().Logical}
	sm := permissions.Resource{Kind: permissions.KindStateMachine}
	want := []awscalls.Call{
		{Function: deploy.FnAPI, Action: "dynamodb:UpdateItem", Resource: jobs}, // a create: a key may replace an expired job
		{Function: deploy.FnAPI, Action: "states:StartExecution", Resource: sm},
		{Function: deploy.FnAPI, Action: "dynamodb:Query", Resource: byOpen},
		{Function: deploy.FnAPI, Action: "dynamodb:BatchGetItem", Resource: jobs},
		{Function: deploy.FnRun, Action: "dynamodb:UpdateItem", Resource: jobs},
		{Function: deploy.FnRun, Action: "dynamodb:PutItem", Resource: attempts},
		// The sweeper runs every 10 s (sharedSweep); the test waits for a sweep.
		{Function: deploy.FnSweeper, Action: "dynamodb:Query", Resource: byOpen},
	}
	deadline := time.Now().Add(2 * sharedSweep)
	var got []awscalls.Call
	for {
		got = s.Calls()
		// Item writes also name their attributes (awscalls.Call.Attributes),
		// which vary by write: any will do here.
		missing := slices.DeleteFunc(slices.Clone(want), func(c awscalls.Call) bool {
			return slices.ContainsFunc(got, func(g awscalls.Call) bool {
				g.Attributes = ""
				return g == c
			})
		})
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recorded: %v\nrecorded: %v", missing, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range got {
		if !slices.Contains(deploy.Names(), c.Function) {
			t.Errorf("call of no function: %v", c)
		}
		// Only the stack itself writes certifications (as `onejob
		// contract run` does); run reads them.
		if c.Resource == certs && c.Action != "dynamodb:GetItem" {
			t.Errorf("a function's call recorded for the stack's own certification: %v", c)
		}
	}
}
