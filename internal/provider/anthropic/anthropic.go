// Package anthropic adapts the Anthropic Messages API to provider.Provider.
// Structured output is obtained by forcing a single tool whose input_schema is
// the job type's output schema; the tool call's input is the output.
//
// The adapter is no provider.Settler: the Messages API offers no way to ask
// about an earlier request. It has no idempotency key (the official SDK's
// plumbing sends none: _idempotency_header = None) and no
// GET /v1/messages/{id} or list of messages, so a request whose answer was
// lost cannot be found (../shared/notes/provider-reconciliation.md, §1
// "Anthropic" and §2). An unknown attempt on an Anthropic provider waits
// for its job type's deadline rule or an operator.
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
	Name    string
	BaseURL string // default DefaultBaseURL
	Model   string
	APIKey  provider.Secret
	// MaxResponseBytes bounds what is read of an answer, whole or
	// streamed (0: provider.DefaultMaxResponseBytes).
	MaxResponseBytes int64
	HTTPClient       *http.Client
	Logger           *slog.Logger
	Now              func() time.Time
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
	a := &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "request-id"), cfg: cfg}
	a.Client().MaxResponseBytes = cfg.MaxResponseBytes
	return a, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

// Model is the configured model.
func (a *Adapter) Model() string { return a.cfg.Model }

// Tool is one tool definition.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Strict asks for strict tool use: the model's input is constrained to
	// the schema (Claude 4.5 and later, provider.ClaudeStrictTools).
	Strict bool `json:"strict,omitempty"`
}

// ToolChoice forces the named tool.
type ToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Message is one conversation turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// MessagesRequest is the body of POST /v1/messages as the adapter sends it.
type MessagesRequest struct {
	Model       string     `json:"model"`
	MaxTokens   int        `json:"max_tokens"`
	System      string     `json:"system,omitempty"`
	Temperature float64    `json:"temperature"`
	Messages    []Message  `json:"messages"`
	Tools       []Tool     `json:"tools"`
	ToolChoice  ToolChoice `json:"tool_choice"`
}

// countRequest is the body of POST /v1/messages/count_tokens: the same
// system, messages and tools, without the sampling parameters it does not take.
type countRequest struct {
	Model      string     `json:"model"`
	System     string     `json:"system,omitempty"`
	Messages   []Message  `json:"messages"`
	Tools      []Tool     `json:"tools"`
	ToolChoice ToolChoice `json:"tool_choice"`
}

type messagesResponse struct {
	ID         string         `json:"id"`
	Model      string         `json:"model"`
	StopReason string         `json:"stop_reason"`
	Content    []contentBlock `json:"content"`
	Usage      *messageUsage  `json:"usage"`
}

type contentBlock struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	Text  string          `json:"text"`
}

type messageUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// usage is what the message was billed; nil when it reports none.
func (u *messageUsage) usage() *provider.Usage {
	if u == nil {
		return nil
	}
	// Cached input is input too: the three fields add up to it.
	return &provider.Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
}

// billing marks a billing_error as the account's state: exhausted.
func billing(err error) error {
	var ce *provider.CallError
	if errors.As(err, &ce) && ce.Detail.Type == "billing_error" {
		ce.Exhausted()
	}
	return err
}

// Prepare implements provider.Preparer: the body Call sends.
func (a *Adapter) Prepare(req provider.Request) (provider.Prepared, error) {
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Prepared{}, err
	}
	toolName := provider.ToolName(req.JobType)
	tool, notes := forcedTool(a.cfg.Model, toolName, req)
	body := &MessagesRequest{
		Model:       a.cfg.Model,
		MaxTokens:   req.MaxOutputTokens,
		System:      req.System,
		Temperature: req.Temperature,
		Messages:    []Message{{Role: "user", Content: req.Prompt}},
		Tools:       []Tool{tool},
		ToolChoice:  ToolChoice{Type: "tool", Name: toolName},
	}
	if body.MaxTokens <= 0 {
		body.MaxTokens = DefaultMaxTokens
		notes = append(notes, fmt.Sprintf("max_tokens %d sent: the API requires one", DefaultMaxTokens))
	}
	return provider.Prepared{Model: a.cfg.Model, Body: body, Notes: notes}, nil
}

