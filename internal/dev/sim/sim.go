// Package sim provides loopback simulators of the providers' wire formats
// (OpenAI Chat Completions, Anthropic Messages, Bedrock Converse, the generic
// webhook) with scripted behaviour modes, and the demo simulator used end to
// end. Simulators are plain http.Handlers; Start serves one on a free
// 127.0.0.1 port. Nothing here is for production traffic.
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Mode scripts how a Simulator answers.
type Mode string

const (
	// ModeGood answers with the oracle's good output in the requested structure.
	ModeGood Mode = "good"
	// ModeExtraKey answers with the good output plus a hallucinated top-level key.
	ModeExtraKey Mode = "extra_key"
	// ModeProse ignores the requested format and answers with prose text.
	ModeProse Mode = "prose"
	// ModeSemantic answers with schema-valid output that breaks a semantic check.
	ModeSemantic Mode = "semantic"
	// ModeRateLimited answers 429 with Retry-After.
	ModeRateLimited Mode = "rate_limited"
	// ModeServerError answers with a 5xx (Options.ErrorStatus).
	ModeServerError Mode = "server_error"
	// ModeBadRequest answers 400 in the format's validation-error shape.
	ModeBadRequest Mode = "bad_request"
	// ModeModelTimeout answers Bedrock's 408 ModelTimeoutException (504 for
	// the other formats).
	ModeModelTimeout Mode = "model_timeout"
	// ModeMalformed answers 200 with a body that is not valid JSON.
	ModeMalformed Mode = "malformed"
	// ModeHang never answers: the simulated work never finishes, and the
	// request is held until its client gives up.
	ModeHang Mode = "hang"
	// ModeQuotaExhausted answers the format's billing or spent-quota error
	// (OpenAI 429 insufficient_quota, Anthropic 402 billing_error).
	ModeQuotaExhausted Mode = "quota_exhausted"
	// ModeContentFilter answers 200 with the answer stopped by the content
	// filter (finish_reason content_filter, stop_reason refusal, stopReason
	// content_filtered).
	ModeContentFilter Mode = "content_filter"
	// ModeTruncated answers 200 with the answer cut at the request's token
	// limit, every allowed output token charged (finish_reason length,
	// stop_reason and stopReason max_tokens: a tool call missing members;
	// the webhook: an output that is no object, with its usage).
	ModeTruncated Mode = "truncated"
	// ModeRefusal answers 200 with the model declining, billed (OpenAI's
	// message.refusal; Anthropic's stop_reason refusal; on Bedrock, which
	// has no refusal stop reason, a guardrail's: guardrail_intervened; the
	// webhook: an answer without output, with its usage).
	ModeRefusal Mode = "refusal"
)

// RefusalText is what ModeRefusal's model says.
const RefusalText = "I'm sorry, but I can't help with that request."

// DefaultMaxTokens is how many tokens ModeTruncated charges for a request
// that sets no limit (the webhook's): the model's cap
// (Options.MaxOutputTokens) when it has one, else this.
const DefaultMaxTokens = 4096

// truncatedTokens is the output ModeTruncated charges for c: every token
// its request allowed.
func (o Options) truncatedTokens(c Call) int {
	switch {
	case c.MaxTokens > 0:
		return c.MaxTokens
	case o.MaxOutputTokens > 0:
		return o.MaxOutputTokens
	}
	return DefaultMaxTokens
}

// cut is obj without its last member by name: a tool call's input cut at
// the token limit, still an object (what a parser recovers of it).
func cut(obj map[string]any) map[string]any {
	keys := slices.Sorted(maps.Keys(obj))
	out := maps.Clone(obj)
	if len(keys) > 0 {
		delete(out, keys[len(keys)-1])
	}
	return out
}

// prefix is obj's JSON text cut in half: never valid JSON.
func prefix(obj map[string]any) string {
	b, _ := json.Marshal(obj)
	return string(b[:len(b)/2])
}

// ExtraKey is the hallucinated key added in ModeExtraKey.
const ExtraKey = "confidence"

