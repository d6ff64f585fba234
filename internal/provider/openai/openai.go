// Package openai adapts OpenAI-compatible Chat Completions APIs (OpenAI,
// vLLM, Ollama, ...) to provider.Provider, using response_format json_schema
// for structured output.
//
// Chat Completions has no idempotency key (no public mechanism: see
// ../shared/notes/provider-reconciliation.md §1), but a completion created
// with store: true can be listed by its metadata. A provider configured
// with lookup (NewProvider, Config.Lookup) sends store: true and metadata
// {"onejob_attempt": "<job_id>/<attempt>"} with every call, and settles an
// attempt whose answer was lost by listing the completions with that
// metadata (Lookup.Settle). OpenAI then keeps the prompt and the completion
// (stored completions), which is why it is opt-in. Without lookup the
// adapter is no provider.Settler.
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
	// MaxTokensField is max_completion_tokens (default: the API's current
	// name, the only one reasoning models accept) or max_tokens (deprecated
	// by OpenAI; for compatible servers that know only it).
	MaxTokensField string
	// Reasoning overrides ReasoningModel(Model): a reasoning model accepts
	// only its default temperature, so none is sent.
	Reasoning *bool
	// Lookup sends store: true and metadata {MetadataKey: the attempt's
	// idempotency key} with every call, so that NewProvider's Lookup can
	// find the completion again.
	Lookup bool
	// Flex (kind openai-flex) sends the attempts that may wait (a request
	// whose Tier is a window) at the flex service tier: batch rates,
	// slower answers, and sometimes 429 Resource Unavailable.
	Flex bool
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
	if c.MaxTokensField == "" {
		c.MaxTokensField = FieldMaxCompletionTokens
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

// reasoning is Reasoning when set, else ReasoningModel(Model).
func (c Config) reasoning() bool {
	if c.Reasoning != nil {
		return *c.Reasoning
	}
	return ReasoningModel(c.Model)
}

// reasoningFamilies are the model name prefixes OpenAI documents as
// reasoning models (o-series, gpt-5). They reject max_tokens ("not
// compatible with o-series models") and any temperature but the default.
var reasoningFamilies = []string{"o1", "o3", "o4", "gpt-5"}

// ReasoningModel reports whether model names an OpenAI reasoning model:
// one of reasoningFamilies, alone or followed by "-" (o3, o3-mini,
// gpt-5-2025-08-07). Config.Reasoning overrides it.
func ReasoningModel(model string) bool {
	for _, f := range reasoningFamilies {
		if model == f || strings.HasPrefix(model, f+"-") {
			return true
		}
	}
	return false
}

// ServiceTierFlex is service_tier's flex value ("Tokens are priced at
// Batch API rates"; the flex processing guide).
const ServiceTierFlex = "flex"

// flexFamilies are the model families the flex processing guide and the
// pricing page offer flex for ("currently only available for o3 and
// o4-mini", since joined by the gpt-5 family).
var flexFamilies = []string{"o3", "o4-mini", "gpt-5"}

// FlexModel reports whether model has a flex service tier: one of
// flexFamilies, alone or followed by "-".
func FlexModel(model string) bool {
	for _, f := range flexFamilies {
		if model == f || strings.HasPrefix(model, f+"-") {
			return true
		}
	}
	return false
}

// noStructuredOutputs are OpenAI models that refuse response_format
// json_schema: Structured Outputs came with gpt-4o-2024-08-06 and
// gpt-4o-mini; the gpt-4 and gpt-3.5 families, the first gpt-4o snapshot
// and the o1 previews predate it.
var noStructuredOutputs = []string{"gpt-3.5-turbo", "gpt-4-", "gpt-4o-2024-05-13", "o1-mini", "o1-preview"}

// StructuredOutputs reports whether model accepts response_format
// json_schema, as far as OpenAI's model list says; unknown (compatible
// servers') models are assumed to.
func StructuredOutputs(model string) bool {
	if model == "gpt-4" || model == "gpt-3.5-turbo" {
		return false
	}
	for _, p := range noStructuredOutputs {
		if strings.HasPrefix(model, p) {
			return false
		}
	}
	return true
}

// Adapter calls POST {base}/chat/completions.
type Adapter struct {
	provider.HTTPBase
	cfg       Config
	reasoning bool
}

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "x-request-id"), cfg: cfg, reasoning: cfg.reasoning()}
	a.Client().MaxResponseBytes = cfg.MaxResponseBytes
	return a, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

