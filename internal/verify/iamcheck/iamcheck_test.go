package iamcheck

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/awscalls"
)

// fixture is a template shaped as CDK synthesizes onejob's: the deployed
// functions, their roles and policies, tables, state machine and secret,
// with the grants given per function.
func fixture(t *testing.T, grants map[string][]any) *Template {
	t.Helper()
	res := map[string]any{
		"JobsTable": map[string]any{"Type": "AWS::DynamoDB::GlobalTable", "Properties": map[string]any{"TableName": "onejob-test-jobs"}},
		"AttemptsTable": map[string]any{"Type": "AWS::DynamoDB::GlobalTable",
			"Properties": map[string]any{"TableName": "onejob-test-attempts"}},
		"CertificationsTable": map[string]any{"Type": "AWS::DynamoDB::GlobalTable",
			"Properties": map[string]any{"TableName": "onejob-test-certifications"}},
		"StateMachine":    map[string]any{"Type": "AWS::StepFunctions::StateMachine", "Properties": map[string]any{"StateMachineName": "onejob-test"}},
		"ProvidersSecret": map[string]any{"Type": "AWS::SecretsManager::Secret", "Properties": map[string]any{}},
	}
	for _, f := range deploy.Functions() {
		role := f.LogicalID + "Role"
		vars := map[string]any{}
		if f.Name == deploy.FnRun || f.Name == deploy.FnEvents {
			vars[deploy.EnvProvidersSecretARN] = map[string]any{"Ref": "ProvidersSecret"}
		}
		res[f.LogicalID] = map[string]any{"Type": "AWS::Lambda::Function", "Properties": map[string]any{
			"FunctionName": "onejob-test-" + f.Name, "Role": map[string]any{"Fn::GetAtt": []any{role, "Arn"}},
			"Environment": map[string]any{"Variables": vars}}}
		res[role] = map[string]any{"Type": "AWS::IAM::Role", "Properties": map[string]any{}}
		res[role+"Policy"] = map[string]any{"Type": "AWS::IAM::Policy", "Properties": map[string]any{
			"Roles":          []any{map[string]any{"Ref": role}},
			"PolicyDocument": map[string]any{"Statement": grants[f.Name]}}}
	}
	b, err := json.Marshal(map[string]any{"Resources": res})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := ParseTemplate("onejob-test", b)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func allow(actions any, resources ...any) map[string]any {
	return map[string]any{"Effect": "Allow", "Action": actions, "Resource": resources}
}

var (
	jobsArn  = map[string]any{"Fn::GetAtt": []any{"JobsTable", "Arn"}}
	indexArn = func(ix string) any { return map[string]any{"Fn::Join": []any{"", []any{jobsArn, "/index/" + ix}}} }
	xray     = allow([]any{"xray:PutTraceSegments", "xray:PutTelemetryRecords"}, "*")
)

func call(fn, action string, r permissions.Resource) awscalls.Recorded {
	return awscalls.Recorded{Call: awscalls.Call{Function: fn, Action: action, Resource: r}, Sources: []string{"test"}}
}

func table(name, index string) permissions.Resource {
	return permissions.Resource{Kind: permissions.KindTable, Name: name, Index: index}
}

// TestCheck: each recorded call is looked up in its own function's
// statements, with references, joins, substitutions and wildcards resolved
// as IAM would: an index needs its own grant (the api's missing by_open),
// a Deny wins, a resource of no stack is never granted, another function's
// grant does not count. What no call used is reported, the Lambda
// service's own grants apart.
func TestCheck(t *testing.T) {
	t.Parallel()
	tmpl := fixture(t, map[string][]any{
		deploy.FnAPI: {
			allow("dynamodb:GetItem", jobsArn),
			allow([]any{"dynamodb:Query"}, indexArn("by_owner")),
			allow("states:StartExecution", map[string]any{"Ref": "StateMachine"}),
			xray,
		},
		deploy.FnRun: {
			allow("dynamodb:Get*", map[string]any{"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/onejob-test-*"}),
			allow("secretsmanager:GetSecretValue", map[string]any{"Ref": "ProvidersSecret"}),
			map[string]any{"Effect": "Deny", "Action": "dynamodb:GetItem", "Resource": "arn:aws:dynamodb:eu-west-1:123456789012:table/onejob-test-attempts"},
		},
		deploy.FnHold: {
			allow("dynamodb:PutItem", map[string]any{"Fn::Sub": []any{"${T}", map[string]any{"T": map[string]any{"Fn::GetAtt": []any{"AttemptsTable", "Arn"}}}}}),
		},
		deploy.FnSweeper: {allow("dynamodb:BatchGetItem", jobsArn)},
		deploy.FnNotify:  {allow("dynamodb:GetItem", jobsArn)},
		deploy.FnEvents:  {allow("dynamodb:UpdateItem", jobsArn)},
		deploy.FnStream:  {allow("dynamodb:GetItem", jobsArn)},
	})
	calls := []awscalls.Recorded{
		call(deploy.FnAPI, "dynamodb:GetItem", table("jobs", "")),
		call(deploy.FnAPI, "dynamodb:Query", table("jobs", "by_owner")),
		call(deploy.FnAPI, "dynamodb:Query", table("jobs", "by_open")),
		call(deploy.FnAPI, "dynamodb:BatchGetItem", table("jobs", "")),
		call(deploy.FnRun, "dynamodb:GetItem", table("certifications", "")),
		call(deploy.FnRun, "dynamodb:GetItem", table("attempts", "")),
		call(deploy.FnRun, "secretsmanager:GetSecretValue", permissions.Resource{Kind: permissions.KindProvidersSecret}),
		call(deploy.FnHold, "dynamodb:PutItem", table("attempts", "")),
		call(deploy.FnHold, "dynamodb:PutItem", permissions.Resource{Kind: permissions.KindUnknown, Name: "onejob-prod-attempts"}),
		call(deploy.FnSweeper, "dynamodb:BatchGetItem", table("jobs", "")),
		call(deploy.FnSweeper, "states:StartExecution", permissions.Resource{Kind: permissions.KindStateMachine}),
		call(deploy.FnNotify, "dynamodb:GetItem", table("jobs", "")),
		call(deploy.FnEvents, "dynamodb:UpdateItem", table("jobs", "")),
		call(deploy.FnStream, "dynamodb:GetItem", table("jobs", "")),
	}
	rep, err := Check([]*Template{tmpl}, calls, 1)
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	for _, d := range rep.Denied {
		denied = append(denied, d.Call.String()+" — "+d.Why)
	}
	want := []string{
		"api: dynamodb:Query on table:jobs/index/by_open — no statement of its role allows it",
		"api: dynamodb:BatchGetItem on table:jobs — no statement of its role allows it",
		"run: dynamodb:GetItem on table:attempts — denied by dynamodb:GetItem on table:attempts",
		"hold: dynamodb:PutItem on unknown:onejob-prod-attempts — it names no resource of this stack",
		"sweeper: states:StartExecution on statemachine — no statement of its role allows it",
	}
	if strings.Join(denied, "\n") != strings.Join(want, "\n") {
		t.Errorf("denied:\n%s\nwant:\n%s", strings.Join(denied, "\n"), strings.Join(want, "\n"))
	}
	if want := (Unexercised{Function: deploy.FnAPI, Action: "states:StartExecution", Resource: "statemachine",
		Templates: []string{"onejob-test"}}); len(rep.Unexercised) != 1 || !reflect.DeepEqual(rep.Unexercised[0], want) {
		t.Errorf("unexercised: %+v, want %+v", rep.Unexercised, want)
	}
	if len(rep.Platform) != 2 || len(rep.Silent) != 0 || !rep.Failed() {
		t.Errorf("platform %v, silent %v, failed %v", rep.Platform, rep.Silent, rep.Failed())
	}
	var out strings.Builder
	rep.Write(&out)
	if !strings.Contains(out.String(), "FAIL: onejob-test: api: dynamodb:Query on table:jobs/index/by_open is not granted") {
		t.Errorf("report does not name the missing grant:\n%s", out.String())
	}
}

// TestCheckPasses: with every call granted the check passes; a function
// without any recorded call fails it (the recording would be vacuous).
func TestCheckPasses(t *testing.T) {
	t.Parallel()
	grants := map[string][]any{}
	var calls []awscalls.Recorded
	for _, fn := range deploy.Names() {
		grants[fn] = []any{allow("dynamodb:GetItem", jobsArn)}
		calls = append(calls, call(fn, "dynamodb:GetItem", table("jobs", "")))
	}
	tmpl := fixture(t, grants)
	rep, err := Check([]*Template{tmpl}, calls, 4)
	if err != nil || rep.Failed() || len(rep.Unexercised) != 0 {
		t.Fatalf("rep %+v err %v", rep, err)
	}
	rep, err = Check([]*Template{tmpl}, calls[1:], 3)
	if err != nil || !rep.Failed() || len(rep.Silent) != 1 || rep.Silent[0] != deploy.Names()[0] {
		t.Fatalf("without %s's calls: %+v, %v", deploy.Names()[0], rep, err)
	}
	if rep, _ := Check(nil, calls, 4); !rep.Failed() {
		t.Error("no template passed")
	}
}

func TestWildcard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"dynamodb:*", "dynamodb:getitem", true},
		{"dynamodb:get*", "dynamodb:getitem", true},
		{"dynamodb:get?tem", "dynamodb:getitem", true},
		{"dynamodb:getitem", "dynamodb:getitems", false},
		{"dynamodb:table/onejob-*", "dynamodb:table/onejob-jobs/index/by_open", true},
		{"dynamodb:table/onejob-jobs", "dynamodb:table/onejob-jobs/index/by_open", false},
		{"", "", true},
	} {
		if got := wildcard(tc.pattern, tc.s); got != tc.want {
			t.Errorf("wildcard(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

// TestForbiddenGrants (review L5): a template whose API role may put a
// job item fails the check, whether its statement names the action or a
// wildcard covers it, conditioned or not, and whether or not any call used
// it; the same template without it passes.
func TestForbiddenGrants(t *testing.T) {
	t.Parallel()
	var calls []awscalls.Recorded
	for _, fn := range deploy.Names() {
		calls = append(calls, call(fn, "dynamodb:GetItem", table("jobs", "")))
	}
	with := func(api ...any) map[string][]any {
		g := map[string][]any{}
		for _, fn := range deploy.Names() {
			g[fn] = []any{allow("dynamodb:GetItem", jobsArn)}
		}
		g[deploy.FnAPI] = append(g[deploy.FnAPI], api...)
		return g
	}
	narrowed := allow("dynamodb:PutItem", jobsArn)
	narrowed["Condition"] = map[string]any{"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": []any{"id"}}}
	for _, tc := range []struct {
		name      string
		api       []any
		forbidden bool
	}{
		{"None", nil, false},
		{"UpdateOnly", []any{allow("dynamodb:UpdateItem", jobsArn)}, false},
		{"PutItem", []any{allow("dynamodb:PutItem", jobsArn)}, true},
		{"Wildcard", []any{allow("dynamodb:*", map[string]any{"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/onejob-test-*"})}, true},
		{"Narrowed", []any{narrowed}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep, err := Check([]*Template{fixture(t, with(tc.api...))}, calls, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(rep.Forbidden) > 0; got != tc.forbidden || rep.Failed() != tc.forbidden {
				t.Fatalf("forbidden %v, failed %v; want %v", rep.Forbidden, rep.Failed(), tc.forbidden)
			}
			var out strings.Builder
			rep.Write(&out)
			if tc.forbidden && !strings.Contains(out.String(), "FAIL: forbidden grant: onejob-test: api may dynamodb:PutItem on table:jobs") {
				t.Errorf("the report does not name the forbidden grant:\n%s", out.String())
			}
		})
	}
}

// TestNarrowedWrites (review L5): a statement that holds
// dynamodb:Attributes to a list allows an item write naming only those;
// one naming another is denied, and the report names it.
func TestNarrowedWrites(t *testing.T) {
	t.Parallel()
	grants := map[string][]any{}
	var calls []awscalls.Recorded
	for _, fn := range deploy.Names() {
		grants[fn] = []any{allow("dynamodb:GetItem", jobsArn)}
		calls = append(calls, call(fn, "dynamodb:GetItem", table("jobs", "")))
	}
	narrowed := allow("dynamodb:UpdateItem", jobsArn)
	narrowed["Condition"] = map[string]any{"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": []any{"dispatched", "id", "revision"}}}
	grants[deploy.FnNotify] = append(grants[deploy.FnNotify], narrowed)
	write := func(attributes string) awscalls.Recorded {
		c := call(deploy.FnNotify, "dynamodb:UpdateItem", table("jobs", ""))
		c.Attributes = attributes
		return c
	}
	rep, err := Check([]*Template{fixture(t, grants)}, append(calls, write("dispatched,id,revision"), write("id,revision,status")), 1)
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	for _, d := range rep.Denied {
		denied = append(denied, d.Call.String()+" — "+d.Why)
	}
	want := "notify: dynamodb:UpdateItem on table:jobs naming id,revision,status — its role's dynamodb:UpdateItem on table:jobs " +
		"may name only dispatched,id,revision, not status"
	if len(denied) != 1 || denied[0] != want {
		t.Errorf("denied %v, want [%s]", denied, want)
	}
	if len(rep.Conditional) != 0 {
		t.Errorf("an evaluated condition is reported as not evaluated: %v", rep.Conditional)
	}
}
