package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The OpenAI simulator serves POST /v1/chat/completions as the Chat
// Completions API reference describes it: the request is checked member by
// member (required, types, enums, ranges, unknown members, the model's own
// parameter rules) and refused with the API's error body,
// {"error":{"message","type","param","code"}}; answers carry every member
// the reference marks as always present.

// openAIRequestMembers are the request body members the API reference lists.
var openAIRequestMembers = []string{
	"messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias",
	"logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
	"parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "reasoning_effort",
	"response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
	"stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
	"verbosity", "web_search_options",
}

var (
	openAIRoles          = []string{"system", "assistant", "user", "function", "tool", "developer"}
	openAIResponseFormat = []string{"text", "json_object", "json_schema"}
	openAISchemaName     = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// openAIReasoning are the model families OpenAI documents as reasoning
// models: max_tokens is "not compatible with o-series models", and only the
// default temperature (1) is supported.
var openAIReasoning = []string{"o1", "o3", "o4", "gpt-5"}

// openAIStructuredOutputs: response_format json_schema arrived with
// gpt-4o-2024-08-06 and gpt-4o-mini; older models refuse it.
func openAIStructuredOutputs(model string) bool {
	if model == "gpt-4" || model == "gpt-3.5-turbo" {
		return false
	}
	for _, p := range []string{"gpt-3.5-turbo-", "gpt-4-", "gpt-4o-2024-05-13", "o1-mini", "o1-preview"} {
		if strings.HasPrefix(model, p) {
			return false
		}
	}
	return true
}

func openAIReasoningModel(model string) bool {
	for _, f := range openAIReasoning {
		if model == f || strings.HasPrefix(model, f+"-") {
			return true
		}
	}
	return false
}

func oaiInvalid(param, code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: code, param: param, msg: msg}
}

func oaiMissing(param string) *apiError {
	return oaiInvalid(param, "missing_required_parameter", fmt.Sprintf("Missing required parameter: '%s'.", param))
}

func oaiType(param, want string, got json.RawMessage) *apiError {
	return oaiInvalid(param, "invalid_type", fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, article(jsonKind(got))))
}

func oaiEnum(param, got string, allowed []string) *apiError {
	return oaiInvalid(param, "invalid_value", fmt.Sprintf("Invalid value: '%s'. Supported values are: %s.", got, quoteList(allowed)))
}

func article(kind string) string {
	if kind == "array" || kind == "object" || kind == "integer" {
		return "an " + kind
	}
	return "a " + kind
}

// openAIRequest is what a valid chat completion request carries that the
// simulator uses.
type openAIRequest struct {
	model        string
	system       string
	prompt       string
	schema       json.RawMessage
	schemaName   string
	strict       bool
	temperature  *float64
	maxTokens    int
	promptTokens int
	store        bool
	metadata     map[string]string
	serviceTier  string
	stream       bool
	streamUsage  bool
}

