package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
)

// The Anthropic simulator serves POST /v1/messages and POST
// /v1/messages/count_tokens as the Messages API reference describes them:
// the anthropic-version and x-api-key headers, every body member checked
// (required, types, enums, ranges, extra inputs), refused with the API's
// error body {"type":"error","error":{"type","message"},"request_id"}.

var (
	anthropicMessageMembers = []string{"model", "messages", "max_tokens", "container", "context_management", "mcp_servers",
		"metadata", "service_tier", "stop_sequences", "stream", "system", "temperature", "thinking", "tool_choice",
		"tools", "top_k", "top_p"}
	// count_tokens takes the prompt, not the sampling parameters.
	anthropicCountMembers = []string{"model", "messages", "context_management", "mcp_servers", "system", "thinking", "tool_choice", "tools"}
	anthropicRoles        = []string{"user", "assistant"}
	anthropicToolChoices  = []string{"auto", "any", "tool", "none"}
	anthropicVersions     = []string{"2023-06-01", "2023-01-01"}
	anthropicToolName     = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

func antInvalid(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: msg}
}

// anthropicRequest is what a valid request carries that the simulator uses.
type anthropicRequest struct {
	model, system, prompt string
	toolName              string
	schema                json.RawMessage
	strict                bool
	temperature           *float64
	maxTokens             int
	inputTokens           int
	stream                bool
}

