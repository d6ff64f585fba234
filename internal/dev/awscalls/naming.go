// Package awscalls records the AWS API calls each function's code makes
// locally — as IAM actions on the stack's resources, named as
// infra/permissions names them — so that `make test` can check every one of
// them against that function's statements in the synthesized template
// (internal/verify/iamcheck). The local stack tags each function's SDK
// clients with a middleware (Recorder.APIOption); `make invoke`'s recording
// proxy names what the real bootstraps send (CallsOfTarget). Both name calls
// here, the one place that knows how an API call names its resources.
package awscalls

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/dynamo"
)

// Call is one AWS API call a function made: an IAM action on a resource.
type Call struct {
	Function string
	Action   string
	Resource permissions.Resource
	// Attributes are the top-level item attributes a DynamoDB item write
	// (PutItem, UpdateItem) names, sorted and comma-separated: what IAM's
	// dynamodb:Attributes condition key holds for it. Empty for other
	// calls.
	Attributes string
}

func (c Call) String() string {
	s := c.Action + " on " + c.Resource.String()
	if c.Function != "" {
		s = c.Function + ": " + s
	}
	if c.Attributes != "" {
		s += " naming " + c.Attributes
	}
	return s
}

// AttributeList is Attributes as a list.
func (c Call) AttributeList() []string {
	if c.Attributes == "" {
		return nil
	}
	return strings.Split(c.Attributes, ",")
}

// Names says which physical resources of one local deployment are which of
// the stack's: the same calls are then named alike locally and in AWS.
type Names struct {
	// TablePrefix: every table is "<prefix>-<logical>" (dynamo.NamesWithPrefix).
	TablePrefix string
	// StateMachineARN is the stack's state machine.
	StateMachineARN string
	// SecretARN is the providers secret, if any is served locally.
	SecretARN string
	// SecretsKeyARN is the webhook secrets' KMS key, if one is used.
	SecretsKeyARN string
	// Functions maps what a caller names a function by (its ARN or name)
	// to its name in deploy.Functions.
	Functions map[string]string
}

// service is what the naming knows of one AWS service.
type service struct {
	// iam is the IAM action prefix.
	iam string
	// sdkID is aws-sdk-go-v2's ServiceID (the middleware's view).
	sdkID string
	// target prefixes the X-Amz-Target header of its JSON-protocol
	// requests (the recording proxy's view); empty for REST protocols.
	target string
	// actions holds the operations whose IAM action is named otherwise.
	actions map[string]string
	// resources names what an operation acts on; an action set here
	// replaces the operation's (a transaction's items).
	resources func(n Names, op string, in Input) []Call
}

// services is every service a function may call. A service missing here is
// recorded as an unknown action on an unknown resource, which no statement
// grants: the check then names it, and it is added here.
var services = []service{
	{iam: "dynamodb", sdkID: "DynamoDB", target: "DynamoDB_", resources: dynamoResources},
	{iam: "states", sdkID: "SFN", target: "AWSStepFunctions", resources: func(n Names, _ string, in Input) []Call {
		return []Call{{Resource: n.stateMachine(in.Str("StateMachineArn"))}}
	}},
	{iam: "secretsmanager", sdkID: "Secrets Manager", target: "secretsmanager", resources: func(n Names, _ string, in Input) []Call {
		return []Call{{Resource: n.secret(in.Str("SecretId"))}}
	}},
	{iam: "kms", sdkID: "KMS", target: "TrentService", resources: func(n Names, _ string, in Input) []Call {
		return []Call{{Resource: n.secretsKey(in.Str("KeyId"))}}
	}},
	{iam: "lambda", sdkID: "Lambda", actions: map[string]string{"Invoke": "InvokeFunction", "InvokeWithResponseStream": "InvokeFunction"},
		resources: func(n Names, _ string, in Input) []Call {
			return []Call{{Resource: n.function(in.Str("FunctionName"))}}
		}},
	// A bedrock provider of the run function: IAM names Converse after the
	// model invocation it is.
	{iam: "bedrock", sdkID: "Bedrock Runtime",
		actions: map[string]string{"Converse": "InvokeModel", "ConverseStream": "InvokeModelWithResponseStream"},
		resources: func(_ Names, _ string, in Input) []Call {
			return []Call{{Resource: permissions.Resource{Kind: permissions.KindModel, Name: in.Str("ModelId")}}}
		}},
}