// validateOpenAI checks a chat completion request body against the API's
// rules for the served model.
func validateOpenAI(body []byte, opts Options) (openAIRequest, *apiError) {
	var req openAIRequest
	o, ok := parseObject(body)
	if !ok {
		return req, oaiInvalid("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. "+
			"The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)")
	}
	if extra := o.unknown(openAIRequestMembers...); len(extra) > 0 {
		return req, oaiInvalid("", "", "Unrecognized request argument supplied: "+strings.Join(extra, ", "))
	}
	if !o.has("model") {
		return req, oaiInvalid("", "", "you must provide a model parameter")
	}
	model, ok := o.str("model")
	if !ok {
		return req, oaiType("model", "a string", o["model"])
	}
	req.model = model
	if opts.Model != "" && model != opts.Model {
		return req, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
			msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model)}
	}
	reasoning := openAIReasoningModel(model)

	if !o.has("messages") {
		return req, oaiMissing("messages")
	}
	msgs, ok := o.array("messages")
	if !ok {
		return req, oaiType("messages", "an array", o["messages"])
	}
	if len(msgs) == 0 {
		return req, oaiInvalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	req.promptTokens = replyOverhead
	for i, raw := range msgs {
		at := fmt.Sprintf("messages[%d]", i)
		m, ok := parseObject(raw)
		if !ok {
			return req, oaiType(at, "an object", raw)
		}
		if !m.has("role") {
			return req, oaiMissing(at + ".role")
		}
		role, ok := m.str("role")
		if !ok {
			return req, oaiType(at+".role", "a string", m["role"])
		}
		if !slices.Contains(openAIRoles, role) {
			return req, oaiEnum(at+".role", role, openAIRoles)
		}
		if role != "assistant" && !m.has("content") {
			return req, oaiMissing(at + ".content")
		}
		content := ""
		if m.has("content") {
			switch jsonKind(m["content"]) {
			case "string":
				content, _ = m.str("content")
			case "array":
				content = string(m["content"])
			default:
				return req, oaiType(at+".content", "one of a string or array of objects", m["content"])
			}
		}
		switch role {
		case "system", "developer":
			req.system = content
		case "user":
			req.prompt = content
		}
		req.promptTokens += messageOverhead + Tokens(role) + Tokens(content)
	}

	// An unsupported parameter is refused before any value is looked at.
	for _, field := range []string{"max_tokens", "max_completion_tokens"} {
		if !o.has(field) {
			continue
		}
		if field == "max_tokens" && reasoning {
			return req, oaiInvalid("max_tokens", "unsupported_parameter",
				"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")
		}
		n, ok := o.integer(field)
		if !ok {
			return req, oaiType(field, "an integer", o[field])
		}
		if n < 1 {
			return req, oaiInvalid(field, "integer_below_min_value",
				fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", field, n))
		}
		if opts.MaxOutputTokens > 0 && n > opts.MaxOutputTokens {
			return req, oaiInvalid(field, "invalid_value",
				fmt.Sprintf("%s is too large: %d. This model supports at most %d completion tokens, whereas you provided %d.", field, n, opts.MaxOutputTokens, n))
		}
		req.maxTokens = n
	}

	if o.has("temperature") {
		t, ok := o.num("temperature")
		if !ok {
			return req, oaiType("temperature", "a decimal", o["temperature"])
		}
		if t > 2 {
			return req, oaiInvalid("temperature", "decimal_above_max_value",
				fmt.Sprintf("Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got %s instead.", number(t)))
		}
		if t < 0 {
			return req, oaiInvalid("temperature", "decimal_below_min_value",
				fmt.Sprintf("Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got %s instead.", number(t)))
		}
		if reasoning && t != 1 {
			return req, oaiInvalid("temperature", "unsupported_value",
				fmt.Sprintf("Unsupported value: 'temperature' does not support %s with this model. Only the default (1) value is supported.", number(t)))
		}
		req.temperature = &t
	}
	if o.has("response_format") {
		if e := req.validateResponseFormat(o); e != nil {
			return req, e
		}
	}
	if o.has("store") {
		if jsonKind(o["store"]) != "boolean" {
			return req, oaiType("store", "a boolean", o["store"])
		}
		_ = json.Unmarshal(o["store"], &req.store)
	}
	if o.has("metadata") {
		md, e := validateMetadata(o["metadata"])
		if e != nil {
			return req, e
		}
		req.metadata = md
	}
	var e *apiError
	if req.stream, req.streamUsage, e = validateOpenAIStream(o); e != nil {
		return req, e
	}
	if o.has("service_tier") {
		tier, ok := o.str("service_tier")
		if !ok {
			return req, oaiType("service_tier", "a string", o["service_tier"])
		}
		if !slices.Contains(openAIServiceTiers, tier) {
			return req, oaiEnum("service_tier", tier, openAIServiceTiers)
		}
		if tier == "flex" && !openAIFlexModel(model) {
			return req, oaiInvalid("service_tier", "", "Unsupported service_tier: flex")
		}
		req.serviceTier = tier
	}
	return req, nil
}

// openAIServiceTiers are service_tier's values (the Chat Completions
// reference: auto, default, flex, scale, priority).
var openAIServiceTiers = []string{"auto", "default", "flex", "scale", "priority"}

// openAIFlexModel: flex processing is "in beta with limited model
// availability" (the flex processing guide: o3 and o4-mini at launch; the
// pricing page since lists the gpt-5 family). Another model's flex request
// is refused as OpenAI refuses it ("Unsupported service_tier: flex", as
// openai/codex issue 15099 quotes the 400).
func openAIFlexModel(model string) bool {
	for _, f := range []string{"o3", "o4-mini", "gpt-5"} {
		if model == f || strings.HasPrefix(model, f+"-") {
			return true
		}
	}
	return false
}

// OpenAI's Metadata: "Set of 16 key-value pairs ... Keys are strings with a
// maximum length of 64 characters. Values are strings with a maximum length
// of 512 characters." (openai/openai-openapi openapi.yaml, components.schemas.Metadata,
// commit f85dbe22). The messages follow the API's documented shape for
// such refusals (string_above_max_length and the like).
const (
	metadataMaxPairs    = 16
	metadataMaxKeyLen   = 64
	metadataMaxValueLen = 512
)

func validateMetadata(raw json.RawMessage) (map[string]string, *apiError) {
	o, ok := parseObject(raw)
	if !ok {
		return nil, oaiType("metadata", "an object", raw)
	}
	if len(o) > metadataMaxPairs {
		return nil, oaiInvalid("metadata", "object_above_max_properties",
			fmt.Sprintf("Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got an object with %d properties instead.", metadataMaxPairs, len(o)))
	}
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	md := make(map[string]string, len(o))
	for _, k := range keys {
		if n := utf8.RuneCountInString(k); n > metadataMaxKeyLen {
			return nil, oaiInvalid("metadata", "invalid_value",
				fmt.Sprintf("Invalid 'metadata': key too long. Expected a key with maximum length %d, but got a key with length %d instead.", metadataMaxKeyLen, n))
		}
		v, ok := o.str(k)
		if !ok {
			return nil, oaiType("metadata."+k, "a string", o[k])
		}
		if n := utf8.RuneCountInString(v); n > metadataMaxValueLen {
			return nil, oaiInvalid("metadata."+k, "string_above_max_length",
				fmt.Sprintf("Invalid 'metadata.%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", k, metadataMaxValueLen, n))
		}
		md[k] = v
	}
	return md, nil
}

func (req *openAIRequest) validateResponseFormat(o object) *apiError {
	rf, ok := o.child("response_format")
	if !ok {
		return oaiType("response_format", "an object", o["response_format"])
	}
	if !rf.has("type") {
		return oaiMissing("response_format.type")
	}
	typ, ok := rf.str("type")
	if !ok {
		return oaiType("response_format.type", "a string", rf["type"])
	}
	if !slices.Contains(openAIResponseFormat, typ) {
		return oaiEnum("response_format.type", typ, openAIResponseFormat)
	}
	if typ != "json_schema" {
		return nil
	}
	if !openAIStructuredOutputs(req.model) {
		return oaiInvalid("response_format", "",
			"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model. Learn more about supported models at the Structured Outputs guide: https://platform.openai.com/docs/guides/structured-outputs")
	}
	if !rf.has("json_schema") {
		return oaiMissing("response_format.json_schema")
	}
	js, ok := rf.child("json_schema")
	if !ok {
		return oaiType("response_format.json_schema", "an object", rf["json_schema"])
	}
	if !js.has("name") {
		return oaiMissing("response_format.json_schema.name")
	}
	name, ok := js.str("name")
	if !ok {
		return oaiType("response_format.json_schema.name", "a string", js["name"])
	}
	if !openAISchemaName.MatchString(name) {
		return oaiInvalid("response_format.json_schema.name", "invalid_value",
			"Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")
	}
	strict := false
	if js.has("strict") {
		if jsonKind(js["strict"]) != "boolean" {
			return oaiType("response_format.json_schema.strict", "a boolean", js["strict"])
		}
		_ = json.Unmarshal(js["strict"], &strict)
	}
	if js.has("schema") {
		if jsonKind(js["schema"]) != "object" {
			return oaiType("response_format.json_schema.schema", "an object", js["schema"])
		}
		req.schema = js["schema"]
	}
	if strict {
		if p := strictSchemaProblem(req.schema, openAIStrictDialect); p != nil {
			if p.kind == "root" {
				return oaiInvalid("response_format", "", fmt.Sprintf("Invalid schema for response_format '%s': %s", name, p.openAI()))
			}
			return oaiInvalid("response_format", "",
				fmt.Sprintf("Invalid schema for response_format '%s': In context=%s, %s", name, p.context(), p.openAI()))
		}
	}
	req.schemaName, req.strict = name, strict
	req.promptTokens += Tokens(name) + jsonTokens(req.schema)
	return nil
}

// OpenAI serves POST /v1/chat/completions in the OpenAI Chat Completions
// format with response_format json_schema, and GET /v1/chat/completions,
// the list of the completions created with store: true (completions.go).
func (s *Simulator) OpenAI() http.Handler {
	f := format{
		name:            "openai",
		requestIDHeader: "x-request-id",
		authorized:      bearer,
		refuse: func(w http.ResponseWriter, _ Call, e *apiError) {
			writeJSON(w, e.status, map[string]any{"error": map[string]any{
				"message": e.msg, "type": e.typ, "param": nullable(e.param), "code": nullable(e.code),
			}})
		},
		fail: func(kind failKind, status int) *apiError {
			switch kind {
			case failAuth:
				return &apiError{status: status, typ: "invalid_request_error", code: "invalid_api_key",
					msg: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."}
			case failRateLimit:
				return &apiError{status: status, typ: "requests", code: "rate_limit_exceeded",
					msg: "Rate limit reached for requests per min (RPM). Please try again later."}
			case failQuota:
				return &apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: "insufficient_quota",
					msg: "You exceeded your current quota, please check your plan and billing details."}
			case failBadRequest:
				return oaiInvalid("", "", "simulated invalid request")
			case failModelTimeout:
				return &apiError{status: status, typ: "server_error", msg: "Request timed out."}
			}
			return &apiError{status: status, typ: "server_error", msg: "The server had an error while processing your request. Sorry about that!"}
		},
		structured: func(c Call, model string, obj map[string]any) any {
			content, _ := json.Marshal(obj)
			return openAICompletion(c, model, string(content), "stop")
		},
		prose: func(c Call, model string) any { return openAICompletion(c, model, Prose, "stop") },
		filtered: func(c Call, model string) any {
			return openAICompletion(c, model, "", "content_filter")
		},
		truncated: func(c Call, model string, obj map[string]any) any {
			return openAICompletion(c, model, prefix(obj), "length")
		},
		refused: func(c Call, model string) any {
			// A refusal is the message's refusal, its content null.
			v := openAICompletion(c, model, "", "stop")
			msg := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			msg["content"], msg["refusal"] = nil, RefusalText
			return v
		},
		stream: openAIStream,
		keep: func(c Call, v any) {
			if c.Store {
				s.storeCompletion(c, v)
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/chat/completions" {
			s.listCompletions(w, r, f)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			f.refuse(w, Call{}, &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
				msg: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
			return
		}
		body, ok := readBody(r)
		if !ok {
			return
		}
		c := Call{IdempotencyKey: r.Header.Get("Idempotency-Key")}
		var req openAIRequest
		ok = s.admit(w, r, body, &c, f, func(opts Options) (*apiError, func(*Call)) {
			var e *apiError
			req, e = validateOpenAI(body, opts)
			return e, func(c *Call) {
				c.Model, c.System, c.Prompt = req.model, req.system, req.prompt
				c.Schema, c.ToolName, c.Temperature, c.MaxTokens = req.schema, req.schemaName, req.temperature, req.maxTokens
				c.Strict = req.strict
				c.InputTokens = req.promptTokens
				c.Store, c.Metadata = req.store, req.metadata
				c.Stream, c.StreamUsage = req.stream, req.streamUsage
				c.ServiceTier = req.serviceTier
			}
		})
		if ok && req.serviceTier == "flex" && s.takeFlexBusy() {
			// No flex capacity: refused before any work, not billed.
			c.Refused = "resource_unavailable"
			s.record(&c)
			w.Header().Set(f.requestIDHeader, c.RequestID)
			f.refuse(w, c, flexUnavailable())
			return
		}
		if ok {
			s.serve(w, r, body, &c, f)
		}
	})
}

// flexUnavailable is flex processing's "429 Resource Unavailable" (the
// flex processing guide: "retry with exponential backoff or ... the
// default service tier"; requests that fail this way are not billed). Its
// type and code are the simulator's own reading: OpenAI's guide names
// only the status and "Resource Unavailable".
func flexUnavailable() *apiError {
	return &apiError{status: http.StatusTooManyRequests, typ: "resource_unavailable", code: "resource_unavailable",
		msg: "Resource Unavailable: no capacity for the flex service tier right now. Retry later, or use the default service tier."}
}

// servedTier is the service tier an answer says it was served at.
func servedTier(c Call) string {
	if c.ServiceTier == "flex" {
		return "flex"
	}
	return "default"
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func openAICompletion(c Call, model, content, finishReason string) map[string]any {
	var text any = content
	if finishReason == "content_filter" {
		text = nil
	}
	return map[string]any{
		"id":                 "chatcmpl-" + c.RequestID,
		"object":             "chat.completion",
		"created":            time.Now().Unix(),
		"model":              model,
		"service_tier":       servedTier(c),
		"system_fingerprint": "fp_sim",
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": text, "refusal": nil, "annotations": []any{}},
			"logprobs":      nil,
			"finish_reason": finishReason,
		}},
		"usage": map[string]any{
			"prompt_tokens":     c.InputTokens,
			"completion_tokens": c.OutputTokens,
			"total_tokens":      c.InputTokens + c.OutputTokens,
			"prompt_tokens_details": map[string]any{
				"cached_tokens": 0, "audio_tokens": 0,
			},
			"completion_tokens_details": map[string]any{
				"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
			},
		},
	}
}
