package jobtype_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
)

func load(t *testing.T) *jobtype.Catalog {
	t.Helper()
	c, err := jobtype.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func get(t *testing.T, c *jobtype.Catalog, name string) *jobtype.Type {
	t.Helper()
	ty, ok := c.Get(name)
	if !ok {
		t.Fatalf("no job type %q", name)
	}
	return ty
}

// variantFS copies the on-disk types and cases and lets mutate edit one
// type's JSON document (a nil result deletes the file).
func variantFS(t *testing.T, typeName string, mutate func(doc map[string]any) map[string]any) fstest.MapFS {
	t.Helper()
	src := os.DirFS(".")
	out := fstest.MapFS{}
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") || !(strings.HasPrefix(p, "types/") || strings.HasPrefix(p, "cases/")) {
			return err
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		if p == "types/"+typeName+".json" && mutate != nil {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				return err
			}
			doc = mutate(doc)
			if doc == nil {
				return nil
			}
			if data, err = json.Marshal(doc); err != nil {
				return err
			}
		}
		out[p] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func loadVariant(t *testing.T, typeName string, mutate func(doc map[string]any) map[string]any) (*jobtype.Type, error) {
	t.Helper()
	c, err := jobtype.LoadFS(variantFS(t, typeName, mutate))
	if err != nil {
		return nil, err
	}
	return get(t, c, typeName), nil
}

func TestLoadPolicy(t *testing.T) {
	t.Parallel()
	c := load(t)
	if got := c.Names(); !reflect.DeepEqual(got, []string{"demo", "demo-async", "demo-batch", "demo-batch-claude", "demo-flex", "demo-hedge", "demo-hook-async", "demo-stream", "ticket-triage"}) {
		t.Fatalf("Names = %v", got)
	}
	tests := []struct {
		name        string
		providers   []string
		timeout     time.Duration
		hedge       time.Duration
		hasHedge    bool
		maxAttempts int
	}{
		{"demo", []string{"sim-primary", "sim-fallback"}, 2 * time.Second, 0, false, 3},
		{"demo-hedge", []string{"sim-primary", "sim-fallback"}, 15 * time.Second, 500 * time.Millisecond, true, 3},
		{"demo-async", []string{"sim-async"}, 10 * time.Second, 0, false, 2},
		{"demo-hook-async", []string{"sim-hook-async"}, 10 * time.Second, 0, false, 2},
		{"demo-stream", []string{"sim-primary", "sim-fallback"}, 15 * time.Second, 0, false, 3},
		{"ticket-triage", []string{"openai-primary", "anthropic-fallback"}, 20 * time.Second, 0, false, 3},
	}
	for _, tc := range tests {
		ty := get(t, c, tc.name)
		hedge, ok := ty.HedgeAfter()
		if !reflect.DeepEqual(ty.Providers(), tc.providers) || ty.Timeout() != tc.timeout || hedge != tc.hedge || ok != tc.hasHedge || ty.MaxAttempts() != tc.maxAttempts {
			t.Errorf("%s: providers %v timeout %v hedge %v/%v attempts %d", tc.name, ty.Providers(), ty.Timeout(), hedge, ok, ty.MaxAttempts())
		}
		if ty.Temperature() != 0 || ty.MaxOutputTokens() <= 0 || ty.Version() != 1 || ty.Description() == "" {
			t.Errorf("%s: temperature %v max tokens %d version %d", tc.name, ty.Temperature(), ty.MaxOutputTokens(), ty.Version())
		}
	}
	if _, ok := c.Get("nope"); ok {
		t.Error("Get(nope) found a type")
	}
	if got := c.ProviderNames(); !reflect.DeepEqual(got, []string{"anthropic-fallback", "openai-primary", "sim-async", "sim-batch-anthropic", "sim-batch-openai", "sim-fallback", "sim-flex", "sim-hook-async", "sim-primary"}) {
		t.Errorf("ProviderNames = %v", got)
	}
	var names []string
	for _, cs := range c.Cases("ticket-triage") {
		names = append(names, cs.Name)
	}
	if !reflect.DeepEqual(names, []string{"billing-refund", "feature-request", "outage", "password-reset"}) {
		t.Errorf("ticket-triage cases = %v", names)
	}
	if got := get(t, c, "demo-async").Tier(); got != job.TierNow {
		t.Errorf("demo-async tier %s", got)
	}
	if got := get(t, c, "demo-async").MaxTier(); got != job.TierFlex8h {
		t.Errorf("demo-async max tier %s", got)
	}
	if got, most := get(t, c, "demo").Tier(), get(t, c, "demo").MaxTier(); got != job.TierNow || most != job.TierNow {
		t.Errorf("demo's tier and max tier (none declared) %s, %s", got, most)
	}
	if c.Cases("nope") != nil {
		t.Error("Cases(nope) is not nil")
	}
}

func TestValidateInput(t *testing.T) {
	t.Parallel()
	c := load(t)
	tests := []struct {
		name  string
		typ   string
		input string
		want  []jobtype.FieldError
	}{
		{"ValidTicket", "ticket-triage", `{"subject":"s","body":"b"}`, nil},
		{"MissingBody", "ticket-triage", `{"subject":"s"}`, []jobtype.FieldError{{Pointer: "", Message: "missing property 'body'"}}},
		{"WrongTypeAndEmpty", "ticket-triage", `{"subject":"","body":5}`, []jobtype.FieldError{
			{Pointer: "/body", Message: "got number, want string"},
			{Pointer: "/subject", Message: "minLength: got 0, want 1"},
		}},
		{"UnknownKey", "ticket-triage", `{"subject":"s","body":"b","urgent":true}`, []jobtype.FieldError{{Pointer: "/urgent", Message: `unknown key "urgent" is not allowed`}}},
		{"NotJSON", "ticket-triage", `{"subject":`, []jobtype.FieldError{{Message: "input is not valid JSON: unexpected EOF"}}},
		{"Empty", "ticket-triage", ``, []jobtype.FieldError{{Message: "input is not valid JSON: empty document"}}},
		{"ValidDemo", "demo", `{"prompt":"p","simulate":{"sim-primary":{"latency_ms":10,"outcome":"timeout"}}}`, nil},
		{"DemoBadOutcome", "demo", `{"prompt":"p","simulate":{"sim-primary":{"outcome":"explode"}}}`, []jobtype.FieldError{
			{Pointer: "/simulate/sim-primary/outcome", Message: "value must be one of 'ok', 'error', 'timeout', 'malformed', 'oversized'"},
		}},
		{"DemoNegativeLatency", "demo", `{"prompt":"p","simulate":{"sim-fallback":{"latency_ms":-1}}}`, []jobtype.FieldError{
			{Pointer: "/simulate/sim-fallback/latency_ms", Message: "minimum: got -1, want 0"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := get(t, c, tc.typ).ValidateInput(json.RawMessage(tc.input))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ValidateInput = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	c := load(t)
	ty := get(t, c, "ticket-triage")
	input := json.RawMessage(`{"subject":"Refund <now>","body":"Charged twice & more"}`)
	system, prompt, err := ty.Render(input)
	if err != nil {
		t.Fatal(err)
	}
	// text/template does not HTML-escape: the model sees the text as written.
	if prompt != "Subject: Refund <now>\n\nBody:\nCharged twice & more" || !strings.HasPrefix(system, "You triage") {
		t.Errorf("Render = %q, %q", system, prompt)
	}
	req, err := ty.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	// The attempt's identity is the caller's to add.
	if req.IdempotencyKey != "" || req.JobID != "" || req.JobType != "ticket-triage" || req.Prompt != prompt || req.MaxOutputTokens != 400 || len(req.OutputSchema) == 0 {
		t.Errorf("Request = %+v", req)
	}
	if _, _, err := ty.Render(json.RawMessage(`{"subject":"s"}`)); !errors.Is(err, jobtype.ErrRender) {
		t.Errorf("Render(missing body) = %v, want ErrRender", err)
	}
}

func TestCheckOutput(t *testing.T) {
	t.Parallel()
	c := load(t)
	ticket := get(t, c, "ticket-triage")
	tests := []struct {
		name   string
		output string
		want   []jobtype.Violation
	}{
		{"Valid", `{"category":"billing","priority":3,"summary":"Refund.","needs_human":false}`, nil},
		{"ExtraKey", `{"category":"billing","priority":3,"summary":"Refund.","needs_human":false,"confidence":0.9}`, []jobtype.Violation{
			{Pointer: "/confidence", Rule: "unknown_key", Message: `unknown key "confidence" is not allowed`},
		}},
		{"EnumAndRange", `{"category":"sales","priority":0,"summary":"x","needs_human":false}`, []jobtype.Violation{
			{Pointer: "/category", Rule: "schema", Message: "value must be one of 'billing', 'outage', 'account', 'bug', 'feature_request', 'other'"},
			{Pointer: "/priority", Rule: "schema", Message: "minimum: got 0, want 1"},
		}},
		{"SummaryTooLong", `{"category":"bug","priority":2,"summary":"` + strings.Repeat("x", 281) + `","needs_human":false}`, []jobtype.Violation{
			{Pointer: "/summary", Rule: "schema", Message: "maxLength: got 281, want 280"},
		}},
		{"MissingField", `{"category":"bug","priority":2,"summary":"s"}`, []jobtype.Violation{
			{Pointer: "", Rule: "schema", Message: "missing property 'needs_human'"},
		}},
		{"UrgentWithoutHuman", `{"category":"bug","priority":1,"summary":"Data loss.","needs_human":false}`, []jobtype.Violation{
			{Rule: "check:urgent_needs_human", Message: "priority 1 tickets must set needs_human to true"},
		}},
		{"LowPriorityOutageMultiline", `{"category":"outage","priority":3,"summary":"Down\nagain","needs_human":true}`, []jobtype.Violation{
			{Rule: "check:outage_is_urgent", Message: "outage tickets must have priority 1 or 2"},
			{Rule: "check:summary_single_line", Message: "summary must be a single line"},
		}},
		{"ExtraKeyAndSemantic", `{"category":"bug","priority":1,"summary":"s","needs_human":false,"why":"x"}`, []jobtype.Violation{
			{Pointer: "/why", Rule: "unknown_key", Message: `unknown key "why" is not allowed`},
			{Rule: "check:urgent_needs_human", Message: "priority 1 tickets must set needs_human to true"},
		}},
		{"Prose", `Sure! This is a billing ticket.`, []jobtype.Violation{
			{Rule: "json", Message: "output is not valid JSON: invalid character 'S' looking for beginning of value"},
		}},
		{"Array", `[1]`, []jobtype.Violation{{Rule: "schema", Message: "got array, want object"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ticket.CheckOutput(json.RawMessage(tc.output))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckOutput = %v", err)
				}
				return
			}
			var cv *jobtype.ContractViolationError
			if !errors.As(err, &cv) || !errors.Is(err, jobtype.ErrContractViolation) {
				t.Fatalf("CheckOutput = %v, want *ContractViolationError", err)
			}
			if !reflect.DeepEqual(cv.Violations, tc.want) {
				t.Errorf("violations =\n%#v\nwant\n%#v", cv.Violations, tc.want)
			}
		})
	}
}

// TestUnknownKeysRejectedWithoutAdditionalPropertiesFalse: a schema that
// forgot additionalProperties:false still rejects hallucinated keys.
func TestUnknownKeysRejectedWithoutAdditionalPropertiesFalse(t *testing.T) {
	t.Parallel()
	ty, err := loadVariant(t, "ticket-triage", func(doc map[string]any) map[string]any {
		delete(doc["output_schema"].(map[string]any), "additionalProperties")
		return doc
	})
	if err != nil {
		t.Fatal(err)
	}
	err = ty.CheckOutput(json.RawMessage(`{"category":"bug","priority":2,"summary":"s","needs_human":false,"reasoning":"x","confidence":1}`))
	var cv *jobtype.ContractViolationError
	if !errors.As(err, &cv) {
		t.Fatalf("CheckOutput = %v", err)
	}
	want := []jobtype.Violation{
		{Pointer: "/confidence", Rule: "unknown_key", Message: `unknown key "confidence" is not allowed (not in the output schema)`},
		{Pointer: "/reasoning", Rule: "unknown_key", Message: `unknown key "reasoning" is not allowed (not in the output schema)`},
	}
	if !reflect.DeepEqual(cv.Violations, want) {
		t.Errorf("violations = %#v", cv.Violations)
	}
}

// goldenContractVersions pins the contract versions. If this fails you
// changed a contract (schemas, checks, prompts): every provider must be
// re-certified for it. Update the value deliberately.
var goldenContractVersions = map[string]string{
	"demo":          "a22485d451ee513f",
	"demo-hedge":    "a22485d451ee513f",
	"demo-stream":   "47227424ca331487",
	"ticket-triage": "f91e2bbe9f7b08f4",
}

func TestContractVersionStable(t *testing.T) {
	t.Parallel()
	a, b := load(t), load(t)
	for name, want := range goldenContractVersions {
		if got := get(t, a, name).ContractVersion(); got != want || get(t, b, name).ContractVersion() != got {
			t.Errorf("%s: ContractVersion = %s, want %s", name, got, want)
		}
	}
}

func TestContractVersionChanges(t *testing.T) {
	t.Parallel()
	base := goldenContractVersions["ticket-triage"]
	schema := func(doc map[string]any, which string) map[string]any { return doc[which].(map[string]any) }
	props := func(doc map[string]any, which string) map[string]any {
		return schema(doc, which)["properties"].(map[string]any)
	}
	tests := []struct {
		name    string
		mutate  func(map[string]any)
		changes bool
	}{
		{"OutputSchemaMaxLength", func(d map[string]any) { props(d, "output_schema")["summary"].(map[string]any)["maxLength"] = 200 }, true},
		{"OutputSchemaNewEnumValue", func(d map[string]any) {
			cat := props(d, "output_schema")["category"].(map[string]any)
			cat["enum"] = append(cat["enum"].([]any), "security")
		}, true},
		{"InputSchema", func(d map[string]any) { props(d, "input_schema")["subject"].(map[string]any)["maxLength"] = 100 }, true},
		{"CheckExpr", func(d map[string]any) {
			d["checks"].([]any)[0].(map[string]any)["expr"] = "output.priority > 1 || output.needs_human"
		}, true},
		{"PromptTemplate", func(d map[string]any) { d["prompt_template"] = "Ticket: {{.subject}}\n{{.body}}" }, true},
		{"SystemPrompt", func(d map[string]any) { d["system_prompt"] = "Triage tickets." }, true},
		{"CheckMessageOnly", func(d map[string]any) { d["checks"].([]any)[0].(map[string]any)["message"] = "reworded" }, false},
		{"PolicyOnly", func(d map[string]any) {
			d["timeout"] = "30s"
			d["providers"] = []any{"bedrock-claude"}
			d["max_attempts"] = 5
		}, false},
		{"FormattingOnly", func(map[string]any) {}, false}, // variantFS re-encodes without whitespace
		{"StreamFieldOnly", func(d map[string]any) { delete(d, "stream_field") }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ty, err := loadVariant(t, "ticket-triage", func(doc map[string]any) map[string]any { tc.mutate(doc); return doc })
			if err != nil {
				t.Fatal(err)
			}
			if changed := ty.ContractVersion() != base; changed != tc.changes {
				t.Errorf("ContractVersion %s vs %s: changed = %v, want %v", ty.ContractVersion(), base, changed, tc.changes)
			}
		})
	}
}

func TestLoadRejectsInvalidTypes(t *testing.T) {
	t.Parallel()
	set := func(k string, v any) func(map[string]any) map[string]any {
		return func(d map[string]any) map[string]any { d[k] = v; return d }
	}
	tests := []struct {
		name   string
		mutate func(map[string]any) map[string]any
		want   string
	}{
		{"NameMismatch", set("name", "ticket-triage-2"), "must equal the file name"},
		{"UnknownField", set("retries", 3), `unknown field "retries"`},
		{"ZeroVersion", set("version", 0), "version must be >= 1"},
		{"OutputNotObject", set("output_schema", map[string]any{"type": "string"}), `root must be {"type": "object"`},
		{"InvalidSchemaKeyword", set("input_schema", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"minimum": "one"}}}), "input_schema"},
		{"NoOutputProperties", set("output_schema", map[string]any{"type": "object"}), "root must declare properties"},
		{"BadTemplate", set("prompt_template", "{{.subject"), "prompt_template"},
		{"CheckSyntax", set("checks", []any{map[string]any{"name": "x", "expr": "output.priority >", "message": "m"}}), "unexpected end of expression"},
		{"CheckNotBool", set("checks", []any{map[string]any{"name": "x", "expr": "1 + 1", "message": "m"}}), "must be boolean"},
		{"CheckUnknownVariable", set("checks", []any{map[string]any{"name": "x", "expr": "input.subject != ''", "message": "m"}}), "undeclared reference"},
		{"CheckWithoutMessage", set("checks", []any{map[string]any{"name": "x", "expr": "true"}}), "message is required"},
		{"CheckBadName", set("checks", []any{map[string]any{"name": "Bad Name", "expr": "true", "message": "m"}}), "snake_case"},
		{"NoProviders", set("providers", []any{}), "at least one provider"},
		{"DuplicateProvider", set("providers", []any{"a", "a"}), "listed twice"},
		{"BadTimeout", set("timeout", "soon"), "timeout"},
		{"TimeoutTooLong", set("timeout", "1h"), "timeout"},
		{"HedgeNotBeforeTimeout", set("hedge_after", "20s"), "hedge_after"},
		{"ZeroAttempts", set("max_attempts", 0), "max_attempts"},
		{"HotTemperature", set("temperature", 1.5), "temperature"},
		{"NoOutputTokens", set("max_output_tokens", 0), "max_output_tokens"},
		{"UnknownTier", set("tier", "48h"), `tier "48h" must be one of`},
		{"UnknownMaxTier", set("max_tier", "soon"), `max_tier "soon" must be one of`},
		{"StreamFieldNotAProperty", set("stream_field", "text"), `stream_field "text": is not a top-level property`},
		{"StreamFieldNotAString", set("stream_field", "priority"), `stream_field "priority": must be a property of "type": "string"`},
		{"TierBeyondMaxTier", func(d map[string]any) map[string]any { d["tier"], d["max_tier"] = "8h", "2h"; return d }, `waits longer than max_tier`},
		{"CaseInputNoLongerValid", set("input_schema", map[string]any{
			"type": "object", "properties": map[string]any{"subject": map[string]any{"type": "string"}, "body": map[string]any{"type": "string"}, "lang": map[string]any{"type": "string"}},
			"required": []any{"subject", "body", "lang"},
		}), "missing property 'lang'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadVariant(t, "ticket-triage", tc.mutate)
			var te *jobtype.TypeError
			if !errors.Is(err, jobtype.ErrInvalidType) || !errors.As(err, &te) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadFS = %v, want ErrInvalidType containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadRejectsTypeWithoutCases(t *testing.T) {
	t.Parallel()
	fsys := variantFS(t, "ticket-triage", nil)
	for p := range fsys {
		if strings.HasPrefix(p, "cases/ticket-triage/") {
			delete(fsys, p)
		}
	}
	if _, err := jobtype.LoadFS(fsys); !errors.Is(err, jobtype.ErrInvalidType) || !strings.Contains(err.Error(), "no golden cases") {
		t.Errorf("LoadFS = %v", err)
	}
}

func TestLoadRejectsBadCase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"BadPointer", `{"input":{"subject":"s","body":"b"},"expect":{"category":"bug"}}`, "not a JSON pointer"},
		{"NoExpectations", `{"input":{"subject":"s","body":"b"}}`, "needs expect or assert"},
		{"BadAssert", `{"input":{"subject":"s","body":"b"},"assert":[{"expr":"input.subject +","message":"m"}]}`, "assert"},
		{"UnknownField", `{"input":{"subject":"s","body":"b"},"expected":{}}`, `unknown field "expected"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := variantFS(t, "ticket-triage", nil)
			fsys["cases/ticket-triage/zz-bad.json"] = &fstest.MapFile{Data: []byte(tc.body)}
			_, err := jobtype.LoadFS(fsys)
			if !errors.Is(err, jobtype.ErrInvalidType) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "zz-bad.json") {
				t.Errorf("LoadFS = %v, want error naming zz-bad.json and %q", err, tc.want)
			}
		})
	}
}

// TestStreamFields: the types make run serves name the output text their
// streamed jobs' deltas carry; a type without one streams raw fragments.
func TestStreamFields(t *testing.T) {
	t.Parallel()
	c := load(t)
	for name, want := range map[string]string{"demo": "text", "demo-hedge": "text", "ticket-triage": "summary", "demo-async": ""} {
		if got := get(t, c, name).StreamField(); got != want {
			t.Errorf("%s: stream field %q, want %q", name, got, want)
		}
	}
}