// CallsOf names one SDK call of fn's: the service's ServiceID, the
// operation and its typed input.
func (n Names) CallsOf(fn, sdkID, op string, input any) []Call {
	i := slices.IndexFunc(services, func(s service) bool { return s.sdkID == sdkID })
	if i < 0 {
		return []Call{unknownService(fn, strings.ToLower(strings.ReplaceAll(sdkID, " ", "")), op)}
	}
	return n.calls(fn, services[i], op, GoInput(input))
}

// CallsOfTarget names one JSON-protocol request of fn's by its X-Amz-Target
// header (e.g. DynamoDB_20120810.GetItem) and body.
func (n Names) CallsOfTarget(fn, target string, body []byte) []Call {
	prefix, op, _ := strings.Cut(target, ".")
	i := slices.IndexFunc(services, func(s service) bool { return s.target != "" && strings.HasPrefix(prefix, s.target) })
	if i < 0 || op == "" {
		return []Call{unknownService(fn, strings.ToLower(prefix), op)}
	}
	var doc map[string]any
	_ = json.Unmarshal(body, &doc)
	return n.calls(fn, services[i], op, JSONInput(doc))
}

// Action is the IAM action of a JSON-protocol request's X-Amz-Target, or
// empty when the header names no operation.
func Action(target string) string {
	prefix, op, ok := strings.Cut(target, ".")
	if !ok || op == "" {
		return ""
	}
	if i := slices.IndexFunc(services, func(s service) bool { return s.target != "" && strings.HasPrefix(prefix, s.target) }); i >= 0 {
		return services[i].action(op)
	}
	return strings.ToLower(prefix) + ":" + op
}

func (s service) action(op string) string {
	if a, ok := s.actions[op]; ok {
		op = a
	}
	return s.iam + ":" + op
}

func (n Names) calls(fn string, s service, op string, in Input) []Call {
	out := s.resources(n, op, in)
	for i := range out {
		out[i].Function = fn
		if out[i].Action == "" {
			out[i].Action = s.action(op)
		}
	}
	return out
}

func unknownService(fn, prefix, op string) Call {
	return Call{Function: fn, Action: prefix + ":" + op, Resource: permissions.Resource{Kind: permissions.KindUnknown}}
}

// transactActions: IAM governs a transaction's items by the single-item
// actions they are (DynamoDB developer guide, "Using IAM with DynamoDB
// transactions").
var transactActions = []struct{ member, action string }{
	{"ConditionCheck", "dynamodb:ConditionCheckItem"}, {"Put", "dynamodb:PutItem"},
	{"Update", "dynamodb:UpdateItem"}, {"Delete", "dynamodb:DeleteItem"}, {"Get", "dynamodb:GetItem"},
}

func dynamoResources(n Names, op string, in Input) []Call {
	if t := in.Str("TableName"); t != "" {
		return []Call{{Resource: n.table(t, in.Str("IndexName")), Attributes: itemAttributes(op, in)}}
	}
	var out []Call
	// BatchGetItem, BatchWriteItem: the tables are the keys.
	for _, t := range in.Keys("RequestItems") {
		out = append(out, Call{Resource: n.table(t, "")})
	}
	// TransactWriteItems, TransactGetItems.
	for _, item := range in.List("TransactItems") {
		for _, ta := range transactActions {
			if m := item.Member(ta.member); m != nil {
				out = append(out, Call{Action: ta.action, Resource: n.table(m.Str("TableName"), ""),
					Attributes: itemAttributes(strings.TrimPrefix(ta.action, "dynamodb:"), m)})
			}
		}
	}
	if len(out) == 0 {
		out = append(out, Call{Resource: permissions.Resource{Kind: permissions.KindUnknown}})
	}
	return out
}

