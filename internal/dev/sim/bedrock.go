package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// The Bedrock simulator serves POST /model/{modelId}/converse and POST
// /model/{modelId}/count-tokens as the Bedrock Runtime API reference
// describes them: SigV4, the Converse members and their constraints
// (required, enums, ranges, lengths, patterns, unions with exactly one
// member), the model's own limits, refused as the service does: the error
// code in X-Amzn-ErrorType and {"message"} in the body, validation messages
// in AWS's "1 validation error detected: Value … at '…' failed to satisfy
// constraint: …" form. The service's documentation does not say what it
// does with members it does not know; the simulator refuses them, which
// the SDK-built requests of the adapter never send.

var (
	converseMembers = []string{"messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
		"additionalModelRequestFields", "promptVariables", "additionalModelResponseFieldPaths", "requestMetadata",
		"performanceConfig", "serviceTier"}
	converseTokensMembers = []string{"messages", "system", "toolConfig", "additionalModelRequestFields"}
	bedrockRoles          = []string{"user", "assistant"}
	bedrockContentMembers = []string{"text", "image", "document", "video", "audio", "toolUse", "toolResult",
		"guardContent", "cachePoint", "reasoningContent", "citationsContent", "searchResult"}
	bedrockToolName      = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	bedrockMetadataValue = regexp.MustCompile(`^[a-zA-Z0-9\s:_@$#=/+,\-.]{0,256}$`)
)

// bedrockForcesTool: Bedrock documents toolChoice "tool" for Anthropic
// Claude 3 and later, Amazon Nova and Mistral Large 2.
func bedrockForcesTool(model string) bool {
	id := bedrockBaseModel(model)
	if strings.HasPrefix(id, "anthropic.claude-v") || strings.HasPrefix(id, "anthropic.claude-instant") {
		return false
	}
	for _, f := range []string{"anthropic.claude-", "amazon.nova-", "mistral.mistral-large-2"} {
		if strings.HasPrefix(id, f) {
			return true
		}
	}
	return false
}

// bedrockCounts: CountTokens is documented for Anthropic Claude models.
func bedrockCounts(model string) bool {
	id := bedrockBaseModel(model)
	return strings.HasPrefix(id, "anthropic.claude-") && !strings.HasPrefix(id, "anthropic.claude-v") && !strings.HasPrefix(id, "anthropic.claude-instant")
}

// bedrockBaseModel strips an ARN and a cross-region inference profile
// prefix (us.anthropic.claude-… is anthropic.claude-…).
func bedrockBaseModel(model string) string {
	if i := strings.LastIndex(model, "/"); i >= 0 {
		model = model[i+1:]
	}
	for _, geo := range []string{"us-gov.", "us.", "eu.", "apac.", "jp.", "au.", "ca.", "global."} {
		if rest, ok := strings.CutPrefix(model, geo); ok {
			return rest
		}
	}
	return model
}

func validation(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "ValidationException", msg: msg}
}

// constraint is AWS's validation message for one member.
func constraint(value, at, rule string) *apiError {
	return validation(fmt.Sprintf("1 validation error detected: Value %s at '%s' failed to satisfy constraint: %s", value, at, rule))
}

func notNull(at string) *apiError { return constraint("null", at, "Member must not be null") }

// bedrockRequest is what a valid request carries that the simulator uses.
type bedrockRequest struct {
	system, prompt, toolName string
	schema                   json.RawMessage
	strict                   bool
	temperature              *float64
	maxTokens                int
	metadata                 map[string]string
	inputTokens              int
	serviceTier              string
}

