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
// asks the contract's lookup (Idempotency-Lookup: only, never executing)
// when the provider declares it, or else sends the same request again,
// under the same key, which the reconciler does only inside the provider's
// key retention.
//
// Kind webhook-async (Async, async.go) runs the same contract as
// provider.Async work: a submit answered 202 with the work's id, read and
// cancelled by id, announced by a signed callback.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// Lookup: the receiver offers the contract's lookup (the same POST with
	// Idempotency-Lookup: only, which never executes); Settle asks only
	// that way.
	Lookup bool
	// KeyRetention is how long the receiver remembers a key after its first
	// answer (zero: the contract's minimum, provider.DefaultMaxProcessingTime).
	KeyRetention time.Duration
	// MaxResponseBytes bounds what is read of an answer, whole or
	// streamed (0: provider.DefaultMaxResponseBytes).
	MaxResponseBytes int64
}

// HeaderLookup on a request asks a receiver what became of its
// Idempotency-Key without executing anything (LookupOnly); its answer to
// an unknown key is 404 marked with the same header (LookupUnknown).
const (
	HeaderLookup  = "Idempotency-Lookup"
	LookupOnly    = "only"
	LookupUnknown = "unknown"
)

// ContractVersion is the webhook provider contract this adapter speaks.
const ContractVersion = "2"

func (c Config) validate() error {
	var problems []string
	if c.Name == "" {
		problems = append(problems, "name is required")
	}
	if err := provider.ValidateBaseURL(c.URL); err != nil {
		problems = append(problems, err.Error())
	} else if u, _ := url.Parse(c.URL); u.Scheme != "https" && !provider.LoopbackHost(u.Hostname()) {
		problems = append(problems, "url must use https unless the host is loopback")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
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
	a := &Adapter{HTTPBase: provider.NewHTTPBase(cfg.Name, cfg.HTTPClient, cfg.Logger, cfg.Now, "X-Request-Id"), cfg: cfg}
	// A streamed answer's answer event is the whole answer: bounded as a
	// whole body is.
	a.Client().MaxResponseBytes, a.Client().MaxEventBytes = cfg.MaxResponseBytes, provider.DefaultMaxResponseBytes
	return a, nil
}

// Name implements provider.Provider.
func (a *Adapter) Name() string { return a.cfg.Name }

// SettleExecutes implements provider.KeyMemory: without the lookup, Settle
// re-sends the request.
func (a *Adapter) SettleExecutes() bool { return !a.cfg.Lookup }

// KeyRetention implements provider.KeyMemory.
func (a *Adapter) KeyRetention() time.Duration {
	if a.cfg.KeyRetention > 0 {
		return a.cfg.KeyRetention
	}
	return provider.DefaultMaxProcessingTime
}

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
		// Billed all the same: a receiver backed by a model says so.
		return provider.Response{}, a.Client().NoStructuredOutput(hresp, `response has no "output" object`).Billed(body.Usage)
	}
	model := body.Model
	if model == "" {
		model = a.cfg.Name
	}
	return provider.Response{Output: body.Output, ProviderRequestID: hresp.RequestID, Model: model, Usage: body.Usage}, nil
}

// Settle implements provider.Settler. With the lookup (Config.Lookup) it
// sends the attempt's request with Idempotency-Lookup: only, which a
// receiver keeping the contract answers without executing anything;
// without it, it re-sends the request, same body, same Idempotency-Key
// (the reconciler does so only inside the key retention window). What each
// answer proves (docs/webhook-provider-contract.md, one table):
//
//   - 2xx marked Idempotent-Replayed: true: the first answer,
//     EvidenceAnswered (EvidenceRefused with Call's error when Call could
//     not have used it);
//   - 2xx unmarked to a re-send: the receiver executed now,
//     EvidenceExecuted (package job accepts it only inside the window);
//     to a lookup: a receiver breaking the contract, an error;
//   - 409: the first request is still in progress, EvidenceInProgress;
//   - 404 marked Idempotency-Lookup: unknown, to a lookup: the receiver
//     has no trace of the key, EvidenceAbsent;
//   - 4xx or 5xx marked Idempotent-Replayed: true: the first answer, a
//     failure: EvidenceRefused. A replayed 5xx is the first answer only
//     because the contract forbids storing a 5xx produced after side
//     effects: a receiver keeps a 5xx only for a request it did not act on;
//   - anything unmarked (a billing, auth, WAF or size layer answers before
//     the idempotency store, a 5xx, a 429), no answer: no evidence, an
//     error; ask again later.
func (a *Adapter) Settle(ctx context.Context, req provider.Request) (s provider.Settlement, err error) {
	start := a.Clock()()
	defer func() { provider.LogSettle(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), s, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Settlement{}, err
	}
	header := a.header(req)
	asked := "re-sent with Idempotency-Key " + req.IdempotencyKey
	if a.cfg.Lookup {
		header.Set(HeaderLookup, LookupOnly)
		asked = "looked up Idempotency-Key " + req.IdempotencyKey
	}
	hresp, err := a.Client().PostJSON(ctx, a.cfg.URL, header, prep.Body)
	if err == nil {
		replayed := hresp.Header.Get(provider.HeaderIdempotentReplayed) == "true"
		if !replayed && a.cfg.Lookup {
			return provider.Settlement{}, fmt.Errorf("%s: %d without %s: true, which a lookup never answers (the contract): no evidence", asked, hresp.Status, provider.HeaderIdempotentReplayed)
		}
		resp, perr := a.parse(hresp)
		if perr != nil {
			if !replayed {
				return provider.Settlement{}, fmt.Errorf("%s: %d unmarked and unusable: no evidence: %w", asked, hresp.Status, perr)
			}
			return provider.Settlement{Evidence: provider.EvidenceRefused, Err: perr,
				Detail: provider.Excerpt(fmt.Sprintf("%s: %d, its first answer replayed, which onejob cannot use: %v", asked, hresp.Status, perr))}, nil
		}
		if !replayed {
			detail := fmt.Sprintf("%s: %d without %s: true, executed now", asked, hresp.Status, provider.HeaderIdempotentReplayed)
			return provider.Settlement{Evidence: provider.EvidenceExecuted, Response: resp, Detail: provider.Excerpt(detail)}, nil
		}
		detail := fmt.Sprintf("%s: %d, its first answer replayed", asked, hresp.Status)
		if resp.ProviderRequestID != "" {
			detail += " (request " + resp.ProviderRequestID + ")"
		}
		return provider.Settlement{Evidence: provider.EvidenceAnswered, Response: resp, Detail: provider.Excerpt(detail)}, nil
	}
	var ce *provider.CallError
	if !errors.As(err, &ce) {
		return provider.Settlement{}, err
	}
	switch {
	case ce.Status == http.StatusConflict:
		return provider.Settlement{Evidence: provider.EvidenceInProgress,
			Detail: provider.Excerpt(asked + ": 409, the first request with this key is still in progress")}, nil
	case ce.Replayed:
		return provider.Settlement{Evidence: provider.EvidenceRefused, Err: ce,
			Detail: provider.Excerpt(fmt.Sprintf("%s: %d, its first answer replayed (%s): %s", asked, ce.Status,
				provider.HeaderIdempotentReplayed, ce.Msg))}, nil
	case a.cfg.Lookup && ce.Status == http.StatusNotFound && ce.LookupUnknown:
		return provider.Settlement{Evidence: provider.EvidenceAbsent,
			Detail: provider.Excerpt(asked + ": 404, the receiver has no trace of the key")}, nil
	}
	// Unmarked: about the question, not the attempt (no evidence).
	return provider.Settlement{}, err
}