// validateAnthropic checks a Messages (count=false) or count_tokens
// (count=true) request.
func validateAnthropic(r *http.Request, body []byte, opts Options, count bool) (anthropicRequest, *apiError) {
	var req anthropicRequest
	v := r.Header.Get("anthropic-version")
	if v == "" {
		return req, antInvalid("anthropic-version: header is required")
	}
	if !slices.Contains(anthropicVersions, v) {
		return req, antInvalid("anthropic-version: invalid version " + v)
	}
	o, ok := parseObject(body)
	if !ok {
		return req, antInvalid("The request body is not valid JSON.")
	}
	members := anthropicMessageMembers
	if count {
		members = anthropicCountMembers
	}
	if extra := o.unknown(members...); len(extra) > 0 {
		return req, antInvalid(extra[0] + ": Extra inputs are not permitted")
	}
	if !o.has("model") {
		return req, antInvalid("model: Field required")
	}
	model, ok := o.str("model")
	if !ok {
		return req, antInvalid("model: Input should be a valid string")
	}
	req.model = model
	if opts.Model != "" && model != opts.Model {
		return req, &apiError{status: http.StatusNotFound, typ: "not_found_error", msg: "model: " + model}
	}
	if !count {
		if !o.has("max_tokens") {
			return req, antInvalid("max_tokens: Field required")
		}
		n, ok := o.integer("max_tokens")
		if !ok {
			return req, antInvalid("max_tokens: Input should be a valid integer")
		}
		if n < 1 {
			return req, antInvalid("max_tokens: Input should be greater than or equal to 1")
		}
		if opts.MaxOutputTokens > 0 && n > opts.MaxOutputTokens {
			return req, antInvalid(fmt.Sprintf("max_tokens: %d > %d, which is the maximum allowed number of output tokens for %s", n, opts.MaxOutputTokens, model))
		}
		req.maxTokens = n
		if o.has("temperature") {
			t, ok := o.num("temperature")
			if !ok {
				return req, antInvalid("temperature: Input should be a valid number")
			}
			if t < 0 {
				return req, antInvalid("temperature: Input should be greater than or equal to 0")
			}
			if t > 1 {
				return req, antInvalid("temperature: Input should be less than or equal to 1")
			}
			req.temperature = &t
		}
		if o.has("stream") {
			if jsonKind(o["stream"]) != "boolean" {
				return req, antInvalid("stream: Input should be a valid boolean")
			}
			_ = json.Unmarshal(o["stream"], &req.stream)
		}
	}
	if o.has("system") {
		switch jsonKind(o["system"]) {
		case "string":
			req.system, _ = o.str("system")
		case "array":
			req.system = string(o["system"])
		default:
			return req, antInvalid("system: Input should be a valid string or a list of text blocks")
		}
		req.inputTokens += Tokens(req.system)
	}

	if !o.has("messages") {
		return req, antInvalid("messages: Field required")
	}
	msgs, ok := o.array("messages")
	if !ok {
		return req, antInvalid("messages: Input should be a valid list")
	}
	if len(msgs) == 0 {
		return req, antInvalid("messages: at least one message is required")
	}
	for i, raw := range msgs {
		at := fmt.Sprintf("messages.%d", i)
		m, ok := parseObject(raw)
		if !ok {
			return req, antInvalid(at + ": Input should be a valid dictionary")
		}
		if extra := m.unknown("role", "content"); len(extra) > 0 {
			return req, antInvalid(at + "." + extra[0] + ": Extra inputs are not permitted")
		}
		if !m.has("role") {
			return req, antInvalid(at + ".role: Field required")
		}
		role, _ := m.str("role")
		if !slices.Contains(anthropicRoles, role) {
			return req, antInvalid(at + ".role: Input should be " + orList(anthropicRoles))
		}
		if !m.has("content") {
			return req, antInvalid(at + ".content: Field required")
		}
		content := ""
		switch jsonKind(m["content"]) {
		case "string":
			content, _ = m.str("content")
		case "array":
			content = string(m["content"])
		default:
			return req, antInvalid(at + ".content: Input should be a valid string or a list of content blocks")
		}
		if role == "user" {
			req.prompt = content
		}
		req.inputTokens += messageOverhead + Tokens(content)
	}

	tools := map[string]json.RawMessage{}
	strictTools := map[string]bool{}
	if o.has("tools") {
		list, ok := o.array("tools")
		if !ok {
			return req, antInvalid("tools: Input should be a valid list")
		}
		for i, raw := range list {
			at := fmt.Sprintf("tools.%d", i)
			t, ok := parseObject(raw)
			if !ok {
				return req, antInvalid(at + ": Input should be a valid dictionary")
			}
			if extra := t.unknown("name", "description", "input_schema", "type", "cache_control", "strict"); len(extra) > 0 {
				return req, antInvalid(at + "." + extra[0] + ": Extra inputs are not permitted")
			}
			name, _ := t.str("name")
			if !t.has("name") {
				return req, antInvalid(at + ".name: Field required")
			}
			if !anthropicToolName.MatchString(name) {
				return req, antInvalid(at + ".name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
			}
			if !t.has("input_schema") {
				return req, antInvalid(at + ".input_schema: Field required")
			}
			schema, ok := t.child("input_schema")
			if !ok {
				return req, antInvalid(at + ".input_schema: Input should be a valid dictionary")
			}
			if typ, _ := schema.str("type"); typ != "object" {
				return req, antInvalid(at + ".input_schema.type: Input should be 'object'")
			}
			if t.has("strict") {
				if jsonKind(t["strict"]) != "boolean" {
					return req, antInvalid(at + ".strict: Input should be a valid boolean")
				}
				var strict bool
				_ = json.Unmarshal(t["strict"], &strict)
				if p := strictSchemaProblem(t["input_schema"], claudeStrictDialect); strict && p != nil {
					return req, antInvalid(at + ".input_schema: " + p.claude())
				}
				strictTools[name] = strict
			}
			desc, _ := t.str("description")
			tools[name] = t["input_schema"]
			req.inputTokens += Tokens(name) + Tokens(desc) + jsonTokens(t["input_schema"])
		}
	}
	if o.has("tool_choice") {
		tc, ok := o.child("tool_choice")
		if !ok {
			return req, antInvalid("tool_choice: Input should be a valid dictionary")
		}
		typ, _ := tc.str("type")
		if !slices.Contains(anthropicToolChoices, typ) {
			return req, antInvalid("tool_choice.type: Input should be " + orList(anthropicToolChoices))
		}
		if typ == "tool" {
			name, _ := tc.str("name")
			if !tc.has("name") {
				return req, antInvalid("tool_choice.name: Field required")
			}
			schema, found := tools[name]
			if !found {
				return req, antInvalid(fmt.Sprintf("tool_choice.name: Tool '%s' not found in tools", name))
			}
			req.toolName, req.schema, req.strict = name, schema, strictTools[name]
		}
		if len(tools) > 0 && (typ == "tool" || typ == "any") {
			req.inputTokens += toolUseSystemPrompt
		}
	}
	return req, nil
}

// Anthropic serves POST /v1/messages in the Anthropic Messages format with a
// forced tool call, and POST /v1/messages/count_tokens.
func (s *Simulator) Anthropic() http.Handler {
	f := format{
		name:            "anthropic",
		requestIDHeader: "request-id",
		authorized: func(r *http.Request, _ []byte, key string) bool {
			return r.Header.Get("x-api-key") == key
		},
		refuse: func(w http.ResponseWriter, c Call, e *apiError) {
			writeJSON(w, e.status, map[string]any{
				"type":       "error",
				"error":      map[string]any{"type": e.typ, "message": e.msg},
				"request_id": c.RequestID,
			})
		},
		fail: func(kind failKind, status int) *apiError {
			switch kind {
			case failAuth:
				return &apiError{status: status, typ: "authentication_error", msg: "invalid x-api-key"}
			case failRateLimit:
				return &apiError{status: status, typ: "rate_limit_error", msg: "Number of requests has exceeded your rate limit."}
			case failQuota:
				return &apiError{status: http.StatusPaymentRequired, typ: "billing_error", msg: "There's an issue with your billing or payment information."}
			case failBadRequest:
				return antInvalid("simulated invalid request")
			case failModelTimeout:
				return &apiError{status: status, typ: "timeout_error", msg: "Request timed out."}
			}
			if status == 529 {
				return &apiError{status: status, typ: "overloaded_error", msg: "Overloaded"}
			}
			return &apiError{status: status, typ: "api_error", msg: "Internal server error"}
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return anthropicMessage(c, model, "tool_use", []any{map[string]any{
				"type": "tool_use", "id": "toolu_" + c.RequestID, "name": c.ToolName, "input": obj,
			}})
		},
		prose: func(c Call, model string) any {
			return anthropicMessage(c, model, "end_turn", []any{map[string]any{"type": "text", "text": Prose}})
		},
		filtered: func(c Call, model string) any { return anthropicMessage(c, model, "refusal", []any{}) },
		truncated: func(c Call, model string, obj map[string]any) any {
			return anthropicMessage(c, model, "max_tokens", []any{map[string]any{
				"type": "tool_use", "id": "toolu_" + c.RequestID, "name": c.ToolName, "input": cut(obj),
			}})
		},
		// The safety classifier's refusal is the API's one stop reason for
		// both.
		refused: func(c Call, model string) any { return anthropicMessage(c, model, "refusal", []any{}) },
		stream:  anthropicStream,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count := r.URL.Path == "/v1/messages/count_tokens"
		if r.Method != http.MethodPost || (r.URL.Path != "/v1/messages" && !count) {
			f.refuse(w, Call{}, &apiError{status: http.StatusNotFound, typ: "not_found_error", msg: "Not Found"})
			return
		}
		body, ok := readBody(r)
		if !ok {
			return
		}
		c := Call{IdempotencyKey: r.Header.Get("Idempotency-Key")}
		var req anthropicRequest
		validate := func(opts Options) (*apiError, func(*Call)) {
			var e *apiError
			req, e = validateAnthropic(r, body, opts, count)
			return e, func(c *Call) {
				c.Model, c.System, c.Prompt, c.ToolName, c.Schema, c.Strict = req.model, req.system, req.prompt, req.toolName, req.schema, req.strict
				c.Temperature, c.MaxTokens, c.InputTokens = req.temperature, req.maxTokens, req.inputTokens
				c.Stream = req.stream
			}
		}
		if count {
			s.countTokens(w, r, body, &c, f, validate, func(c Call) any { return map[string]any{"input_tokens": c.InputTokens} })
			return
		}
		if s.admit(w, r, body, &c, f, validate) {
			s.serve(w, r, body, &c, f)
		}
	})
}