// validateConverse checks a Converse body (or a CountTokens converse input,
// whose members are fewer) for the model.
func validateConverse(o object, model string, opts Options, tokensOnly bool) (bedrockRequest, *apiError) {
	var req bedrockRequest
	members := converseMembers
	if tokensOnly {
		members = converseTokensMembers
	}
	if extra := o.unknown(members...); len(extra) > 0 {
		return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "Unknown member: " + extra[0]}
	}
	if !o.has("messages") {
		return req, notNull("messages")
	}
	msgs, ok := o.array("messages")
	if !ok {
		return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "messages must be a list"}
	}
	for i, raw := range msgs {
		at := fmt.Sprintf("messages.%d.member", i+1)
		m, ok := parseObject(raw)
		if !ok {
			return req, notNull(at)
		}
		role, _ := m.str("role")
		if !m.has("role") {
			return req, notNull(at + ".role")
		}
		if !slices.Contains(bedrockRoles, role) {
			return req, constraint("'"+role+"'", at+".role", "Member must satisfy enum value set: [user, assistant]")
		}
		blocks, ok := m.array("content")
		if !m.has("content") || !ok {
			return req, notNull(at + ".content")
		}
		for j, b := range blocks {
			block, ok := parseObject(b)
			set := 0
			for k := range block {
				if slices.Contains(bedrockContentMembers, k) {
					set++
				}
			}
			if !ok || set != 1 || len(block) != 1 {
				return req, validation(fmt.Sprintf("The content block at messages.%d.content.%d must set exactly one of %s.", i, j, strings.Join(bedrockContentMembers, ", ")))
			}
			if text, ok := block.str("text"); ok && role == "user" {
				req.prompt += text
				req.inputTokens += Tokens(text)
			}
		}
		req.inputTokens += messageOverhead
	}
	if o.has("system") {
		blocks, _ := o.array("system")
		for _, b := range blocks {
			block, _ := parseObject(b)
			text, _ := block.str("text")
			req.system += text
			req.inputTokens += Tokens(text)
		}
	}
	if o.has("inferenceConfig") {
		ic, ok := o.child("inferenceConfig")
		if !ok {
			return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "inferenceConfig must be a structure"}
		}
		if extra := ic.unknown("maxTokens", "temperature", "topP", "stopSequences"); len(extra) > 0 {
			return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "Unknown member: inferenceConfig." + extra[0]}
		}
		if ic.has("maxTokens") {
			n, _ := ic.integer("maxTokens")
			if n < 1 {
				return req, constraint("'"+number(float64(n))+"'", "inferenceConfig.maxTokens", "Member must have value greater than or equal to 1")
			}
			if opts.MaxOutputTokens > 0 && n > opts.MaxOutputTokens {
				return req, validation(fmt.Sprintf("The maximum tokens you requested exceeds the model limit of %d. Try again with a maximum tokens value that is lower than %d.", opts.MaxOutputTokens, opts.MaxOutputTokens))
			}
			req.maxTokens = n
		}
		for _, p := range []string{"temperature", "topP"} {
			if !ic.has(p) {
				continue
			}
			v, _ := ic.num(p)
			if v < 0 {
				return req, constraint("'"+number(v)+"'", "inferenceConfig."+p, "Member must have value greater than or equal to 0")
			}
			if v > 1 {
				return req, constraint("'"+number(v)+"'", "inferenceConfig."+p, "Member must have value less than or equal to 1")
			}
			if p == "temperature" {
				req.temperature = &v
			}
		}
		if ss, ok := ic.array("stopSequences"); ok && len(ss) > 4 {
			return req, constraint(fmt.Sprintf("'%d items'", len(ss)), "inferenceConfig.stopSequences", "Member must have length less than or equal to 4")
		}
	}
	if o.has("toolConfig") {
		if e := req.validateToolConfig(o, model); e != nil {
			return req, e
		}
	}
	if o.has("requestMetadata") {
		md, ok := o.child("requestMetadata")
		if !ok {
			return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "requestMetadata must be a map"}
		}
		if len(md) > 16 {
			return req, constraint("map", "requestMetadata", "Member must have length less than or equal to 16")
		}
		req.metadata = map[string]string{}
		for k := range md {
			v, _ := md.str(k)
			if len(k) < 1 || len(k) > 256 || !bedrockMetadataValue.MatchString(k) {
				return req, constraint("'"+k+"'", "requestMetadata", "Map keys must satisfy constraint: [Member must have length between 1 and 256, Member must satisfy regular expression pattern: [a-zA-Z0-9\\s:_@$#=/+,-.]{1,256}]")
			}
			if !bedrockMetadataValue.MatchString(v) {
				return req, constraint("'"+v+"'", "requestMetadata."+k, "Map value must satisfy constraint: [Member must have length less than or equal to 256, Member must satisfy regular expression pattern: [a-zA-Z0-9\\s:_@$#=/+,-.]{0,256}]")
			}
			req.metadata[k] = v
		}
	}
	if o.has("serviceTier") {
		st, ok := o.child("serviceTier")
		if !ok {
			return req, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "serviceTier must be a structure"}
		}
		typ, _ := st.str("type")
		if !st.has("type") {
			return req, notNull("serviceTier.type")
		}
		if !slices.Contains(bedrockServiceTiers, typ) {
			return req, constraint("'"+typ+"'", "serviceTier.type", "Member must satisfy enum value set: [priority, default, flex, reserved]")
		}
		if typ == "flex" && strings.Contains(model, "anthropic.") {
			return req, validation("The flex service tier is not supported for this model.")
		}
		req.serviceTier = typ
	}
	return req, nil
}

// bedrockServiceTiers are ServiceTierType's values (API_runtime_ServiceTier:
// priority, default, flex, reserved). Flex "differs by provider" and is
// not offered for Anthropic's models (AWS re:Post's accepted answer);
// the refusal's text is the simulator's own.
var bedrockServiceTiers = []string{"priority", "default", "flex", "reserved"}