// Model is the configured model.
func (a *Adapter) Model() string { return a.cfg.Model }

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// JSONSchemaFormat is response_format.json_schema.
type JSONSchemaFormat struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// ResponseFormat is the request's response_format.
type ResponseFormat struct {
	Type       string           `json:"type"`
	JSONSchema JSONSchemaFormat `json:"json_schema"`
}

// ChatRequest is the body of POST /chat/completions as the adapter sends it.
type ChatRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	// Temperature is nil for a model that accepts only its default.
	Temperature         *float64       `json:"temperature,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	ResponseFormat      ResponseFormat `json:"response_format"`
	// Store and Metadata are sent by a provider with lookup.
	Store    *bool             `json:"store,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// ServiceTier is "flex" for a flex provider's attempt that may wait.
	ServiceTier string `json:"service_tier,omitempty"`
}

// MetadataKey is the metadata key a provider with lookup tags every
// completion with; its value is the attempt's idempotency key.
const MetadataKey = "onejob_attempt"

// maxMetadataValue is the longest metadata value the API accepts
// (components.schemas.Metadata: "Values are strings with a maximum length
// of 512 characters").
const maxMetadataValue = 512

type completion struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *counts  `json:"usage"`
}

type choice struct {
	Message struct {
		Content *string `json:"content"`
		Refusal *string `json:"refusal"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// counts is a completion's usage (and a stream's last chunk's).
type counts struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Prepare implements provider.Preparer: the body Call sends, fitted to the
// model's rules. A reasoning model gets max_completion_tokens and no
// temperature; one configured to get max_tokens would refuse it, so that
// request is not built.
func (a *Adapter) Prepare(req provider.Request) (provider.Prepared, error) {
	if err := provider.CheckRequest(a.cfg.Name, req, true); err != nil {
		return provider.Prepared{}, err
	}
	if !StructuredOutputs(a.cfg.Model) {
		return provider.Prepared{}, provider.ModelRuleError(a.cfg.Name, a.cfg.Model,
			"it does not support response_format json_schema (Structured Outputs), which the adapter needs")
	}
	var notes []string
	format := JSONSchemaFormat{Name: provider.ToolName(req.JobType), Schema: req.OutputSchema, Strict: true}
	if strict, err := provider.OpenAIStrict.Strict(req.OutputSchema); err != nil {
		// Strict mode would refuse it: the model is asked without it, and
		// onejob's output check enforces the whole contract, as always.
		format.Strict = false
		notes = append(notes, "output schema sent without strict: "+err.Error())
	} else {
		format.Schema = strict.Schema
		if d := strict.Describe(provider.OpenAIStrict); d != "" {
			notes = append(notes, d)
		}
	}
	body := &ChatRequest{
		Model:          a.cfg.Model,
		ResponseFormat: ResponseFormat{Type: "json_schema", JSONSchema: format},
	}
	if req.System != "" {
		body.Messages = append(body.Messages, Message{Role: "system", Content: req.System})
	}
	body.Messages = append(body.Messages, Message{Role: "user", Content: req.Prompt})
	if a.reasoning {
		if a.cfg.MaxTokensField == FieldMaxTokens {
			return provider.Prepared{}, provider.ModelRuleError(a.cfg.Name, a.cfg.Model,
				"a reasoning model does not accept max_tokens; set max_tokens_field to max_completion_tokens")
		}
		if req.Temperature != 1 {
			notes = append(notes, fmt.Sprintf("temperature %v not sent: %s accepts only its default (1)", req.Temperature, a.cfg.Model))
		}
	} else {
		t := req.Temperature
		body.Temperature = &t
	}
	if req.MaxOutputTokens > 0 {
		n := req.MaxOutputTokens
		if a.cfg.MaxTokensField == FieldMaxTokens {
			body.MaxTokens = &n
		} else {
			body.MaxCompletionTokens = &n
		}
	}
	if a.cfg.Flex && req.Tier != "" && req.Tier != "now" {
		if !FlexModel(a.cfg.Model) {
			return provider.Prepared{}, provider.ModelRuleError(a.cfg.Name, a.cfg.Model,
				"it has no flex service tier (flex processing is offered for the o3, o4-mini and gpt-5 families)")
		}
		body.ServiceTier = ServiceTierFlex
	}
	if a.cfg.Lookup {
		if len([]rune(req.IdempotencyKey)) > maxMetadataValue {
			return provider.Prepared{}, &provider.CallError{Provider: a.cfg.Name, Class: provider.ClassNonRetryable,
				Msg: fmt.Sprintf("idempotency key longer than the %d characters a metadata value may have", maxMetadataValue), Err: provider.ErrInvalidRequest}
		}
		store := true
		body.Store, body.Metadata = &store, map[string]string{MetadataKey: req.IdempotencyKey}
	}
	return provider.Prepared{Model: a.cfg.Model, Body: body, Notes: notes}, nil
}

// Call implements provider.Provider.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	header := a.header()
	header.Set("Idempotency-Key", req.IdempotencyKey)
	hresp, err := a.Client().PostJSON(ctx, a.url(), header, prep.Body)
	if err != nil {
		var ce *provider.CallError
		// A spent quota answers 429 like a rate limit; waiting will not fix it.
		if errors.As(err, &ce) && (ce.Detail.Code == "insufficient_quota" || ce.Detail.Type == "insufficient_quota") {
			ce.Exhausted()
		}
		return provider.Response{}, err
	}
	c, err := a.decode(hresp)
	if err != nil {
		return provider.Response{}, err
	}
	return a.complete(req, hresp, c)
}

// decode reads a whole chat completion.
func (a *Adapter) decode(hresp provider.HTTPResponse) (completion, error) {
	var c completion
	if err := json.Unmarshal(hresp.Body, &c); err != nil {
		return completion{}, a.Client().Malformed(hresp, "decode chat completion", err)
	}
	return c, nil
}

// complete is the answer a completion gives, read whole (Call) or
// gathered from its chunks (Stream).
func (a *Adapter) complete(req provider.Request, hresp provider.HTTPResponse, c completion) (provider.Response, error) {
	if hresp.RequestID == "" {
		// vLLM and Ollama may omit x-request-id; the completion id still
		// identifies the call in their logs.
		hresp.RequestID = c.ID
	}
	resp, err := a.answer(hresp, c)
	if err != nil {
		return provider.Response{}, err
	}
	resp.Output = restore(req, resp.Output)
	return resp, nil
}

// restore removes from an answer the nulls strict mode made the model give
// for the schema's optional properties (provider.StrictSchema.Restore).
func restore(req provider.Request, output json.RawMessage) json.RawMessage {
	strict, err := provider.OpenAIStrict.Strict(req.OutputSchema)
	if err != nil {
		return output
	}
	return strict.Restore(output)
}

func (a *Adapter) url() string { return strings.TrimRight(a.cfg.BaseURL, "/") + "/chat/completions" }

func (a *Adapter) header() http.Header {
	header := http.Header{}
	if !a.cfg.APIKey.IsZero() {
		header.Set("Authorization", "Bearer "+a.cfg.APIKey.Reveal())
	}
	return header
}

// answer reads a chat completion as Call uses it; hresp says where it came
// from (status, request id) for the errors. An answer onejob cannot use
// keeps the usage it reported: the completion is billed all the same.
func (a *Adapter) answer(hresp provider.HTTPResponse, c completion) (resp provider.Response, err error) {
	var usage *provider.Usage
	if c.Usage != nil {
		usage = &provider.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	if len(c.Choices) == 0 {
		return provider.Response{}, a.Client().Malformed(hresp, "no choices in chat completion", nil).Billed(usage)
	}
	choice := c.Choices[0]
	if r := choice.Message.Refusal; r != nil && *r != "" {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "model refused: "+provider.Excerpt(*r)).Billed(usage)
	}
	switch choice.FinishReason {
	case "length":
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "output truncated at the token limit (finish_reason length)").Billed(usage)
	case "content_filter":
		return provider.Response{}, a.Client().Filtered(hresp, "the content filter stopped the answer (finish_reason content_filter)").Billed(usage)
	}
	content := ""
	if choice.Message.Content != nil {
		content = *choice.Message.Content
	}
	if !provider.IsJSONObject([]byte(content)) {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, "message content is not a JSON object: "+provider.Excerpt(content)).Billed(usage)
	}
	model := c.Model
	if model == "" {
		model = a.cfg.Model
	}
	return provider.Response{
		Output:            json.RawMessage(strings.TrimSpace(content)),
		ProviderRequestID: hresp.RequestID,
		Model:             model,
		Usage:             usage,
	}, nil
}
