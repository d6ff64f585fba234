package permissions

import (
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
)

// TestResourcesExist: a grant on a table or index the schema lacks would
// become an IAM statement on an ARN that never exists.
func TestResourcesExist(t *testing.T) {
	t.Parallel()
	schema := map[string][]string{}
	for _, d := range dynamo.Tables() {
		for _, ix := range d.Indexes {
			schema[d.Logical] = append(schema[d.Logical], ix.Name)
		}
		if schema[d.Logical] == nil {
			schema[d.Logical] = []string{}
		}
	}
	for fn, gs := range All() {
		for _, g := range gs {
			r := g.Resource
			if len(g.Actions) == 0 {
				t.Errorf("%s: grant on %s without actions", fn, r)
			}
			for _, a := range g.Actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %q", fn, a)
				}
			}
			if r.Kind == KindFunction && !slices.Contains(deploy.Names(), r.Name) {
				t.Errorf("%s: grant on unknown function %q", fn, r.Name)
			}
			if r.Kind != KindTable {
				continue
			}
			idx, ok := schema[r.Name]
			if !ok {
				t.Errorf("%s: grant on unknown table %q", fn, r.Name)
			} else if r.Index != "" && !slices.Contains(idx, r.Index) {
				t.Errorf("%s: grant on unknown index %s", fn, r)
			}
		}
	}
}

func TestAllows(t *testing.T) {
	t.Parallel()
	jobs := Resource{Kind: KindTable, Name: dynamo.JobsTable().Logical}
	byOwner := Resource{Kind: KindTable, Name: dynamo.JobsTable().Logical, Index: dynamo.IndexByOwner}
	attempts := Resource{Kind: KindTable, Name: dynamo.AttemptsTable().Logical}
	certs := Resource{Kind: KindTable, Name: dynamo.CertificationsTable().Logical}
	for _, tc := range []struct {
		fn, action string
		r          Resource
		want       bool
	}{
		// A create is a conditional UpdateItem (review L5).
		{deploy.FnAPI, "dynamodb:PutItem", jobs, false},
		{deploy.FnAPI, "dynamodb:UpdateItem", jobs, true},
		{deploy.FnAPI, "dynamodb:Query", byOwner, true},
		// The sweeper reads a busy owner's jobs of one minute (review L2).
		{deploy.FnSweeper, "dynamodb:Query", byOwner, true},
		{deploy.FnSweeper, "dynamodb:Scan", byOwner, false},
		{deploy.FnAPI, "dynamodb:Query", jobs, false}, // only the indexes
		// The operators' listing (dynamo.ListOpen): by_open, then the jobs.
		{deploy.FnAPI, "dynamodb:Query", Resource{Kind: KindTable, Name: dynamo.JobsTable().Logical, Index: dynamo.IndexByOpen}, true},
		{deploy.FnAPI, "dynamodb:BatchGetItem", jobs, true},
		{deploy.FnAPI, "dynamodb:UpdateItem", attempts, false},
		{deploy.FnRun, "dynamodb:PutItem", attempts, true},
		{deploy.FnRun, "dynamodb:GetItem", attempts, false},
		{deploy.FnRun, "dynamodb:GetItem", certs, true},
		{deploy.FnHold, "dynamodb:GetItem", certs, false},
		{deploy.FnHold, "dynamodb:PutItem", attempts, true},
		{deploy.FnRun, "secretsmanager:GetSecretValue", Resource{Kind: KindProvidersSecret}, true},
		{deploy.FnHold, "secretsmanager:GetSecretValue", Resource{Kind: KindProvidersSecret}, false},
		{deploy.FnSweeper, "states:StartExecution", Resource{Kind: KindStateMachine}, true},
		{"nosuch", "dynamodb:GetItem", jobs, false},
	} {
		if got := Allows(tc.fn, tc.action, tc.r); got != tc.want {
			t.Errorf("Allows(%s, %s, %s) = %v, want %v", tc.fn, tc.action, tc.r, got, tc.want)
		}
	}
}

// TestNothingForbiddenIsGranted: no function holds a grant Forbidden
// lists (review L5), and each entry says why.
func TestNothingForbiddenIsGranted(t *testing.T) {
	t.Parallel()
	for _, f := range Forbidden() {
		if f.Why == "" || !slices.Contains(deploy.Names(), f.Function) {
			t.Errorf("forbidden %s %s on %s: no reason, or no such function", f.Function, f.Action, f.Resource)
		}
		if Allows(f.Function, f.Action, f.Resource) {
			t.Errorf("%s may %s on %s, which is forbidden: %s", f.Function, f.Action, f.Resource, f.Why)
		}
	}
}

// TestTheNotifiersWritesAreNarrowed (review L5): the notify role may
// update a job's dispatch record and an endpoint's health, naming no
// other attribute: not a job's status or result, not an endpoint's URL or
// secret.
func TestTheNotifiersWritesAreNarrowed(t *testing.T) {
	t.Parallel()
	jobs := Resource{Kind: KindTable, Name: dynamo.JobsTable().Logical}
	endpoints := Resource{Kind: KindTable, Name: dynamo.EndpointsTable().Logical}
	for _, tc := range []struct {
		r     Resource
		names []string
		want  bool
	}{
		{jobs, dynamo.DispatchAttributes(), true},
		{jobs, []string{"id", "revision", "status"}, false},
		{jobs, []string{"id", "result"}, false},
		{endpoints, dynamo.EndpointHealthAttributes(), true},
		{endpoints, []string{"owner", "endpoint_id", "revision", "url"}, false},
		{endpoints, []string{"owner", "endpoint_id", "revision", "secret"}, false},
	} {
		if got := Allows(deploy.FnNotify, "dynamodb:UpdateItem", tc.r, tc.names...); got != tc.want {
			t.Errorf("notify may UpdateItem on %s naming %v: %v, want %v", tc.r, tc.names, got, tc.want)
		}
	}
	for _, g := range All()[deploy.FnNotify] {
		if (g.Resource == jobs || g.Resource == endpoints) && slices.Contains(g.Actions, "dynamodb:UpdateItem") && g.Attributes == nil {
			t.Errorf("notify's UpdateItem on %s is not narrowed to attributes", g.Resource)
		}
	}
}
