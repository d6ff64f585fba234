package permissions

import (
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/store"
	"github.com/onejob/onejob/internal/worker"
)

// TestResourcesExist: a grant on a table or index the schema lacks would
// become an IAM statement on an ARN that never exists.
func TestResourcesExist(t *testing.T) {
	t.Parallel()
	schema := map[string][]string{}
	for _, d := range store.Tables() {
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
			if r.Kind != KindTable {
				continue
			}
			idx, ok := schema[r.Table]
			if !ok {
				t.Errorf("%s: grant on unknown table %q", fn, r.Table)
			} else if r.Index != "" && !slices.Contains(idx, r.Index) {
				t.Errorf("%s: grant on unknown index %s", fn, r)
			}
		}
	}
}

func TestAllows(t *testing.T) {
	t.Parallel()
	jobs := Resource{Kind: KindTable, Table: store.JobsTable.Logical}
	byOwner := Resource{Kind: KindTable, Table: store.JobsTable.Logical, Index: store.IndexByOwner}
	attempts := Resource{Kind: KindTable, Table: store.AttemptsTable.Logical}
	certs := Resource{Kind: KindTable, Table: store.CertificationsTable.Logical}
	for _, tc := range []struct {
		fn, action string
		r          Resource
		want       bool
	}{
		{FnAPI, "dynamodb:PutItem", jobs, true},
		{FnAPI, "dynamodb:Query", byOwner, true},
		{FnAPI, "dynamodb:Query", jobs, false}, // only the index
		{FnAPI, "dynamodb:UpdateItem", attempts, false},
		{worker.FnHedge, "dynamodb:PutItem", attempts, true},
		{worker.FnHedge, "dynamodb:GetItem", attempts, false},
		{worker.FnHedge, "dynamodb:GetItem", certs, true},
		{worker.FnMarkUnknown, "dynamodb:GetItem", certs, false},
		{worker.FnFinalize, "dynamodb:PutItem", attempts, false},
		{worker.FnRunAttempt, "secretsmanager:GetSecretValue", Resource{Kind: KindProvidersSecret}, true},
		{worker.FnFinalize, "secretsmanager:GetSecretValue", Resource{Kind: KindProvidersSecret}, false},
		{FnSweeper, "states:StartExecution", Resource{Kind: KindStateMachine}, true},
		{"nosuch", "dynamodb:GetItem", jobs, false},
	} {
		if got := Allows(tc.fn, tc.action, tc.r); got != tc.want {
			t.Errorf("Allows(%s, %s, %s) = %v, want %v", tc.fn, tc.action, tc.r, got, tc.want)
		}
	}
}