func (req *bedrockRequest) validateToolConfig(o object, model string) *apiError {
	tc, ok := o.child("toolConfig")
	if !ok {
		return &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "toolConfig must be a structure"}
	}
	tools, ok := tc.array("tools")
	if !tc.has("tools") || !ok {
		return notNull("toolConfig.tools")
	}
	if len(tools) < 1 {
		return constraint("'[]'", "toolConfig.tools", "Member must have length greater than or equal to 1")
	}
	specs := map[string]json.RawMessage{}
	strictSpecs := map[string]bool{}
	for i, raw := range tools {
		at := fmt.Sprintf("toolConfig.tools.%d.member", i+1)
		t, _ := parseObject(raw)
		spec, ok := t.child("toolSpec")
		if !ok {
			if t.has("cachePoint") || t.has("systemTool") {
				continue
			}
			return validation("The tool at " + at + " must set exactly one of toolSpec, systemTool, cachePoint.")
		}
		name, _ := spec.str("name")
		if !spec.has("name") {
			return notNull(at + ".toolSpec.name")
		}
		if !bedrockToolName.MatchString(name) {
			return constraint("'"+name+"'", at+".toolSpec.name", "Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+")
		}
		is, ok := spec.child("inputSchema")
		if !spec.has("inputSchema") || !ok {
			return notNull(at + ".toolSpec.inputSchema")
		}
		if !is.has("json") {
			return validation("The inputSchema at " + at + ".toolSpec must set json.")
		}
		if spec.has("strict") {
			if jsonKind(spec["strict"]) != "boolean" {
				return &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "strict must be a boolean"}
			}
			var strict bool
			_ = json.Unmarshal(spec["strict"], &strict)
			// Bedrock applies Claude's structured-output subset to its
			// Claude models (its user guide's "Get validated JSON results
			// from models").
			if p := strictSchemaProblem(is["json"], claudeStrictDialect); strict && p != nil {
				return validation("The JSON schema of " + at + ".toolSpec.inputSchema is not supported for strict tool use: " + p.claude())
			}
			strictSpecs[name] = strict
		}
		desc, _ := spec.str("description")
		specs[name] = is["json"]
		req.inputTokens += Tokens(name) + Tokens(desc) + jsonTokens(is["json"])
	}
	if !tc.has("toolChoice") {
		return nil
	}
	choice, _ := tc.child("toolChoice")
	if choice.has("tool") {
		if !bedrockForcesTool(model) {
			return validation("This model doesn't support the toolConfig.toolChoice.tool field. Remove toolConfig.toolChoice.tool and try again.")
		}
		tool, _ := choice.child("tool")
		name, _ := tool.str("name")
		schema, found := specs[name]
		if !found {
			return validation(fmt.Sprintf("The tool %s named by toolConfig.toolChoice.tool is not in toolConfig.tools.", name))
		}
		req.toolName, req.schema, req.strict = name, schema, strictSpecs[name]
		req.inputTokens += toolUseSystemPrompt
	}
	return nil
}

