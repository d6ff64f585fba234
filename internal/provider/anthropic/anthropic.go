// Package anthropic adapts the Anthropic Messages API to provider.Provider.
// Structured output is obtained by forcing a single tool whose input_schema is
// the job type's output schema; the tool call's input is the output.
package anthropic

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

const (
	// DefaultBaseURL is Anthropic's API base.
	DefaultBaseURL = "https://api.anthropic.com"
	// APIVersion is the anthropic-version header value.
	APIVersion = "2023-06-01"
	// DefaultMaxTokens applies when the request sets none: the API requires one.
	DefaultMaxTokens = 1024
)

// ErrInvalidConfig is wrapped by New's validation errors.
var ErrInvalidConfig = errors.New("invalid anthropic config")

// Config configures one Anthropic provider.
type Config struct {
	Name       string
	BaseURL    string // default DefaultBaseURL
	Model      string
	APIKey     provider.Secret
	HTTPClient *http.Client
	Logger     *slog.Logger
	Now        func() time.Time
}

func (c *Config) validate() error {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	var problems []string
	if c.Name == "" {
		problems = append(problems, "name is required")
	}
	if c.Model == "" {
		problems = append(problems, "model is required")
	}
	if c.APIKey.IsZero() {
		problems = append(problems, "api key is required")
	}
	if err := provider.ValidateBaseURL(c.BaseURL); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// Adapter calls POST {base}/v1/messages.
type Adapter struct {
	provider.HTTPBase
	cfg Config
}

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "request-id"), cfg: cfg}, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type messagesRequest struct {
	Model       string    `json:"model"`
	MaxTokens   int       `json:"max_tokens"`
	System      string    `json:"system,omitempty"`
	Temperature float64   `json:"temperature"`
	Messages    []message `json:"messages"`
	Tools       []tool    `json:"tools"`
	ToolChoice  struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type messagesResponse struct {
	ID         string `json:"id"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
		Text  string          `json:"text"`
	} `json:"content"`
}

// Call implements provider.Provider. A 529 (overloaded) is retryable through
// provider.ClassifyStatus.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Response{}, err
	}

	toolName := provider.ToolName(req.JobType)
	body := messagesRequest{
		Model:       a.cfg.Model,
		MaxTokens:   req.MaxOutputTokens,
		System:      req.System,
		Temperature: req.Temperature,
		Messages:    []message{{Role: "user", Content: req.Prompt}},
		Tools: []tool{{
			Name:        toolName,
			Description: "Record the " + req.JobType + " result. Always call this tool with the complete result.",
			InputSchema: req.OutputSchema,
		}},
	}
	if body.MaxTokens <= 0 {
		body.MaxTokens = DefaultMaxTokens
	}
	body.ToolChoice.Type, body.ToolChoice.Name = "tool", toolName

	header := http.Header{}
	header.Set("x-api-key", a.cfg.APIKey.Reveal())
	header.Set("anthropic-version", APIVersion)
	header.Set("Idempotency-Key", req.IdempotencyKey)

	hresp, err := a.Client().PostJSON(ctx, strings.TrimRight(a.cfg.BaseURL, "/")+"/v1/messages", header, body)
	if err != nil {
		return provider.Response{}, err
	}
	var m messagesResponse
	if err := json.Unmarshal(hresp.Body, &m); err != nil {
		return provider.Response{}, a.Client().Malformed(hresp, "decode message", err)
	}
	if hresp.RequestID == "" {
		hresp.RequestID = m.ID
	}
	var text strings.Builder
	for _, block := range m.Content {
		switch block.Type {
		case "tool_use":
			if block.Name != toolName {
				continue
			}
			if !provider.IsJSONObject(block.Input) {
				return provider.Response{}, a.Client().NoStructuredOutput(hresp, "tool input is not a JSON object")
			}
			model := m.Model
			if model == "" {
				model = a.cfg.Model
			}
			return provider.Response{Output: block.Input, ProviderRequestID: hresp.RequestID, Model: model}, nil
		case "text":
			text.WriteString(block.Text)
		}
	}
	msg := "no " + toolName + " tool call (stop_reason " + m.StopReason + ")"
	if text.Len() > 0 {
		msg += ": " + provider.Excerpt(text.String())
	}
	return provider.Response{}, a.Client().NoStructuredOutput(hresp, msg)
}