// Call is one received request, normalised across wire formats.
type Call struct {
	Format         string // openai, anthropic, bedrock, webhook
	Path           string
	IdempotencyKey string
	RequestID      string // the id the simulator answered with
	Model          string
	JobID          string // webhook only
	Attempt        int    // webhook only
	JobType        string // webhook only
	System         string
	Prompt         string
	Input          json.RawMessage // webhook only
	Schema         json.RawMessage // the output schema the provider was asked for
	// Strict: the schema was sent for the API to enforce (OpenAI's strict
	// response_format, a strict forced tool).
	Strict      bool
	ToolName    string
	Temperature *float64
	MaxTokens   int
	Authorized  bool
	// Refused is the error the simulator answered a request that breaks
	// its API's rules with; "" for a valid request.
	Refused string
	// Usage is what the simulator answered it charged.
	InputTokens, OutputTokens int
	// Replay is "" for a request the simulator executed, else how it
	// answered a repeat of the idempotency key without executing it
	// (ReplayAnswered, ReplayInProgress, ReplayMismatch).
	Replay string
	// Store and Metadata are the OpenAI request's store and metadata.
	Store    bool
	Metadata map[string]string
	// ServiceTier is the OpenAI request's service_tier ("" when it named
	// none).
	ServiceTier string
	// Stream: the request asked for a streamed answer; StreamUsage: with
	// its usage (OpenAI's stream_options.include_usage). Events is how
	// many events the stream had (0 when the answer was written whole).
	Stream      bool
	StreamUsage bool
	Events      int
}

// Oracle produces the outputs a simulated model returns.
type Oracle interface {
	// Good returns an output that satisfies the job type's contract.
	Good(c Call) (json.RawMessage, error)
	// Semantic returns a schema-valid output that breaks a semantic check.
	Semantic(c Call) (json.RawMessage, error)
}

// Options configures a Simulator.
type Options struct {
	Mode Mode
	// Oracle is required for the output-producing modes.
	Oracle Oracle
	// APIKey, when set, must be presented in the format's auth header or the
	// simulator answers 401. Bedrock only checks a SigV4 header is present.
	APIKey string
	// RetryAfter is the Retry-After header of ModeRateLimited; default "2".
	RetryAfter string
	// ErrorStatus is the status of ModeServerError; default 503.
	ErrorStatus int
	// Model is the one model the simulator serves, as the API names it:
	// requests for another are refused as the API refuses an unknown model,
	// and the model's documented request rules apply (an OpenAI reasoning
	// model refuses max_tokens and temperature, say). Empty: any model is
	// served and reported back as asked.
	Model string
	// MaxOutputTokens is the served model's output cap: a request asking
	// for more is refused as the API refuses it. 0: no cap.
	MaxOutputTokens int
	// Stream paces streamed answers and breaks them (SetStream).
	Stream StreamOptions
}

// Simulator is a scripted fake provider. Safe for concurrent use.
type Simulator struct {
	mu      sync.Mutex
	opts    Options
	calls   []Call
	counted []Call // token-counting requests (count_tokens, CountTokens)
	seq     int
	keys    *executions
	stored  []storedCompletion // OpenAI completions created with store: true
	waiters map[string][]chan struct{}
	// flexBusy is how many more flex requests find no flex capacity.
	flexBusy int
}

// SetFlexUnavailable makes the next n OpenAI requests for the flex service
// tier find no capacity: each is answered 429 Resource Unavailable,
// unrun and unbilled.
func (s *Simulator) SetFlexUnavailable(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flexBusy = n
}

// takeFlexBusy spends one of the flex refusals SetFlexUnavailable asked for.
func (s *Simulator) takeFlexBusy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flexBusy <= 0 {
		return false
	}
	s.flexBusy--
	return true
}

// New returns a Simulator; an empty mode means ModeGood.
func New(opts Options) *Simulator {
	if opts.Mode == "" {
		opts.Mode = ModeGood
	}
	if opts.RetryAfter == "" {
		opts.RetryAfter = "2"
	}
	if opts.ErrorStatus == 0 {
		opts.ErrorStatus = http.StatusServiceUnavailable
	}
	return &Simulator{opts: opts, keys: newExecutions()}
}

// SetMode changes the behaviour for subsequent requests.
func (s *Simulator) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Mode = m
}

// MaxCalls is how many of the latest calls a simulator remembers, so a
// long-running local stack does not grow with every request.
const MaxCalls = 10000

// Calls returns a copy of the received calls (the last MaxCalls), in
// arrival order.
func (s *Simulator) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(latest(s.calls))
}

// IdempotencyKeys returns the received idempotency keys (of the last
// MaxCalls calls) in arrival order.
func (s *Simulator) IdempotencyKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := latest(s.calls)
	keys := make([]string, 0, len(calls))
	for _, c := range calls {
		keys = append(keys, c.IdempotencyKey)
	}
	return keys
}

// record stores the call, assigns its request id and snapshots the options.
func (s *Simulator) record(c *Call) Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.keep(c, fmt.Sprintf("sim-req-%d", s.seq))
	return s.opts
}

// noteStream records how many events the stream of the call answered
// with requestID had.
func (s *Simulator) noteStream(requestID string, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.calls) - 1; i >= 0; i-- {
		if s.calls[i].RequestID == requestID {
			s.calls[i].Events = events
			return
		}
	}
}