// itemAttributes are the top-level attributes an item write names, as IAM's
// dynamodb:Attributes reads them: a PutItem's item's; an UpdateItem's
// key's and those its update and condition expressions name (the latter
// counted too, so the check is never more lenient than IAM).
func itemAttributes(op string, in Input) string {
	var names []string
	switch op {
	case "PutItem":
		names = in.Keys("Item")
	case "UpdateItem":
		names = in.Keys("Key")
		placeholders := in.StrMap("ExpressionAttributeNames")
		for _, expr := range []string{in.Str("UpdateExpression"), in.Str("ConditionExpression")} {
			names = append(names, TopLevelNames(expr, placeholders)...)
		}
	default:
		return ""
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// expressionWords are an expression's keywords and functions: no
// attribute is named so.
var expressionWords = map[string]bool{"SET": true, "REMOVE": true, "ADD": true, "DELETE": true, "AND": true, "OR": true,
	"NOT": true, "BETWEEN": true, "IN": true}

// TopLevelNames are the attributes an expression names at the top level
// of a document path: each path's first name (a #placeholder resolved
// through placeholders, or a bare name), never what follows a '.' or a
// '[' nor a function's name or a :value.
func TopLevelNames(expr string, placeholders map[string]string) []string {
	var out []string
	word := func(i int) int {
		j := i
		for j < len(expr) && (expr[j] == '_' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' ||
			expr[j] >= '0' && expr[j] <= '9') {
			j++
		}
		return j
	}
	prev := byte(' ') // the last character that is not a space
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
			continue
		case c == '#' || c == ':' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			start := i
			if c == '#' || c == ':' {
				i++
			}
			j := word(i)
			tok := expr[start:j]
			rest := strings.TrimLeft(expr[j:], " ")
			nested := prev == '.'
			switch {
			case c == ':' || nested:
			case c == '#':
				if name, ok := placeholders[tok]; ok {
					out = append(out, name)
				} else {
					out = append(out, tok)
				}
			case !expressionWords[strings.ToUpper(tok)] && !strings.HasPrefix(rest, "("):
				out = append(out, tok)
			}
			i, prev = j, expr[j-1]
			continue
		case c == '[':
			// A list index: skip to its end.
			if k := strings.IndexByte(expr[i:], ']'); k > 0 {
				i += k + 1
				prev = ']'
				continue
			}
		}
		prev = c
		i++
	}
	return out
}

func (n Names) table(physical, index string) permissions.Resource {
	logical, ok := strings.CutPrefix(physical, n.TablePrefix+"-")
	if !ok || n.TablePrefix == "" || !slices.ContainsFunc(dynamo.Tables(), func(d dynamo.TableDef) bool { return d.Logical == logical }) {
		return unknown(physical)
	}
	return permissions.Resource{Kind: permissions.KindTable, Name: logical, Index: index}
}

func (n Names) stateMachine(arn string) permissions.Resource {
	if arn == "" || arn != n.StateMachineARN {
		return unknown(arn)
	}
	return permissions.Resource{Kind: permissions.KindStateMachine}
}

func (n Names) secret(id string) permissions.Resource {
	if id == "" || id != n.SecretARN {
		return unknown(id)
	}
	return permissions.Resource{Kind: permissions.KindProvidersSecret}
}

func (n Names) secretsKey(id string) permissions.Resource {
	if id == "" || id != n.SecretsKeyARN {
		return unknown(id)
	}
	return permissions.Resource{Kind: permissions.KindSecretsKey}
}

