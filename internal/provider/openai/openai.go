// Package openai adapts OpenAI-compatible Chat Completions APIs (OpenAI,
// vLLM, Ollama, ...) to provider.Provider, using response_format json_schema
// for structured output.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// DefaultBaseURL is OpenAI's API base; vLLM and Ollama serve the same paths
// under their own base (e.g. http://host:8000/v1, http://host:11434/v1).
const DefaultBaseURL = "https://api.openai.com/v1"

// Token-limit field names; see Config.MaxTokensField.
const (
	FieldMaxTokens           = "max_tokens"
	FieldMaxCompletionTokens = "max_completion_tokens"
)

// ErrInvalidConfig is wrapped by New's validation errors.
var ErrInvalidConfig = errors.New("invalid openai config")

// Config configures one OpenAI-compatible provider.
type Config struct {
	Name    string
	BaseURL string // default DefaultBaseURL
	Model   string
	// APIKey is sent as a bearer token; empty for servers without auth.
	APIKey provider.Secret
	// MaxTokensField is max_tokens (default: understood by every compatible
	// server) or max_completion_tokens (required by OpenAI reasoning models).
	MaxTokensField string
	HTTPClient     *http.Client
	Logger         *slog.Logger
	Now            func() time.Time
}

func (c *Config) validate() error {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.MaxTokensField == "" {
		c.MaxTokensField = FieldMaxTokens
	}
	var problems []string
	if c.Name == "" {
		problems = append(problems, "name is required")
	}
	if c.Model == "" {
		problems = append(problems, "model is required")
	}
	if err := provider.ValidateBaseURL(c.BaseURL); err != nil {
		problems = append(problems, err.Error())
	}
	if c.MaxTokensField != FieldMaxTokens && c.MaxTokensField != FieldMaxCompletionTokens {
		problems = append(problems, "max_tokens_field must be max_tokens or max_completion_tokens")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// Adapter calls POST {base}/chat/completions.
type Adapter struct {
	provider.HTTPBase
	cfg Config
}

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "x-request-id"), cfg: cfg}, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type jsonSchemaFormat struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

type responseFormat struct {
	Type       string           `json:"type"`
	JSONSchema jsonSchemaFormat `json:"json_schema"`
}

type completion struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// Call implements provider.Provider.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Response{}, err
	}

	var messages []message
	if req.System != "" {
		messages = append(messages, message{Role: "system", Content: req.System})
	}
	messages = append(messages, message{Role: "user", Content: req.Prompt})
	body := map[string]any{
		"model":       a.cfg.Model,
		"messages":    messages,
		"temperature": req.Temperature,
		"response_format": responseFormat{
			Type: "json_schema",
			JSONSchema: jsonSchemaFormat{
				Name:   provider.ToolName(req.JobType),
				Schema: req.OutputSchema,
				Strict: true,
			},
		},
	}
	if req.MaxOutputTokens > 0 {
		body[a.cfg.MaxTokensField] = req.MaxOutputTokens
	}
	header := http.Header{}
	header.Set("Idempotency-Key", req.IdempotencyKey)
	if !a.cfg.APIKey.IsZero() {
		header.Set("Authorization", "Bearer "+a.cfg.APIKey.Reveal())
	}

	hresp, err := a.Client().PostJSON(ctx, strings.TrimRight(a.cfg.BaseURL, "/")+"/chat/completions", header, body)
	if err != nil {
		return provider.Response{}, err
	}
	var c completion
	if err := json.Unmarshal(hresp.Body, &c); err != nil {
		return provider.Response{}, a.Client().Malformed(hresp, "decode chat completion", err)
	}
	if hresp.RequestID == "" {
		// vLLM and Ollama may omit x-request-id; the completion id still
		// identifies the call in their logs.
		hresp.RequestID = c.ID
	}
	if len(c.Choices) == 0 {
		return provider.Response{}, a.Client().Malformed(hresp, "no choices in chat completion", nil)
	}
	choice := c.Choices[0]
	if r := choice.Message.Refusal; r != nil && *r != "" {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "model refused: "+provider.Excerpt(*r))
	}
	if choice.FinishReason == "length" {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "output truncated at the token limit")
	}
	content := ""
	if choice.Message.Content != nil {
		content = *choice.Message.Content
	}
	if !provider.IsJSONObject([]byte(content)) {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "message content is not a JSON object: "+provider.Excerpt(content))
	}
	model := c.Model
	if model == "" {
		model = a.cfg.Model
	}
	return provider.Response{
		Output:            json.RawMessage(strings.TrimSpace(content)),
		ProviderRequestID: hresp.RequestID,
		Model:             model,
	}, nil
}