// recordAs stores a call answered with an earlier request id (a replay).
func (s *Simulator) recordAs(c *Call, requestID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep(c, requestID)
}

func (s *Simulator) keep(c *Call, requestID string) {
	c.RequestID = requestID
	s.calls = remember(s.calls, *c)
	for _, ch := range s.waiters[c.IdempotencyKey] {
		close(ch)
	}
	delete(s.waiters, c.IdempotencyKey)
}

// Arrived returns a channel closed once a call with the idempotency key
// has been recorded (at once if one was): a test waits on it instead of
// guessing how long a request takes to reach the simulator.
func (s *Simulator) Arrived(key string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if slices.ContainsFunc(s.calls, func(c Call) bool { return c.IdempotencyKey == key }) {
		close(ch)
		return ch
	}
	if s.waiters == nil {
		s.waiters = map[string][]chan struct{}{}
	}
	s.waiters[key] = append(s.waiters[key], ch)
	return ch
}

// Finished returns a channel closed once the work of the latest request
// with idempotency key has ended (its answer is kept, whether or not its
// client waited for it); nil when the simulator has not seen the key. A
// ModeHang request never finishes.
func (s *Simulator) Finished(key string) <-chan struct{} { return s.keys.finished(key) }

// Executions is how often the simulator executed a request with key (of
// the last MaxCalls keys): at most 1 for a webhook, which answers repeats
// from memory; one per request for the APIs without idempotency.
func (s *Simulator) Executions(key string) int { return s.keys.count(key) }

// ExecutedMoreThanOnce lists the idempotency keys the simulator executed
// more than once.
func (s *Simulator) ExecutedMoreThanOnce() []string {
	_, twice := s.keys.stats()
	return twice
}

// remember appends v, dropping all but the last MaxCalls entries once
// there are twice as many (so each append costs O(1) amortized).
func remember[T any](records []T, v T) []T {
	records = append(records, v)
	if len(records) >= 2*MaxCalls {
		records = slices.Clone(latest(records))
	}
	return records
}

// latest is the last MaxCalls records.
func latest[T any](records []T) []T {
	return records[max(0, len(records)-MaxCalls):]
}

// output computes the structured output for the output-producing modes.
func (o Options) output(c Call) (map[string]any, error) {
	if o.Oracle == nil {
		return nil, errors.New("sim: no oracle configured")
	}
	var raw json.RawMessage
	var err error
	if o.Mode == ModeSemantic {
		raw, err = o.Oracle.Semantic(c)
	} else {
		raw, err = o.Oracle.Good(c)
	}
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("sim: oracle output is not an object: %w", err)
	}
	if o.Mode == ModeExtraKey {
		obj[ExtraKey] = 0.97
	}
	return obj, nil
}

// Prose is what ModeProse answers instead of structured output.
const Prose = "Sure! Having read the request carefully, I think this is most likely a billing question, " +
	"and I would suggest a fairly high priority. Let me know if you need anything else."

// malformedBody is a truncated JSON document: valid prefix, invalid whole.
const malformedBody = `{"id":"sim","choices":[{"message":{"content":"{\"category\": `

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeMalformed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(malformedBody))
}

// hang blocks until the client gives up (or the server closes).
func hang(r *http.Request) { <-r.Context().Done() }

// Server is a simulator served on a loopback port.
type Server struct {
	url  string
	srv  *http.Server
	stop context.CancelFunc
}

// serverLife is the context key of a served request's server lifetime:
// work that outlives its request (a receiver finishing a streamed answer
// whose client left) ends with the server.
type serverLife struct{}

// lifeOf is the lifetime of the server that serves r (r's own context
// when it was served otherwise, as by httptest).
func lifeOf(r *http.Request) context.Context {
	if life, ok := r.Context().Value(serverLife{}).(context.Context); ok {
		return life
	}
	return r.Context()
}

// URL is the base URL, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.url }

// Start serves h on a free 127.0.0.1 port. It uses no httptest so it can be
// embedded in local-stack binaries as well as tests.
func Start(h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim: listen: %w", err)
	}
	// Idle connections close after 30 s: the local stack's provider client
	// lets them go sooner, a client that never does cannot pile them up.
	life, stop := context.WithCancel(context.Background())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithValue(life, serverLife{}, life) }}
	go func() { _ = srv.Serve(ln) }()
	return &Server{url: "http://" + ln.Addr().String(), srv: srv, stop: stop}, nil
}

// Close stops the server and cancels in-flight requests (releasing hangs)
// and the work that outlives them.
func (s *Server) Close() error {
	s.stop()
	return s.srv.Close()
}