// forcedTool is the tool the model is made to call. A model that takes
// strict tool use gets the output schema in Claude's strict subset
// (provider.ClaudeStrict) and strict: true, so the API enforces that much;
// another model gets the schema as written, which guides it without being
// enforced. onejob's output check enforces the whole contract either way.
func forcedTool(model, name string, req provider.Request) (Tool, []string) {
	tool := Tool{
		Name:        name,
		Description: "Record the " + req.JobType + " result. Always call this tool with the complete result.",
		InputSchema: req.OutputSchema,
	}
	if !provider.ClaudeStrictTools(model) {
		return tool, nil
	}
	strict, err := provider.ClaudeStrict.Strict(req.OutputSchema)
	if err != nil {
		return tool, []string{"tool sent without strict: " + err.Error()}
	}
	tool.InputSchema, tool.Strict = strict.Schema, true
	if d := strict.Describe(provider.ClaudeStrict); d != "" {
		return tool, []string{d}
	}
	return tool, nil
}

func (a *Adapter) header() http.Header {
	header := http.Header{}
	header.Set("x-api-key", a.cfg.APIKey.Reveal())
	header.Set("anthropic-version", APIVersion)
	return header
}

// CountTokens asks POST /v1/messages/count_tokens for the input tokens of
// the request Call would send (system prompt, messages and the tool
// definition), counted by the model's own tokenizer.
func (a *Adapter) CountTokens(ctx context.Context, req provider.Request) (int, error) {
	prep, err := a.Prepare(req)
	if err != nil {
		return 0, err
	}
	m := prep.Body.(*MessagesRequest)
	hresp, err := a.Client().PostJSON(ctx, strings.TrimRight(a.cfg.BaseURL, "/")+"/v1/messages/count_tokens", a.header(),
		countRequest{Model: m.Model, System: m.System, Messages: m.Messages, Tools: m.Tools, ToolChoice: m.ToolChoice})
	if err != nil {
		return 0, err
	}
	var out struct {
		InputTokens *int `json:"input_tokens"`
	}
	if err := json.Unmarshal(hresp.Body, &out); err != nil || out.InputTokens == nil {
		return 0, a.Client().Malformed(hresp, "decode count_tokens answer: "+provider.Excerpt(string(hresp.Body)), err)
	}
	return *out.InputTokens, nil
}

// Call implements provider.Provider. A 529 (overloaded) is retryable through
// provider.ClassifyStatus; a billing_error is the account's state (exhausted).
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	body := prep.Body.(*MessagesRequest)
	toolName := body.ToolChoice.Name
	header := a.header()
	header.Set("Idempotency-Key", req.IdempotencyKey)

	hresp, err := a.Client().PostJSON(ctx, strings.TrimRight(a.cfg.BaseURL, "/")+"/v1/messages", header, body)
	if err != nil {
		return provider.Response{}, billing(err)
	}
	m, err := a.decode(hresp)
	if err != nil {
		return provider.Response{}, err
	}
	return a.answer(hresp, m, toolName)
}

// decode reads a whole message.
func (a *Adapter) decode(hresp provider.HTTPResponse) (messagesResponse, error) {
	var m messagesResponse
	if err := json.Unmarshal(hresp.Body, &m); err != nil {
		return messagesResponse{}, a.Client().Malformed(hresp, "decode message", err)
	}
	return m, nil
}

// answer is the answer a message gives, read whole (Call) or gathered
// from its events (Stream): the forced tool's input.
func (a *Adapter) answer(hresp provider.HTTPResponse, m messagesResponse, toolName string) (resp provider.Response, err error) {
	if hresp.RequestID == "" {
		hresp.RequestID = m.ID
	}
	// An answer onejob cannot use keeps its usage: it is billed all the same.
	usage := m.Usage.usage()
	switch m.StopReason {
	case "refusal":
		return provider.Response{}, a.Client().Filtered(hresp, "the model's safety classifier stopped the answer (stop_reason refusal)").Billed(usage)
	case "max_tokens", "model_context_window_exceeded":
		// A tool call cut at the limit may still parse as an object, with
		// members missing: never an answer.
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "output truncated at the token limit (stop_reason "+m.StopReason+")").Billed(usage)
	}
	var text strings.Builder
	for _, block := range m.Content {
		switch block.Type {
		case "tool_use":
			if block.Name != toolName {
				continue
			}
			if !provider.IsJSONObject(block.Input) {
				return provider.Response{}, a.Client().NoStructuredOutput(hresp, "tool input is not a JSON object").Billed(usage)
			}
			model := m.Model
			if model == "" {
				model = a.cfg.Model
			}
			return provider.Response{Output: block.Input, ProviderRequestID: hresp.RequestID, Model: model, Usage: usage}, nil
		case "text":
			text.WriteString(block.Text)
		}
	}
	msg := "no " + toolName + " tool call (stop_reason " + m.StopReason + ")"
	if text.Len() > 0 {
		msg += ": " + provider.Excerpt(text.String())
	}
	return provider.Response{}, a.Client().NoStructuredOutput(hresp, msg).Billed(usage)
}
