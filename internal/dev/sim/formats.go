package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/onejob/onejob/internal/provider/webhook"
)

// failKind is a simulated failure, mapped by each format to its error shape.
type failKind int

const (
	failAuth failKind = iota
	failRateLimit
	failServer
	failBadRequest
	failModelTimeout
)

// format adapts the shared mode logic to one wire format.
type format struct {
	name            string
	requestIDHeader string
	authorized      func(r *http.Request, body []byte, key string) bool
	fail            func(w http.ResponseWriter, kind failKind, status int)
	structured      func(c Call, model string, obj map[string]any) any
	prose           func(w http.ResponseWriter, c Call, model string)
}

func (s *Simulator) serve(w http.ResponseWriter, r *http.Request, body []byte, c *Call, f format) {
	s.mu.Lock()
	opts := s.opts
	s.mu.Unlock()
	c.Format = f.name
	c.Path = r.URL.Path
	c.Authorized = opts.APIKey == "" || f.authorized(r, body, opts.APIKey)
	s.record(c)
	w.Header().Set(f.requestIDHeader, c.RequestID)

	if !c.Authorized {
		f.fail(w, failAuth, http.StatusUnauthorized)
		return
	}
	switch opts.Mode {
	case ModeHang:
		hang(r)
	case ModeRateLimited:
		w.Header().Set("Retry-After", opts.RetryAfter)
		f.fail(w, failRateLimit, http.StatusTooManyRequests)
	case ModeServerError:
		f.fail(w, failServer, opts.ErrorStatus)
	case ModeBadRequest:
		f.fail(w, failBadRequest, http.StatusBadRequest)
	case ModeModelTimeout:
		status := http.StatusGatewayTimeout
		if f.name == "bedrock" {
			status = http.StatusRequestTimeout
		}
		f.fail(w, failModelTimeout, status)
	case ModeMalformed:
		writeMalformed(w)
	case ModeProse:
		f.prose(w, *c, opts.Model)
	default:
		obj, err := opts.output(*c)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusOK, f.structured(*c, opts.Model, obj))
	}
}

func bearer(r *http.Request, _ []byte, key string) bool {
	return r.Header.Get("Authorization") == "Bearer "+key
}

// decode reads a POST body into v and returns the raw bytes (for signature
// checks); on failure it has already answered.
func decode(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if err := json.Unmarshal(body, v); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// OpenAI serves POST .../chat/completions in the OpenAI Chat Completions
// format with response_format json_schema.
func (s *Simulator) OpenAI() http.Handler {
	f := format{
		name:            "openai",
		requestIDHeader: "x-request-id",
		authorized:      bearer,
		fail: func(w http.ResponseWriter, kind failKind, status int) {
			typ := map[failKind]string{
				failAuth: "authentication_error", failRateLimit: "rate_limit_error", failServer: "server_error",
				failBadRequest: "invalid_request_error", failModelTimeout: "timeout",
			}[kind]
			writeJSON(w, status, map[string]any{"error": map[string]any{"type": typ, "message": "simulated " + typ, "code": nil}})
		},
		structured: func(c Call, model string, obj map[string]any) any {
			content, _ := json.Marshal(obj)
			return openAICompletion(c, model, string(content))
		},
		prose: func(w http.ResponseWriter, c Call, model string) {
			writeJSON(w, http.StatusOK, openAICompletion(c, model, Prose))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			Temperature         *float64 `json:"temperature"`
			MaxTokens           int      `json:"max_tokens"`
			MaxCompletionTokens int      `json:"max_completion_tokens"`
			ResponseFormat      struct {
				JSONSchema struct {
					Name   string          `json:"name"`
					Schema json.RawMessage `json:"schema"`
				} `json:"json_schema"`
			} `json:"response_format"`
		}
		raw, ok := decode(w, r, &body)
		if !ok {
			return
		}
		c := Call{
			IdempotencyKey: r.Header.Get("Idempotency-Key"),
			Model:          body.Model,
			Schema:         body.ResponseFormat.JSONSchema.Schema,
			ToolName:       body.ResponseFormat.JSONSchema.Name,
			Temperature:    body.Temperature,
			MaxTokens:      max(body.MaxTokens, body.MaxCompletionTokens),
		}
		for _, m := range body.Messages {
			switch m.Role {
			case "system", "developer":
				c.System = m.Content
			case "user":
				c.Prompt = m.Content
			}
		}
		s.serve(w, r, raw, &c, f)
	})
}

