// Package iamcheck checks the AWS calls the functions' code made in the
// end-to-end suites (recorded by internal/dev/awscalls) against each
// function's IAM statements in the synthesized CloudFormation templates —
// the policy documents CloudFormation deploys, with their ARNs, Ref,
// Fn::GetAtt, Fn::Join and Fn::Sub resolved to the tables, indexes, state
// machine, secret and functions they name. A call no statement allows fails
// the check, naming the function, the action and the resource; a statement
// no call exercised is reported. `make test` runs it (cmd/iamcheck) after
// every suite.
package iamcheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
)

// EnvTemplatesDir names the folder infra/stack's tests write every
// environment's synthesized template to, for this check.
const EnvTemplatesDir = "ONEJOB_TEMPLATES_DIR"

// templateExt ends every template file's name (onejob-dev.template.json).
const templateExt = ".template.json"

// Template is one synthesized stack's template.
type Template struct {
	// Name is the stack's (onejob-dev).
	Name      string
	resources map[string]resource
	// arns are the ARNs of the stack's resources the naming knows, by
	// symbolic name (permissions.Resource.String()).
	arns map[string]string
	// roles maps a role's logical ID to the function it belongs to.
	roles map[string]string
}

type resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
}

// LoadTemplates reads every template in dir.
func LoadTemplates(dir string) ([]*Template, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*"+templateExt))
	if err != nil {
		return nil, err
	}
	var out []*Template
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		t, err := ParseTemplate(strings.TrimSuffix(filepath.Base(p), templateExt), b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// ParseTemplate reads one template.
func ParseTemplate(name string, b []byte) (*Template, error) {
	var doc struct {
		Resources map[string]resource `json:"Resources"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Resources) == 0 {
		return nil, fmt.Errorf("no resources")
	}
	t := &Template{Name: name, resources: doc.Resources, arns: map[string]string{}, roles: map[string]string{}}
	return t, t.index()
}

// index finds the functions' roles and the ARNs of the resources the
// naming knows.
func (t *Template) index() error {
	for _, f := range deploy.Functions() {
		r, ok := t.resources[f.LogicalID]
		if !ok || r.Type != "AWS::Lambda::Function" {
			return fmt.Errorf("no function %s (%s)", f.Name, f.LogicalID)
		}
		role, ok := getAtt(r.Properties["Role"], "Arn")
		if !ok {
			return fmt.Errorf("function %s: role %v is not a role of this template", f.Name, r.Properties["Role"])
		}
		t.roles[role] = f.Name
		t.arns[permissions.Resource{Kind: permissions.KindFunction, Name: f.Name}.String()] = t.arnOf(f.LogicalID)
		// The providers secret is whatever the run function is told to
		// read: a secret of this stack, or one an environment brings.
		if env, _ := r.Properties["Environment"].(map[string]any); env != nil {
			if v, ok := asMap(env["Variables"])[deploy.EnvProvidersSecretARN]; ok {
				t.arns[permissions.Resource{Kind: permissions.KindProvidersSecret}.String()] = t.render(v)
			}
		}
	}
	for id, r := range t.resources {
		switch r.Type {
		case "AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table":
			name, _ := r.Properties["TableName"].(string)
			i := slices.IndexFunc(dynamo.Tables(), func(d dynamo.TableDef) bool { return strings.HasSuffix(name, "-"+d.Logical) })
			if i < 0 {
				continue
			}
			def := dynamo.Tables()[i]
			arn := t.arnOf(id)
			t.arns[permissions.Resource{Kind: permissions.KindTable, Name: def.Logical}.String()] = arn
			for _, ix := range def.Indexes {
				t.arns[permissions.Resource{Kind: permissions.KindTable, Name: def.Logical, Index: ix.Name}.String()] = arn + "/index/" + ix.Name
			}
		case "AWS::StepFunctions::StateMachine":
			t.arns[permissions.Resource{Kind: permissions.KindStateMachine}.String()] = t.arnOf(id)
		case "AWS::KMS::Key":
			t.arns[permissions.Resource{Kind: permissions.KindSecretsKey}.String()] = t.arnOf(id)
		}
	}
	return nil
}

// ARN is the ARN a call's resource has in this stack, if it has one.
func (t *Template) ARN(r permissions.Resource) (string, bool) {
	if r.Kind == permissions.KindModel && r.Name != "" {
		return "arn:aws:bedrock:" + pseudoRegion + "::foundation-model/" + r.Name, true
	}
	arn, ok := t.arns[r.String()]
	return arn, ok
}

// symbolic names an ARN as the report does: the stack's resource it is, or
// the ARN itself.
func (t *Template) symbolic(arn string) string {
	for name, a := range t.arns {
		if arnKey(a) == arnKey(arn) {
			return name
		}
	}
	return arn
}

// Pseudo parameters render as these; matching ignores an ARN's region and
// account (one template is one stack in one account and region).
const (
	pseudoRegion  = "{region}"
	pseudoAccount = "{account}"
)

// arnOf is the ARN of one of the template's resources, as Fn::GetAtt Arn
// (or Ref, for the types whose Ref is their ARN) gives it.
func (t *Template) arnOf(id string) string {
	r, ok := t.resources[id]
	if !ok {
		return unresolved("resource " + id)
	}
	name := func(prop string) string {
		if s, ok := r.Properties[prop].(string); ok {
			return s
		}
		return id
	}
	prefix := func(service string) string {
		return "arn:aws:" + service + ":" + pseudoRegion + ":" + pseudoAccount + ":"
	}
	switch r.Type {
	case "AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table":
		return prefix("dynamodb") + "table/" + name("TableName")
	case "AWS::Lambda::Function":
		return prefix("lambda") + "function:" + name("FunctionName")
	case "AWS::StepFunctions::StateMachine":
		return prefix("states") + "stateMachine:" + name("StateMachineName")
	case "AWS::SecretsManager::Secret":
		// No physical name: the ARN ends in a random suffix anyway.
		return prefix("secretsmanager") + "secret:" + id
	case "AWS::IAM::Role":
		return "arn:aws:iam::" + pseudoAccount + ":role/" + name("RoleName")
	}
	return unresolved(r.Type + " " + id)
}

// refTypes are the types whose Ref is their ARN; a table's or function's
// Ref is its name.
var refTypes = []string{"AWS::StepFunctions::StateMachine", "AWS::SecretsManager::Secret", "AWS::SNS::Topic"}

// render turns a policy's resource value into the string CloudFormation
// would deploy, with the stack's own resources as arnOf names them.
func (t *Template) render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			return t.ref(ref)
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			id, _ := ga[0].(string)
			if ga[1] == "Arn" {
				return t.arnOf(id)
			}
			return unresolved(fmt.Sprintf("Fn::GetAtt %s.%v", id, ga[1]))
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			parts, _ := j[1].([]any)
			var out []string
			for _, p := range parts {
				out = append(out, t.render(p))
			}
			return strings.Join(out, sep)
		}
		if sub, ok := x["Fn::Sub"]; ok {
			return t.sub(sub)
		}
	}
	b, _ := json.Marshal(v)
	return unresolved(string(b))
}

func (t *Template) ref(id string) string {
	switch id {
	case "AWS::Partition":
		return "aws"
	case "AWS::Region":
		return pseudoRegion
	case "AWS::AccountId":
		return pseudoAccount
	case "AWS::URLSuffix":
		return "amazonaws.com"
	}
	if r, ok := t.resources[id]; ok && slices.Contains(refTypes, r.Type) {
		return t.arnOf(id)
	}
	return unresolved("Ref " + id)
}

var subVar = regexp.MustCompile(`\$\{([^!}][^}]*)\}`)

func (t *Template) sub(v any) string {
	body, vars := "", map[string]any{}
	switch x := v.(type) {
	case string:
		body = x
	case []any:
		if len(x) == 2 {
			body, _ = x[0].(string)
			vars = asMap(x[1])
		}
	}
	out := subVar.ReplaceAllStringFunc(body, func(m string) string {
		key := m[2 : len(m)-1]
		if val, ok := vars[key]; ok {
			return t.render(val)
		}
		if id, attr, ok := strings.Cut(key, "."); ok {
			return t.render(map[string]any{"Fn::GetAtt": []any{id, attr}})
		}
		return t.ref(key)
	})
	return strings.ReplaceAll(out, "${!", "${")
}

// unresolved marks what the check cannot read; it matches no call.
func unresolved(what string) string { return unresolvedMark + what }

const unresolvedMark = "?unresolved: "

func getAtt(v any, attr string) (string, bool) {
	ga, ok := asMap(v)["Fn::GetAtt"].([]any)
	if !ok || len(ga) != 2 || ga[1] != attr {
		return "", false
	}
	id, ok := ga[0].(string)
	return id, ok
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// list also takes a single value where IAM allows one.
func list(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}