// countTokens answers a token-counting request: authenticated and
// validated like an inference request, recorded apart from them.
func (s *Simulator) countTokens(w http.ResponseWriter, r *http.Request, body []byte, c *Call, f format,
	validate func(Options) (*apiError, func(*Call)), answer func(Call) any) {
	opts := s.options()
	c.Format, c.Path = f.name, r.URL.Path
	c.Authorized = opts.APIKey == "" || f.authorized(r, body, opts.APIKey)
	var e *apiError
	if !c.Authorized {
		e = f.fail(failAuth, http.StatusUnauthorized)
	} else {
		var fill func(*Call)
		e, fill = validate(opts)
		if fill != nil {
			fill(c)
		}
	}
	if e != nil {
		c.Refused = e.Error()
	}
	s.recordCount(c)
	w.Header().Set(f.requestIDHeader, c.RequestID)
	if e != nil {
		f.refuse(w, *c, e)
		return
	}
	writeJSON(w, http.StatusOK, answer(*c))
}

func anthropicMessage(c Call, model, stopReason string, content []any) map[string]any {
	return map[string]any{
		"id":            "msg_" + c.RequestID,
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stopReason,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                c.InputTokens,
			"output_tokens":               c.OutputTokens,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
			"service_tier":                "standard",
		},
	}
}