func openAICompletion(c Call, model, content string) map[string]any {
	return map[string]any{
		"id":      "chatcmpl-" + c.RequestID,
		"object":  "chat.completion",
		"created": 1767225600,
		"model":   model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": content, "refusal": nil},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
	}
}

// Anthropic serves POST /v1/messages in the Anthropic Messages format with a
// forced tool call.
func (s *Simulator) Anthropic() http.Handler {
	f := format{
		name:            "anthropic",
		requestIDHeader: "request-id",
		authorized: func(r *http.Request, _ []byte, key string) bool {
			return r.Header.Get("x-api-key") == key && r.Header.Get("anthropic-version") != ""
		},
		fail: func(w http.ResponseWriter, kind failKind, status int) {
			typ := map[failKind]string{
				failAuth: "authentication_error", failRateLimit: "rate_limit_error", failServer: "api_error",
				failBadRequest: "invalid_request_error", failModelTimeout: "timeout_error",
			}[kind]
			if status == 529 {
				typ = "overloaded_error"
			}
			writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": "simulated " + typ}})
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return anthropicMessage(c, model, "tool_use", map[string]any{
				"type": "tool_use", "id": "toolu_" + c.RequestID, "name": c.ToolName, "input": obj,
			})
		},
		prose: func(w http.ResponseWriter, c Call, model string) {
			writeJSON(w, http.StatusOK, anthropicMessage(c, model, "end_turn", map[string]any{"type": "text", "text": Prose}))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Model       string   `json:"model"`
			MaxTokens   int      `json:"max_tokens"`
			System      string   `json:"system"`
			Temperature *float64 `json:"temperature"`
			Messages    []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"input_schema"`
			} `json:"tools"`
			ToolChoice struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"tool_choice"`
		}
		raw, ok := decode(w, r, &body)
		if !ok {
			return
		}
		c := Call{
			IdempotencyKey: r.Header.Get("Idempotency-Key"),
			Model:          body.Model,
			System:         body.System,
			Temperature:    body.Temperature,
			MaxTokens:      body.MaxTokens,
			ToolName:       body.ToolChoice.Name,
		}
		for _, t := range body.Tools {
			if t.Name == body.ToolChoice.Name {
				c.Schema = t.InputSchema
			}
		}
		for _, m := range body.Messages {
			if m.Role == "user" {
				c.Prompt = m.Content
			}
		}
		s.serve(w, r, raw, &c, f)
	})
}

func anthropicMessage(c Call, model, stopReason string, block map[string]any) map[string]any {
	return map[string]any{
		"id":            "msg_" + c.RequestID,
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       []any{block},
		"stop_reason":   stopReason,
		"stop_sequence": nil,
		"usage":         map[string]any{"input_tokens": 10, "output_tokens": 10},
	}
}

