// Package webhook adapts a generic HTTPS webhook to provider.Provider.
//
// Wire format. Request: POST {url} with header Idempotency-Key and body
//
//	{"job_id", "attempt", "idempotency_key", "job_type", "input", "prompt"}
//
// where input is the job's input as submitted. Response: 2xx with body
//
//	{"output": {...}, "model"?: "...", "usage"?: {"input_tokens", "output_tokens"}}
//
// The envelope (rather than the bare object) keeps room for metadata and makes
// a proxy's stray JSON distinguishable from an answer. The request id is read
// from X-Request-Id. Endpoints with side effects must deduplicate on
// Idempotency-Key: a malformed 2xx is classified retryable.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// ErrInvalidConfig is wrapped by New's validation errors.
var ErrInvalidConfig = errors.New("invalid webhook config")

// Config configures one webhook provider.
type Config struct {
	Name string
	// URL must be https, except for loopback hosts (simulators, sidecars).
	URL string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token      provider.Secret
	HTTPClient *http.Client
	Logger     *slog.Logger
	Now        func() time.Time
}

func (c Config) validate() error {
	var problems []string
	if c.Name == "" {
		problems = append(problems, "name is required")
	}
	if err := provider.ValidateBaseURL(c.URL); err != nil {
		problems = append(problems, err.Error())
	} else if u, _ := url.Parse(c.URL); u.Scheme != "https" && !isLoopback(u.Hostname()) {
		problems = append(problems, "url must use https unless the host is loopback")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Adapter posts attempts to the webhook URL.
type Adapter struct {
	provider.HTTPBase
	cfg Config
}

// New validates cfg and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "X-Request-Id"), cfg: cfg}, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

// Request is the webhook request body.
type Request struct {
	JobID          string          `json:"job_id"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotency_key"`
	JobType        string          `json:"job_type"`
	Input          json.RawMessage `json:"input"`
	Prompt         string          `json:"prompt"`
}

// Response is the webhook response body.
type Response struct {
	Output json.RawMessage `json:"output"`
	Model  string          `json:"model,omitempty"`
	// Usage is optional: a webhook backed by a model may report it.
	Usage *provider.Usage `json:"usage,omitempty"`
}

// Prepare implements provider.Preparer: the body Call sends.
func (a *Adapter) Prepare(req provider.Request) (provider.Prepared, error) {
	if err := provider.CheckRequest(a.cfg.Name, req, false); err != nil {
		return provider.Prepared{}, err
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	return provider.Prepared{Model: a.cfg.Name, Body: &Request{
		JobID:          req.JobID,
		Attempt:        req.Attempt,
		IdempotencyKey: req.IdempotencyKey,
		JobType:        req.JobType,
		Input:          input,
		Prompt:         req.Prompt,
	}}, nil
}

// Call implements provider.Provider.
func (a *Adapter) Call(ctx context.Context, req provider.Request) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	header := http.Header{}
	header.Set("Idempotency-Key", req.IdempotencyKey)
	if !a.cfg.Token.IsZero() {
		header.Set("Authorization", "Bearer "+a.cfg.Token.Reveal())
	}
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, header, prep.Body)
	if err != nil {
		return provider.Response{}, err
	}
	var body Response
	if err := json.Unmarshal(hresp.Body, &body); err != nil {
		return provider.Response{}, a.Client().Malformed(hresp, "decode webhook response: "+provider.Excerpt(string(hresp.Body)), err)
	}
	if !provider.IsJSONObject(body.Output) {
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, `response has no "output" object`)
	}
	model := body.Model
	if model == "" {
		model = a.cfg.Name
	}
	return provider.Response{Output: body.Output, ProviderRequestID: hresp.RequestID, Model: model, Usage: body.Usage}, nil
}