// Bedrock serves POST /model/{modelId}/converse in the Bedrock Converse REST
// JSON format with a forced tool, POST /model/{modelId}/converse-stream
// (the same, as ConverseStream's event stream: stream_bedrock.go), and
// POST /model/{modelId}/count-tokens.
// The idempotency key is read from requestMetadata["idempotency_key"],
// where the adapter puts it.
func (s *Simulator) Bedrock() http.Handler {
	f := format{
		name:            "bedrock",
		requestIDHeader: "x-amzn-RequestId",
		authorized:      validSigV4,
		refuse: func(w http.ResponseWriter, _ Call, e *apiError) {
			w.Header().Set("X-Amzn-ErrorType", e.typ+":http://internal.amazon.com/coral/com.amazonaws.bedrock/")
			writeJSON(w, e.status, map[string]any{"message": e.msg})
		},
		fail: func(kind failKind, status int) *apiError {
			switch kind {
			case failAuth:
				return &apiError{status: http.StatusForbidden, typ: "InvalidSignatureException",
					msg: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."}
			case failRateLimit:
				return &apiError{status: status, typ: "ThrottlingException", msg: "Too many requests, please wait before trying again."}
			case failQuota:
				return &apiError{status: http.StatusBadRequest, typ: "ServiceQuotaExceededException", msg: "Your request exceeds the service quota for your account."}
			case failBadRequest:
				return validation("simulated invalid request")
			case failModelTimeout:
				return &apiError{status: status, typ: "ModelTimeoutException", msg: "Model has timed out in processing the request."}
			}
			if status == http.StatusInternalServerError {
				return &apiError{status: status, typ: "InternalServerException", msg: "The server encountered an internal error."}
			}
			return &apiError{status: status, typ: "ServiceUnavailableException", msg: "The service is unavailable. Try again later."}
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return bedrockConverse(c, "tool_use", []any{map[string]any{
				"toolUse": map[string]any{"toolUseId": "tooluse_" + c.RequestID, "name": c.ToolName, "input": obj},
			}})
		},
		prose: func(c Call, model string) any {
			return bedrockConverse(c, "end_turn", []any{map[string]any{"text": Prose}})
		},
		filtered: func(c Call, model string) any { return bedrockConverse(c, "content_filtered", []any{}) },
		truncated: func(c Call, model string, obj map[string]any) any {
			return bedrockConverse(c, "max_tokens", []any{map[string]any{
				"toolUse": map[string]any{"toolUseId": "tooluse_" + c.RequestID, "name": c.ToolName, "input": cut(obj)},
			}})
		},
		// Converse has no refusal stop reason: a guardrail's refusal, with
		// its configured message.
		refused: func(c Call, model string) any {
			return bedrockConverse(c, "guardrail_intervened", []any{map[string]any{"text": RefusalText}})
		},
		stream: bedrockStream,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		modelID, op, found := bedrockOperation(r.URL)
		if !found || r.Method != http.MethodPost {
			f.refuse(w, Call{}, &apiError{status: http.StatusNotFound, typ: "UnknownOperationException", msg: "Unknown operation " + r.Method + " " + r.URL.Path})
			return
		}
		body, ok := readBody(r)
		if !ok {
			return
		}
		c := Call{Model: modelID}
		var req bedrockRequest
		validate := func(opts Options) (*apiError, func(*Call)) {
			var e *apiError
			req, e = validateBedrock(body, modelID, op, opts)
			return e, func(c *Call) {
				c.IdempotencyKey, c.JobID = req.metadata["idempotency_key"], req.metadata["job_id"]
				c.System, c.Prompt, c.ToolName, c.Schema, c.Strict = req.system, req.prompt, req.toolName, req.schema, req.strict
				c.Temperature, c.MaxTokens, c.InputTokens = req.temperature, req.maxTokens, req.inputTokens
				c.Stream = op == "converse-stream"
				c.ServiceTier = req.serviceTier
			}
		}
		if op == "count-tokens" {
			s.countTokens(w, r, body, &c, f, validate, func(c Call) any { return map[string]any{"inputTokens": c.InputTokens} })
			return
		}
		if s.admit(w, r, body, &c, f, validate) {
			s.serve(w, r, body, &c, f)
		}
	})
}

// validateBedrock checks a Converse or CountTokens body for the model.
func validateBedrock(body []byte, modelID, op string, opts Options) (bedrockRequest, *apiError) {
	o, ok := parseObject(body)
	if !ok {
		return bedrockRequest{}, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "The request body is not valid JSON."}
	}
	if opts.Model != "" && modelID != opts.Model {
		return bedrockRequest{}, validation("The provided model identifier is invalid.")
	}
	if op == "converse" || op == "converse-stream" {
		return validateConverse(o, modelID, opts, false)
	}
	if extra := o.unknown("input"); len(extra) > 0 {
		return bedrockRequest{}, &apiError{status: http.StatusBadRequest, typ: "SerializationException", msg: "Unknown member: " + extra[0]}
	}
	in, ok := o.child("input")
	if !o.has("input") || !ok {
		return bedrockRequest{}, notNull("input")
	}
	if !bedrockCounts(modelID) {
		return bedrockRequest{}, validation("The provided model doesn't support counting tokens.")
	}
	conv, ok := in.child("converse")
	if !ok {
		return bedrockRequest{}, validation("The simulator counts converse input only.")
	}
	return validateConverse(conv, modelID, opts, true)
}

// bedrockOperation splits /model/{modelId}/{converse|converse-stream|count-tokens}.
func bedrockOperation(u *url.URL) (modelID, op string, ok bool) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/model/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, "/")
	if i <= 0 {
		return "", "", false
	}
	id, op := rest[:i], rest[i+1:]
	if op != "converse" && op != "converse-stream" && op != "count-tokens" {
		return "", "", false
	}
	unescaped, err := url.PathUnescape(id)
	if err != nil {
		return "", "", false
	}
	return unescaped, op, true
}

func bedrockConverse(c Call, stopReason string, content []any) map[string]any {
	return map[string]any{
		"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
		"stopReason": stopReason,
		"usage": map[string]any{
			"inputTokens":  c.InputTokens,
			"outputTokens": c.OutputTokens,
			"totalTokens":  c.InputTokens + c.OutputTokens,
		},
		"metrics": map[string]any{"latencyMs": 1},
	}
}