// Bedrock serves POST /model/{modelId}/converse in the Bedrock Converse REST
// JSON format with a forced tool. The idempotency key is read from
// requestMetadata["idempotency_key"], where the adapter puts it.
func (s *Simulator) Bedrock() http.Handler {
	f := format{
		name:            "bedrock",
		requestIDHeader: "x-amzn-RequestId",
		authorized:      validSigV4,
		fail: func(w http.ResponseWriter, kind failKind, status int) {
			typ := map[failKind]string{
				failAuth: "UnrecognizedClientException", failRateLimit: "ThrottlingException",
				failServer: "ServiceUnavailableException", failBadRequest: "ValidationException",
				failModelTimeout: "ModelTimeoutException",
			}[kind]
			if kind == failServer && status == http.StatusInternalServerError {
				typ = "InternalServerException"
			}
			w.Header().Set("X-Amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazonaws.bedrock/")
			writeJSON(w, status, map[string]any{"message": "simulated " + typ})
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return bedrockConverse("tool_use", map[string]any{
				"toolUse": map[string]any{"toolUseId": "tooluse_" + c.RequestID, "name": c.ToolName, "input": obj},
			})
		},
		prose: func(w http.ResponseWriter, c Call, model string) {
			writeJSON(w, http.StatusOK, bedrockConverse("end_turn", map[string]any{"text": Prose}))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		modelID, found := converseModelID(r.URL)
		if !found {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"messages"`
			System []struct {
				Text string `json:"text"`
			} `json:"system"`
			InferenceConfig struct {
				MaxTokens   int      `json:"maxTokens"`
				Temperature *float64 `json:"temperature"`
			} `json:"inferenceConfig"`
			ToolConfig struct {
				Tools []struct {
					ToolSpec struct {
						Name        string `json:"name"`
						InputSchema struct {
							JSON json.RawMessage `json:"json"`
						} `json:"inputSchema"`
					} `json:"toolSpec"`
				} `json:"tools"`
				ToolChoice struct {
					Tool struct {
						Name string `json:"name"`
					} `json:"tool"`
				} `json:"toolChoice"`
			} `json:"toolConfig"`
			RequestMetadata map[string]string `json:"requestMetadata"`
		}
		raw, ok := decode(w, r, &body)
		if !ok {
			return
		}
		c := Call{
			IdempotencyKey: body.RequestMetadata["idempotency_key"],
			JobID:          body.RequestMetadata["job_id"],
			Model:          modelID,
			Temperature:    body.InferenceConfig.Temperature,
			MaxTokens:      body.InferenceConfig.MaxTokens,
			ToolName:       body.ToolConfig.ToolChoice.Tool.Name,
		}
		for _, t := range body.ToolConfig.Tools {
			if t.ToolSpec.Name == c.ToolName {
				c.Schema = t.ToolSpec.InputSchema.JSON
			}
		}
		for _, sb := range body.System {
			c.System += sb.Text
		}
		for _, m := range body.Messages {
			if m.Role == "user" {
				for _, b := range m.Content {
					c.Prompt += b.Text
				}
			}
		}
		s.serve(w, r, raw, &c, f)
	})
}

func converseModelID(u *url.URL) (string, bool) {
	p := u.EscapedPath()
	rest, ok := strings.CutPrefix(p, "/model/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/converse")
	if !ok || id == "" {
		return "", false
	}
	unescaped, err := url.PathUnescape(id)
	if err != nil {
		return "", false
	}
	return unescaped, true
}

func bedrockConverse(stopReason string, block map[string]any) map[string]any {
	return map[string]any{
		"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": []any{block}}},
		"stopReason": stopReason,
		"usage":      map[string]any{"inputTokens": 10, "outputTokens": 10, "totalTokens": 20},
		"metrics":    map[string]any{"latencyMs": 1},
	}
}

// Webhook serves POST on any path in the generic webhook format: the answer
// is {"output": {...}, "model": "..."}; prose is a text/plain body.
func (s *Simulator) Webhook() http.Handler {
	f := format{
		name:            "webhook",
		requestIDHeader: "X-Request-Id",
		authorized:      bearer,
		fail: func(w http.ResponseWriter, kind failKind, status int) {
			writeJSON(w, status, map[string]any{"error": http.StatusText(status)})
		},
		structured: func(c Call, model string, obj map[string]any) any {
			return map[string]any{"output": obj, "model": model}
		},
		prose: func(w http.ResponseWriter, c Call, model string) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(Prose))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body webhook.Request
		raw, ok := decode(w, r, &body)
		if !ok {
			return
		}
		c := Call{
			IdempotencyKey: r.Header.Get("Idempotency-Key"),
			JobID:          body.JobID,
			Attempt:        body.Attempt,
			JobType:        body.JobType,
			Prompt:         body.Prompt,
			Input:          body.Input,
		}
		s.serve(w, r, raw, &c, f)
	})
}
