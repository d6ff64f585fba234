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
// from X-Request-Id.
//
// A receiver keeps onejob's webhook provider contract
// (docs/webhook-provider-contract.md): it answers a repeat of an
// Idempotency-Key with its first answer (same status, same body), or 409
// while the first request with the key is still in progress. That is what
// lets the adapter settle an attempt whose answer was lost (Settle): it
// sends the same request again, under the same key.
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
	"slices"
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
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, a.header(req), prep.Body)
	if err != nil {
		return provider.Response{}, err
	}
	return a.parse(hresp)
}

func (a *Adapter) header(req provider.Request) http.Header {
	header := http.Header{}
	header.Set("Idempotency-Key", req.IdempotencyKey)
	if !a.cfg.Token.IsZero() {
		header.Set("Authorization", "Bearer "+a.cfg.Token.Reveal())
	}
	return header
}

// parse reads a 2xx answer as Call uses it.
func (a *Adapter) parse(hresp provider.HTTPResponse) (provider.Response, error) {
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

// Settle implements provider.Settler: it sends the attempt's request again,
// same body, same Idempotency-Key, which a receiver keeping the contract
// answers without executing it again:
//
//   - 2xx: the first answer, read as Call reads it: EvidenceAnswered (or
//     EvidenceRefused with Call's error when Call could not have used it);
//   - 409: the first request is still in progress: EvidenceInProgress;
//   - another 4xx: the first answer was a refusal: EvidenceRefused with the
//     *CallError — except the statuses in notAboutTheAttempt, which speak
//     of the re-send, not of the attempt;
//   - any other status marked Idempotent-Replayed: the first answer, so
//     EvidenceRefused (a receiver never answers 429 or 5xx to a request
//     it acted on);
//   - 5xx, 429 unmarked, no answer: an error; ask again later.
func (a *Adapter) Settle(ctx context.Context, req provider.Request) (s provider.Settlement, err error) {
	start := a.Clock()()
	defer func() { provider.LogSettle(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), s, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Settlement{}, err
	}
	resent := "re-sent with Idempotency-Key " + req.IdempotencyKey
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, a.header(req), prep.Body)
	if err == nil {
		resp, perr := a.parse(hresp)
		if perr != nil {
			return provider.Settlement{Evidence: provider.EvidenceRefused, Err: perr,
				Detail: provider.Excerpt(fmt.Sprintf("%s: %d, its first answer, which onejob cannot use: %v", resent, hresp.Status, perr))}, nil
		}
		detail := fmt.Sprintf("%s: %d, its first answer", resent, hresp.Status)
		if resp.ProviderRequestID != "" {
			detail += " (request " + resp.ProviderRequestID + ")"
		}
		return provider.Settlement{Evidence: provider.EvidenceAnswered, Response: resp, Detail: provider.Excerpt(detail)}, nil
	}
	var ce *provider.CallError
	if !errors.As(err, &ce) {
		return provider.Settlement{}, err
	}
	if ce.Replayed && ce.Status != http.StatusConflict {
		// Marked as the key's first answer: whatever its status, it is about
		// the first request, and a receiver never answers a request it acted
		// on with a 429 or 5xx (the contract), so a 5xx here is a failure.
		return provider.Settlement{Evidence: provider.EvidenceRefused, Err: ce,
			Detail: provider.Excerpt(fmt.Sprintf("%s: %d, its first answer replayed (%s): %s", resent, ce.Status,
				provider.HeaderIdempotentReplayed, ce.Msg))}, nil
	}
	if ce.Status < 400 || ce.Status >= 500 || slices.Contains(notAboutTheAttempt, ce.Status) {
		return provider.Settlement{}, err
	}
	if ce.Status == http.StatusConflict {
		return provider.Settlement{Evidence: provider.EvidenceInProgress,
			Detail: provider.Excerpt(resent + ": 409, the first request with this key is still in progress")}, nil
	}
	return provider.Settlement{Evidence: provider.EvidenceRefused, Err: ce,
		Detail: provider.Excerpt(fmt.Sprintf("%s: %d, its first answer was a refusal: %s", resent, ce.Status, ce.Msg))}, nil
}

// notAboutTheAttempt are the 4xx a re-send can get that say nothing of what
// became of the first request: its credentials (401, 403, 407), an endpoint
// gone (404), the re-send itself timed out, came too early or too often
// (408, 425, 429), and 422, which the Idempotency-Key draft gives for a key
// reused with a different request. They are errors: ask again later, or an
// operator looks.
var notAboutTheAttempt = []int{
	http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusProxyAuthRequired,
	http.StatusRequestTimeout, http.StatusUnprocessableEntity, http.StatusTooEarly, http.StatusTooManyRequests,
}