func (n Names) function(id string) permissions.Resource {
	if fn, ok := n.Functions[id]; ok && id != "" {
		return permissions.Resource{Kind: permissions.KindFunction, Name: fn}
	}
	return unknown(id)
}

func unknown(id string) permissions.Resource {
	return permissions.Resource{Kind: permissions.KindUnknown, Name: id}
}

// Input is an API call's input as the naming reads it: the SDK's typed input
// (GoInput) or the body of a JSON-protocol request (JSONInput), which name
// their members alike (TableName, RequestItems, StateMachineArn, …).
type Input interface {
	// Str is a string member, or empty.
	Str(member string) string
	// Keys are a map member's keys, sorted.
	Keys(member string) []string
	// List is a list member's elements.
	List(member string) []Input
	// Member is a structure member, or nil.
	Member(member string) Input
	// StrMap is a map member of strings.
	StrMap(member string) map[string]string
}

// GoInput reads an SDK input struct (or a pointer to one).
func GoInput(v any) Input {
	in, ok := goValue(reflect.ValueOf(v))
	if !ok {
		return JSONInput(nil)
	}
	return in
}

type goInput struct{ v reflect.Value }

func goValue(v reflect.Value) (goInput, bool) {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) {
		if v.IsNil() {
			return goInput{}, false
		}
		v = v.Elem()
	}
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return goInput{}, false
	}
	return goInput{v}, true
}

func (g goInput) field(name string) reflect.Value {
	f := g.v.FieldByName(name)
	for f.IsValid() && f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return reflect.Value{}
		}
		f = f.Elem()
	}
	return f
}

func (g goInput) Str(member string) string {
	if f := g.field(member); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

func (g goInput) Keys(member string) []string {
	f := g.field(member)
	if !f.IsValid() || f.Kind() != reflect.Map || f.Type().Key().Kind() != reflect.String {
		return nil
	}
	var out []string
	for _, k := range f.MapKeys() {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

func (g goInput) List(member string) []Input {
	f := g.field(member)
	if !f.IsValid() || f.Kind() != reflect.Slice {
		return nil
	}
	var out []Input
	for i := range f.Len() {
		if e, ok := goValue(f.Index(i)); ok {
			out = append(out, e)
		}
	}
	return out
}

func (g goInput) StrMap(member string) map[string]string {
	f := g.field(member)
	if !f.IsValid() || f.Kind() != reflect.Map || f.Type().Key().Kind() != reflect.String || f.Type().Elem().Kind() != reflect.String {
		return nil
	}
	out := map[string]string{}
	for _, k := range f.MapKeys() {
		out[k.String()] = f.MapIndex(k).String()
	}
	return out
}

func (g goInput) Member(member string) Input {
	if m, ok := goValue(g.field(member)); ok {
		return m
	}
	return nil
}

// JSONInput reads a decoded JSON object.
func JSONInput(doc map[string]any) Input { return jsonInput(doc) }

type jsonInput map[string]any

// get finds a member as the wire names it: Step Functions' JSON spells
// members in lower camel case (stateMachineArn), DynamoDB's as the SDK does.
func (j jsonInput) get(member string) any {
	if v, ok := j[member]; ok {
		return v
	}
	for k, v := range j {
		if strings.EqualFold(k, member) {
			return v
		}
	}
	return nil
}

func (j jsonInput) Str(member string) string {
	s, _ := j.get(member).(string)
	return s
}

func (j jsonInput) Keys(member string) []string {
	m, _ := j.get(member).(map[string]any)
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (j jsonInput) List(member string) []Input {
	l, _ := j.get(member).([]any)
	var out []Input
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, jsonInput(m))
		}
	}
	return out
}

func (j jsonInput) StrMap(member string) map[string]string {
	m, _ := j.get(member).(map[string]any)
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func (j jsonInput) Member(member string) Input {
	if m, ok := j.get(member).(map[string]any); ok {
		return jsonInput(m)
	}
	return nil
}
