package sim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
)

// The requests below break one documented rule each; every simulator must
// refuse them with its API's documented status and error body.

const strictSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`

var strictOracle = sim.Fixed{GoodOutput: json.RawMessage(`{"text":"hi"}`)}

func serveSim(t *testing.T, opts sim.Options, handler func(*sim.Simulator) http.Handler) (*sim.Simulator, string) {
	t.Helper()
	if opts.Oracle == nil {
		opts.Oracle = strictOracle
	}
	s := sim.New(opts)
	srv, err := sim.Start(handler(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return s, srv.URL()
}

// send posts body (a JSON string, or any value to marshal) and decodes the
// answer.
func send(t *testing.T, method, url string, header map[string]string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := ownClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(data)) > 0 && json.Unmarshal(data, &out) != nil {
		t.Fatalf("answer is not a JSON object: %s", data)
	}
	return resp.StatusCode, resp.Header, out
}

// edit returns a deep copy of base (JSON) with fn applied.
func edit(t *testing.T, base string, fn func(m map[string]any)) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	if fn != nil {
		fn(m)
	}
	return m
}

func obj(v any) map[string]any { return v.(map[string]any) }
func arr(v any) []any          { return v.([]any) }

// hasKeys fails unless m has every key (present, possibly null).
func hasKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks documented member %q: %v", what, k, m)
		}
	}
}

const openAIBase = `{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hi."}],
	"temperature":0,"max_completion_tokens":100,
	"response_format":{"type":"json_schema","json_schema":{"name":"demo","schema":` + strictSchema + `,"strict":true}}}`

func TestOpenAIRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		opts      sim.Options
		path      string
		body      any
		status    int
		code      any // nil: null
		param     any
		msgPrefix string
	}{
		{"NoMessages", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { delete(m, "messages") }),
			400, "missing_required_parameter", "messages", "Missing required parameter: 'messages'."},
		{"NoModel", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { delete(m, "model") }),
			400, nil, nil, "you must provide a model parameter"},
		{"EmptyMessages", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["messages"] = []any{} }),
			400, "empty_array", "messages", "Invalid 'messages': empty array."},
		{"RoleRobot", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { obj(arr(m["messages"])[1])["role"] = "robot" }),
			400, "invalid_value", "messages[1].role", "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."},
		{"NoContent", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { delete(obj(arr(m["messages"])[1]), "content") }),
			400, "missing_required_parameter", "messages[1].content", "Missing required parameter: 'messages[1].content'."},
		{"Temperature3", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["temperature"] = 3 }),
			400, "decimal_above_max_value", "temperature", "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead."},
		{"TemperatureString", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["temperature"] = "low" }),
			400, "invalid_type", "temperature", "Invalid type for 'temperature': expected a decimal, but got a string instead."},
		{"MaxCompletionTokensZero", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["max_completion_tokens"] = 0 }),
			400, "integer_below_min_value", "max_completion_tokens", "Invalid 'max_completion_tokens': integer below minimum value."},
		{"ResponseFormatJSON", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { obj(m["response_format"])["type"] = "json" }),
			400, "invalid_value", "response_format.type", "Invalid value: 'json'. Supported values are: 'text', 'json_object', and 'json_schema'."},
		{"NoSchemaName", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { delete(obj(obj(m["response_format"])["json_schema"]), "name") }),
			400, "missing_required_parameter", "response_format.json_schema.name", "Missing required parameter: 'response_format.json_schema.name'."},
		{"StrictYes", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { obj(obj(m["response_format"])["json_schema"])["strict"] = "yes" }),
			400, "invalid_type", "response_format.json_schema.strict", "Invalid type for 'response_format.json_schema.strict': expected a boolean, but got a string instead."},
		{"StrictSchemaAllowsExtraKeys", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(m["response_format"])["json_schema"])["schema"] = map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"}}
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=(), 'additionalProperties' is required to be supplied and to be false."},
		{"StrictSchemaOptionalProperty", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(obj(m["response_format"])["json_schema"])["schema"])["required"] = []any{}
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=(), 'required' is required to be supplied and to be an array including every key in properties. Missing 'text'."},
		{"StrictSchemaMinLength", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(obj(obj(obj(m["response_format"])["json_schema"])["schema"])["properties"])["text"])["minLength"] = 1
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=('properties', 'text'), 'minLength' is not permitted."},
		{"StrictSchemaUnsupportedFormat", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(obj(obj(obj(m["response_format"])["json_schema"])["schema"])["properties"])["text"])["format"] = "uri"
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=('properties', 'text'), 'uri' is not a supported format."},
		{"StrictSchemaAllOf", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(obj(m["response_format"])["json_schema"])["schema"])["allOf"] = []any{}
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=(), 'allOf' is not permitted."},
		{"StrictSchemaRootArray", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(m["response_format"])["json_schema"])["schema"] = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': schema must be a JSON Schema of 'type: \"object\"'"},
		{"StrictSchemaNested", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			obj(obj(obj(obj(m["response_format"])["json_schema"])["schema"])["properties"])["o"] = map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}, "required": []any{"x"}}
			obj(obj(obj(m["response_format"])["json_schema"])["schema"])["required"] = []any{"text", "o"}
		}), 400, nil, "response_format", "Invalid schema for response_format 'demo': In context=('properties', 'o'), 'additionalProperties' is required to be supplied and to be false."},
		{"UnknownField", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["foo"] = 1 }),
			400, nil, nil, "Unrecognized request argument supplied: foo"},
		{"NotJSON", sim.Options{}, "", `{"model":`, 400, nil, nil, "We could not parse the JSON body of your request."},
		{"WrongPath", sim.Options{}, "/v1/chat/completion", openAIBase, 404, nil, nil, "Invalid URL (POST /v1/chat/completion)"},
		{"UnknownModel", sim.Options{Model: "gpt-4o-mini"}, "", openAIBase,
			404, "model_not_found", nil, "The model `gpt-4o` does not exist or you do not have access to it."},
		{"OverTheModelsOutputCap", sim.Options{MaxOutputTokens: 50}, "", openAIBase,
			400, "invalid_value", "max_completion_tokens", "max_completion_tokens is too large: 100. This model supports at most 50 completion tokens, whereas you provided 100."},
		{"ReasoningModelMaxTokens", sim.Options{Model: "o3-mini"}, "", edit(t, openAIBase, func(m map[string]any) {
			m["model"] = "o3-mini"
			delete(m, "temperature")
			delete(m, "max_completion_tokens")
			m["max_tokens"] = 100
		}), 400, "unsupported_parameter", "max_tokens", "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."},
		{"NoStructuredOutputs", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["model"] = "gpt-4-turbo" }),
			400, nil, "response_format", "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."},
		{"ReasoningModelTemperature", sim.Options{Model: "o3-mini"}, "", edit(t, openAIBase, func(m map[string]any) { m["model"] = "o3-mini" }),
			400, "unsupported_value", "temperature", "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."},
		{"StoreString", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["store"] = "yes" }),
			400, "invalid_type", "store", "Invalid type for 'store': expected a boolean, but got a string instead."},
		{"MetadataNotAnObject", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["metadata"] = []any{"a"} }),
			400, "invalid_type", "metadata", "Invalid type for 'metadata': expected an object, but got an array instead."},
		{"MetadataSeventeenPairs", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["metadata"] = pairs(17) }),
			400, "object_above_max_properties", "metadata", "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with 17 properties instead."},
		{"MetadataKeyOf65", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["metadata"] = map[string]any{strings.Repeat("k", 65): "v"} }),
			400, "invalid_value", "metadata", "Invalid 'metadata': key too long. Expected a key with maximum length 64, but got a key with length 65 instead."},
		{"MetadataValueOf513", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["metadata"] = map[string]any{"k": strings.Repeat("é", 513)} }),
			400, "string_above_max_length", "metadata.k", "Invalid 'metadata.k': string too long. Expected a string with maximum length 512, but got a string with length 513 instead."},
		{"MetadataValueNumber", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["metadata"] = map[string]any{"k": 1} }),
			400, "invalid_type", "metadata.k", "Invalid type for 'metadata.k': expected a string, but got a number instead."},
		{"StreamString", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["stream"] = "yes" }),
			400, "invalid_type", "stream", "Invalid type for 'stream': expected a boolean, but got a string instead."},
		{"StreamOptionsWithoutStream", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) { m["stream_options"] = map[string]any{"include_usage": true} }),
			400, nil, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"StreamOptionsWithStreamFalse", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			m["stream"], m["stream_options"] = false, map[string]any{"include_usage": true}
		}), 400, nil, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"StreamOptionsUnknownMember", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			m["stream"], m["stream_options"] = true, map[string]any{"usage": true}
		}), 400, "unknown_parameter", "stream_options.usage", "Unknown parameter: 'stream_options.usage'."},
		{"IncludeUsageString", sim.Options{}, "", edit(t, openAIBase, func(m map[string]any) {
			m["stream"], m["stream_options"] = true, map[string]any{"include_usage": "yes"}
		}), 400, "invalid_type", "stream_options.include_usage", "Invalid type for 'stream_options.include_usage': expected a boolean, but got a string instead."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, url := serveSim(t, tc.opts, (*sim.Simulator).OpenAI)
			path := tc.path
			if path == "" {
				path = "/v1/chat/completions"
			}
			status, header, out := send(t, http.MethodPost, url+path, nil, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d: %v", status, tc.status, out)
			}
			hasKeys(t, "answer", out, "error")
			e := obj(out["error"])
			hasKeys(t, "error", e, "message", "type", "param", "code")
			if e["type"] != "invalid_request_error" || e["code"] != tc.code || e["param"] != tc.param || !strings.HasPrefix(e["message"].(string), tc.msgPrefix) {
				t.Errorf("error = %v, want code %v, param %v, message %q", e, tc.code, tc.param, tc.msgPrefix)
			}
			if tc.status == 400 && (header.Get("x-request-id") == "" || len(s.Calls()) != 1 || s.Calls()[0].Refused == "") {
				t.Errorf("refusal not recorded: request id %q, calls %+v", header.Get("x-request-id"), s.Calls())
			}
		})
	}
}

// pairs is n metadata pairs.
func pairs(n int) map[string]any {
	m := map[string]any{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

// TestOpenAIMetadataAtTheLimits: 16 pairs, a 64-character key and a
// 512-character value are accepted.
func TestOpenAIMetadataAtTheLimits(t *testing.T) {
	t.Parallel()
	_, url := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
	for _, md := range []map[string]any{pairs(16), {strings.Repeat("k", 64): strings.Repeat("é", 512)}} {
		body := edit(t, openAIBase, func(m map[string]any) { m["metadata"] = md; m["store"] = true })
		if status, _, out := send(t, http.MethodPost, url+"/v1/chat/completions", nil, body); status != 200 {
			t.Errorf("status %d: %v", status, out)
		}
	}
}

// TestOpenAIListsStoredCompletions: GET /v1/chat/completions as OpenAI's
// OpenAPI describes it (listChatCompletions, ChatCompletionList).
func TestOpenAIListsStoredCompletions(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{APIKey: "k"}, (*sim.Simulator).OpenAI)
	auth := map[string]string{"Authorization": "Bearer k"}
	create := func(model string, store any, md map[string]any) string {
		t.Helper()
		body := edit(t, openAIBase, func(m map[string]any) {
			m["model"] = model
			if store != nil {
				m["store"] = store
			}
			if md != nil {
				m["metadata"] = md
			}
		})
		status, _, out := send(t, http.MethodPost, url+"/v1/chat/completions", auth, body)
		if status != 200 {
			t.Fatalf("create: %d %v", status, out)
		}
		return out["id"].(string)
	}
	a := create("gpt-4o", true, map[string]any{"onejob_attempt": "j/1", "team": "x"})
	b := create("gpt-4o-mini", true, map[string]any{"onejob_attempt": "j/2", "team": "x"})
	create("gpt-4o", false, map[string]any{"onejob_attempt": "j/3"}) // not stored
	create("gpt-4o", nil, map[string]any{"onejob_attempt": "j/4"})   // store defaults to false
	c := create("gpt-4o", true, nil)

	ids := func(out map[string]any) []string {
		var got []string
		for _, d := range arr(out["data"]) {
			got = append(got, obj(d)["id"].(string))
		}
		return got
	}
	tests := []struct {
		name    string
		query   string
		want    []string
		hasMore bool
	}{
		{"All", "", []string{a, b, c}, false},
		{"Desc", "?order=desc", []string{c, b, a}, false},
		{"ByMetadata", "?metadata[onejob_attempt]=j/2", []string{b}, false},
		{"ByTwoPairs", "?metadata[onejob_attempt]=j/1&metadata[team]=x", []string{a}, false},
		{"NotStored", "?metadata[onejob_attempt]=j/3", nil, false},
		{"ByModel", "?model=gpt-4o", []string{a, c}, false},
		{"Limit", "?limit=1", []string{a}, true},
		{"After", "?limit=1&after=" + a, []string{b}, true},
		{"AfterTheLast", "?after=" + c, nil, false},
	}
	for _, tc := range tests {
		status, _, out := send(t, http.MethodGet, url+"/v1/chat/completions"+tc.query, auth, "")
		if status != 200 {
			t.Fatalf("%s: %d %v", tc.name, status, out)
		}
		hasKeys(t, "list", out, "object", "data", "first_id", "last_id", "has_more")
		got := ids(out)
		if out["object"] != "list" || strings.Join(got, ",") != strings.Join(tc.want, ",") || out["has_more"] != tc.hasMore {
			t.Errorf("%s: data %v has_more %v, want %v %v", tc.name, got, out["has_more"], tc.want, tc.hasMore)
		}
		if len(got) > 0 && (out["first_id"] != got[0] || out["last_id"] != got[len(got)-1]) {
			t.Errorf("%s: first_id %v last_id %v for %v", tc.name, out["first_id"], out["last_id"], got)
		}
	}
	_, _, out := send(t, http.MethodGet, url+"/v1/chat/completions?metadata[onejob_attempt]=j/1", auth, "")
	item := obj(arr(out["data"])[0])
	hasKeys(t, "listed completion", item, "id", "object", "created", "model", "choices", "usage", "metadata")
	if obj(item["metadata"])["onejob_attempt"] != "j/1" {
		t.Errorf("listed completion metadata = %v", item["metadata"])
	}
	for _, bad := range []struct {
		query  string
		status int
		param  any
	}{
		{"?order=newest", 400, "order"},
		{"?limit=0", 400, "limit"},
		{"?limit=x", 400, "limit"},
	} {
		if status, _, out := send(t, http.MethodGet, url+"/v1/chat/completions"+bad.query, auth, ""); status != bad.status || obj(out["error"])["param"] != bad.param {
			t.Errorf("%s: %d %v", bad.query, status, out)
		}
	}
	if status, _, _ := send(t, http.MethodGet, url+"/v1/chat/completions", nil, ""); status != 401 {
		t.Errorf("unauthenticated list: %d", status)
	}
	if got := s.StoredCompletions(); strings.Join(got, ",") != strings.Join([]string{a, b, c}, ",") {
		t.Errorf("StoredCompletions = %v", got)
	}
}

// TestGuidedSchemasAreNotChecked: a schema not sent for strict enforcement
// (strict false or absent) may use all of JSON Schema.
func TestGuidedSchemasAreNotChecked(t *testing.T) {
	t.Parallel()
	lengths := map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string", "minLength": 1, "maxLength": 9}}, "required": []any{"text"}}
	_, oai := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
	body := edit(t, openAIBase, func(m map[string]any) {
		js := obj(obj(m["response_format"])["json_schema"])
		js["strict"], js["schema"] = false, lengths
	})
	if status, _, out := send(t, http.MethodPost, oai+"/v1/chat/completions", nil, body); status != 200 {
		t.Errorf("openai, strict false: %d %v", status, out)
	}
	_, ant := serveSim(t, sim.Options{APIKey: "k"}, (*sim.Simulator).Anthropic)
	body = edit(t, anthropicBase, func(m map[string]any) { obj(arr(m["tools"])[0])["input_schema"] = lengths })
	if status, _, out := send(t, http.MethodPost, ant+"/v1/messages", anthropicHeaders, body); status != 200 {
		t.Errorf("anthropic, no strict: %d %v", status, out)
	}
	_, br := serveSim(t, sim.Options{}, (*sim.Simulator).Bedrock)
	body = edit(t, bedrockBase, func(m map[string]any) {
		obj(obj(obj(arr(obj(m["toolConfig"])["tools"])[0])["toolSpec"])["inputSchema"])["json"] = lengths
	})
	if status, _, out := send(t, http.MethodPost, br+"/model/"+claudeOnBedrock+"/converse", nil, body); status != 200 {
		t.Errorf("bedrock, no strict: %d %v", status, out)
	}
}

func TestOpenAIAnswerCarriesDocumentedFields(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{}, (*sim.Simulator).OpenAI)
	status, _, out := send(t, http.MethodPost, url+"/v1/chat/completions", nil, openAIBase)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	hasKeys(t, "chat.completion", out, "id", "object", "created", "model", "choices", "usage", "service_tier", "system_fingerprint")
	choice := obj(arr(out["choices"])[0])
	hasKeys(t, "choice", choice, "index", "message", "logprobs", "finish_reason")
	hasKeys(t, "message", obj(choice["message"]), "role", "content", "refusal", "annotations")
	usage := obj(out["usage"])
	hasKeys(t, "usage", usage, "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details")
	c := s.Calls()[0]
	if usage["prompt_tokens"] != float64(c.InputTokens) || usage["completion_tokens"] != float64(c.OutputTokens) || c.InputTokens == 0 || c.OutputTokens == 0 {
		t.Errorf("usage %v, recorded %d/%d", usage, c.InputTokens, c.OutputTokens)
	}
	if out["model"] != "gpt-4o" {
		t.Errorf("model = %v, want the requested one", out["model"])
	}
}

const anthropicBase = `{"model":"claude-sonnet-4-5","max_tokens":100,"system":"Be brief.","temperature":0,
	"messages":[{"role":"user","content":"Say hi."}],
	"tools":[{"name":"demo","description":"Record it.","input_schema":` + strictSchema + `}],
	"tool_choice":{"type":"tool","name":"demo"}}`

var anthropicHeaders = map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"}

func TestAnthropicRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	noVersion := map[string]string{"x-api-key": "k", "anthropic-version": ""}
	tests := []struct {
		name    string
		opts    sim.Options
		path    string
		header  map[string]string
		body    any
		status  int
		errType string
		msg     string
	}{
		{"NoVersionHeader", sim.Options{}, "", noVersion, anthropicBase, 400, "invalid_request_error", "anthropic-version: header is required"},
		{"NoModel", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { delete(m, "model") }), 400, "invalid_request_error", "model: Field required"},
		{"StreamString", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { m["stream"] = "yes" }), 400, "invalid_request_error", "stream: Input should be a valid boolean"},
		{"NoMaxTokens", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { delete(m, "max_tokens") }), 400, "invalid_request_error", "max_tokens: Field required"},
		{"MaxTokensZero", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { m["max_tokens"] = 0 }), 400, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1"},
		{"EmptyMessages", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { m["messages"] = []any{} }), 400, "invalid_request_error", "messages: at least one message is required"},
		{"SystemRoleMessage", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { obj(arr(m["messages"])[0])["role"] = "system" }),
			400, "invalid_request_error", "messages.0.role: Input should be 'user' or 'assistant'"},
		{"Temperature1.5", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { m["temperature"] = 1.5 }),
			400, "invalid_request_error", "temperature: Input should be less than or equal to 1"},
		{"UnknownField", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { m["response_format"] = "json" }),
			400, "invalid_request_error", "response_format: Extra inputs are not permitted"},
		{"ToolChoiceType", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { obj(m["tool_choice"])["type"] = "required" }),
			400, "invalid_request_error", "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'"},
		{"ToolChoiceNotATool", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { obj(m["tool_choice"])["name"] = "other" }),
			400, "invalid_request_error", "tool_choice.name: Tool 'other' not found in tools"},
		{"ToolSchemaNotObject", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { obj(arr(m["tools"])[0])["input_schema"] = map[string]any{"type": "string"} }),
			400, "invalid_request_error", "tools.0.input_schema.type: Input should be 'object'"},
		{"StrictToolMinLength", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) {
			tool := obj(arr(m["tools"])[0])
			tool["strict"] = true
			obj(obj(obj(tool["input_schema"])["properties"])["text"])["minLength"] = 1
		}), 400, "invalid_request_error", "tools.0.input_schema: For 'string' type, property 'minLength' is not supported (at /properties/text)"},
		{"StrictToolOpenObject", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) {
			tool := obj(arr(m["tools"])[0])
			tool["strict"] = true
			delete(obj(tool["input_schema"]), "additionalProperties")
		}), 400, "invalid_request_error", "tools.0.input_schema: For 'object' type, 'additionalProperties' must be explicitly set to false (at /)"},
		{"StrictToolMinItems", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) {
			tool := obj(arr(m["tools"])[0])
			tool["strict"] = true
			obj(obj(tool["input_schema"])["properties"])["l"] = map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 2}
		}), 400, "invalid_request_error", "tools.0.input_schema: For 'array' type, 'minItems' values other than 0 or 1 are not supported (at /properties/l)"},
		{"StrictNotBoolean", sim.Options{}, "", nil, edit(t, anthropicBase, func(m map[string]any) { obj(arr(m["tools"])[0])["strict"] = "yes" }),
			400, "invalid_request_error", "tools.0.strict: Input should be a valid boolean"},
		{"OverTheModelsOutputCap", sim.Options{MaxOutputTokens: 64}, "", nil, anthropicBase,
			400, "invalid_request_error", "max_tokens: 100 > 64, which is the maximum allowed number of output tokens for claude-sonnet-4-5"},
		{"UnknownModel", sim.Options{Model: "claude-opus-4-1"}, "", nil, anthropicBase, 404, "not_found_error", "model: claude-sonnet-4-5"},
		{"WrongPath", sim.Options{}, "/v1/message", nil, anthropicBase, 404, "not_found_error", "Not Found"},
		{"CountTokensTakesNoMaxTokens", sim.Options{}, "/v1/messages/count_tokens", nil, anthropicBase, 400, "invalid_request_error", "max_tokens: Extra inputs are not permitted"},
		{"NotJSON", sim.Options{}, "", nil, `[1,2]`, 400, "invalid_request_error", "The request body is not valid JSON."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.opts.APIKey = "k"
			_, url := serveSim(t, tc.opts, (*sim.Simulator).Anthropic)
			path := tc.path
			if path == "" {
				path = "/v1/messages"
			}
			header := tc.header
			if header == nil {
				header = anthropicHeaders
			}
			status, _, out := send(t, http.MethodPost, url+path, header, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d: %v", status, tc.status, out)
			}
			hasKeys(t, "answer", out, "type", "error", "request_id")
			e := obj(out["error"])
			if out["type"] != "error" || e["type"] != tc.errType || e["message"] != tc.msg {
				t.Errorf("error = %v, want %s %q", out, tc.errType, tc.msg)
			}
		})
	}
}

func TestAnthropicAnswersCarryDocumentedFields(t *testing.T) {
	t.Parallel()
	s, url := serveSim(t, sim.Options{APIKey: "k"}, (*sim.Simulator).Anthropic)
	status, _, out := send(t, http.MethodPost, url+"/v1/messages", anthropicHeaders, anthropicBase)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	hasKeys(t, "message", out, "id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage")
	usage := obj(out["usage"])
	hasKeys(t, "usage", usage, "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
	block := obj(arr(out["content"])[0])
	hasKeys(t, "tool_use block", block, "type", "id", "name", "input")

	count := edit(t, anthropicBase, func(m map[string]any) { delete(m, "max_tokens"); delete(m, "temperature") })
	status, _, counted := send(t, http.MethodPost, url+"/v1/messages/count_tokens", anthropicHeaders, count)
	if status != 200 {
		t.Fatalf("count_tokens status %d: %v", status, counted)
	}
	hasKeys(t, "count_tokens answer", counted, "input_tokens")
	if counted["input_tokens"] != usage["input_tokens"] || counted["input_tokens"].(float64) < 313 {
		t.Errorf("count_tokens %v, messages usage %v: one request, one count (with the tool-use system prompt)", counted, usage)
	}
	if len(s.Calls()) != 1 || len(s.Counted()) != 1 {
		t.Errorf("calls %d, counted %d", len(s.Calls()), len(s.Counted()))
	}
}

const bedrockBase = `{"messages":[{"role":"user","content":[{"text":"Say hi."}]}],"system":[{"text":"Be brief."}],
	"inferenceConfig":{"maxTokens":100,"temperature":0},
	"toolConfig":{"tools":[{"toolSpec":{"name":"demo","description":"Record it.","inputSchema":{"json":` + strictSchema + `}}}],
	"toolChoice":{"tool":{"name":"demo"}}},
	"requestMetadata":{"idempotency_key":"j/1","job_id":"j","attempt":"1"}}`

const claudeOnBedrock = "anthropic.claude-3-5-haiku-20241022-v1:0"

func TestBedrockRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    sim.Options
		model   string
		op      string
		body    any
		status  int
		errType string
		msg     string
	}{
		{"NoMessages", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { delete(m, "messages") }),
			400, "ValidationException", "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null"},
		{"RoleRobot", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(arr(m["messages"])[0])["role"] = "robot" }),
			400, "ValidationException", "1 validation error detected: Value 'robot' at 'messages.1.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]"},
		{"ContentBlockTwoMembers", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) {
			obj(arr(obj(arr(m["messages"])[0])["content"])[0])["cachePoint"] = map[string]any{"type": "default"}
		}), 400, "ValidationException", "The content block at messages.0.content.0 must set exactly one of"},
		{"MaxTokensZero", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(m["inferenceConfig"])["maxTokens"] = 0 }),
			400, "ValidationException", "1 validation error detected: Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1"},
		{"Temperature1.5", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(m["inferenceConfig"])["temperature"] = 1.5 }),
			400, "ValidationException", "1 validation error detected: Value '1.5' at 'inferenceConfig.temperature' failed to satisfy constraint: Member must have value less than or equal to 1"},
		{"TopPNegative", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(m["inferenceConfig"])["topP"] = -0.5 }),
			400, "ValidationException", "1 validation error detected: Value '-0.5' at 'inferenceConfig.topP' failed to satisfy constraint: Member must have value greater than or equal to 0"},
		{"FiveStopSequences", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) {
			obj(m["inferenceConfig"])["stopSequences"] = []any{"a", "b", "c", "d", "e"}
		}), 400, "ValidationException", "1 validation error detected: Value '5 items' at 'inferenceConfig.stopSequences' failed to satisfy constraint: Member must have length less than or equal to 4"},
		{"NoTools", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(m["toolConfig"])["tools"] = []any{} }),
			400, "ValidationException", "1 validation error detected: Value '[]' at 'toolConfig.tools' failed to satisfy constraint: Member must have length greater than or equal to 1"},
		{"ToolNameWithSpace", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) {
			obj(obj(arr(obj(m["toolConfig"])["tools"])[0])["toolSpec"])["name"] = "my tool"
		}), 400, "ValidationException", "1 validation error detected: Value 'my tool' at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"},
		{"ForcedToolOnLlama", sim.Options{}, "meta.llama3-70b-instruct-v1:0", "", bedrockBase,
			400, "ValidationException", "This model doesn't support the toolConfig.toolChoice.tool field. Remove toolConfig.toolChoice.tool and try again."},
		{"MetadataValue", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { obj(m["requestMetadata"])["job_id"] = "j?1" }),
			400, "ValidationException", "1 validation error detected: Value 'j?1' at 'requestMetadata.job_id' failed to satisfy constraint: Map value must satisfy constraint"},
		{"OverTheModelsOutputCap", sim.Options{MaxOutputTokens: 64}, "", "", bedrockBase,
			400, "ValidationException", "The maximum tokens you requested exceeds the model limit of 64. Try again with a maximum tokens value that is lower than 64."},
		{"StrictToolMaxLength", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) {
			spec := obj(obj(arr(obj(m["toolConfig"])["tools"])[0])["toolSpec"])
			spec["strict"] = true
			obj(obj(obj(obj(spec["inputSchema"])["json"])["properties"])["text"])["maxLength"] = 10
		}), 400, "ValidationException", "The JSON schema of toolConfig.tools.1.member.toolSpec.inputSchema is not supported for strict tool use: For 'string' type, property 'maxLength' is not supported (at /properties/text)"},
		{"UnknownMember", sim.Options{}, "", "", edit(t, bedrockBase, func(m map[string]any) { m["temperature"] = 0 }), 400, "SerializationException", "Unknown member: temperature"},
		{"UnknownModel", sim.Options{Model: "anthropic.claude-sonnet-4-20250514-v1:0"}, "", "", bedrockBase, 400, "ValidationException", "The provided model identifier is invalid."},
		{"WrongOperation", sim.Options{}, "", "invoke", bedrockBase, 404, "UnknownOperationException", "Unknown operation"},
		{"CountTokensUnsupportedModel", sim.Options{}, "amazon.nova-pro-v1:0", "count-tokens",
			`{"input":{"converse":{"messages":[{"role":"user","content":[{"text":"hi"}]}]}}}`, 400, "ValidationException", "The provided model doesn't support counting tokens."},
		{"CountTokensNoInput", sim.Options{}, "", "count-tokens", `{}`, 400, "ValidationException", "1 validation error detected: Value null at 'input' failed to satisfy constraint: Member must not be null"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := serveSim(t, tc.opts, (*sim.Simulator).Bedrock) // no APIKey: SigV4 is the conformance suite's
			model, op := tc.model, tc.op
			if model == "" {
				model = claudeOnBedrock
			}
			if op == "" {
				op = "converse"
			}
			status, header, out := send(t, http.MethodPost, url+"/model/"+model+"/"+op, nil, tc.body)
			if status != tc.status {
				t.Fatalf("status = %d, want %d: %v", status, tc.status, out)
			}
			if got := header.Get("X-Amzn-ErrorType"); !strings.HasPrefix(got, tc.errType+":") {
				t.Errorf("X-Amzn-ErrorType = %q, want %s", got, tc.errType)
			}
			if msg, _ := out["message"].(string); !strings.HasPrefix(msg, tc.msg) || len(out) != 1 {
				t.Errorf("body = %v, want {message: %q…}", out, tc.msg)
			}
		})
	}
}

func TestBedrockAnswersCarryDocumentedFields(t *testing.T) {
	t.Parallel()
	_, url := serveSim(t, sim.Options{}, (*sim.Simulator).Bedrock)
	status, _, out := send(t, http.MethodPost, url+"/model/"+claudeOnBedrock+"/converse", nil, bedrockBase)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	hasKeys(t, "converse answer", out, "output", "stopReason", "usage", "metrics")
	hasKeys(t, "message", obj(obj(out["output"])["message"]), "role", "content")
	usage := obj(out["usage"])
	hasKeys(t, "usage", usage, "inputTokens", "outputTokens", "totalTokens")
	hasKeys(t, "metrics", obj(out["metrics"]), "latencyMs")

	body := edit(t, bedrockBase, func(m map[string]any) { delete(m, "inferenceConfig"); delete(m, "requestMetadata") })
	status, _, counted := send(t, http.MethodPost, url+"/model/"+claudeOnBedrock+"/count-tokens", nil, map[string]any{"input": map[string]any{"converse": body}})
	if status != 200 {
		t.Fatalf("count-tokens status %d: %v", status, counted)
	}
	if counted["inputTokens"] != usage["inputTokens"] {
		t.Errorf("CountTokens %v, Converse usage %v: one request, one count", counted, usage)
	}
}

const webhookBase = `{"job_id":"j","attempt":1,"idempotency_key":"j/1","job_type":"demo","input":{"prompt":"hi"},"prompt":"hi"}`

func TestWebhookRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	key := map[string]string{"Idempotency-Key": "j/1"}
	tests := []struct {
		name   string
		method string
		header map[string]string
		body   any
		status int
		msg    string
	}{
		{"Get", http.MethodGet, key, "", 405, "method not allowed"},
		{"TextPlain", http.MethodPost, map[string]string{"Idempotency-Key": "j/1", "Content-Type": "text/plain"}, webhookBase, 415, "Content-Type must be application/json"},
		{"NotAnObject", http.MethodPost, key, `["j"]`, 400, "body is not a JSON object"},
		{"UnknownField", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { m["priority"] = 1 }), 400, "unknown field priority"},
		{"NoJobID", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { delete(m, "job_id") }), 400, "job_id is required"},
		{"NoInput", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { delete(m, "input") }), 400, "input is required"},
		{"EmptyJobType", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { m["job_type"] = "" }), 400, "job_type must be a non-empty string"},
		{"AttemptZero", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { m["attempt"] = 0 }), 400, "attempt must be an integer >= 1"},
		{"AttemptString", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { m["attempt"] = "1" }), 400, "attempt must be an integer >= 1"},
		{"PromptNotString", http.MethodPost, key, edit(t, webhookBase, func(m map[string]any) { m["prompt"] = 3 }), 400, "prompt must be a string"},
		{"NoIdempotencyHeader", http.MethodPost, nil, webhookBase, 400, "Idempotency-Key header is required"},
		{"IdempotencyHeaderMismatch", http.MethodPost, map[string]string{"Idempotency-Key": "j/2"}, webhookBase, 400, "Idempotency-Key header must equal idempotency_key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := serveSim(t, sim.Options{}, (*sim.Simulator).Webhook)
			status, _, out := send(t, tc.method, url+"/hook", tc.header, tc.body)
			if status != tc.status || out["error"] != tc.msg || len(out) != 1 {
				t.Errorf("answer %d %v, want %d {error: %q}", status, out, tc.status, tc.msg)
			}
		})
	}
}
