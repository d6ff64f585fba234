package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// Demo provider names, as listed by the demo job types.
const (
	DemoPrimary  = "sim-primary"
	DemoFallback = "sim-fallback"
)

// Demo outcomes scripted through the job input's "simulate" object.
const (
	OutcomeOK        = "ok"
	OutcomeError     = "error"
	OutcomeTimeout   = "timeout"
	OutcomeMalformed = "malformed"
	// OutcomeOversized answers a valid result of OversizedBytes: more than a
	// job item can hold.
	OutcomeOversized = "oversized"
	// OutcomeRateLimited answers 429 with Retry-After: 1 at once, acting
	// on nothing: a repeat of its key is a new request.
	OutcomeRateLimited = "rate_limited"
)

// OversizedBytes is the size of an oversized demo answer's text: past
// DynamoDB's 400 KB item, by a margin.
const OversizedBytes = 450 << 10

// MaxDemoLatency caps a scripted latency so a typo cannot park a handler;
// brownout drills hang a provider 20 s per call.
const MaxDemoLatency = time.Minute

// DemoScript is one provider's scripted behaviour: in a demo job input's
// "simulate" object, or provider-wide (PUT /control/{provider}) for every
// call whose input scripts nothing for that provider.
type DemoScript struct {
	LatencyMS int    `json:"latency_ms"`
	Outcome   string `json:"outcome"`
	// InputTokens and OutputTokens replace the usage an answer reports
	// (words of the prompt and of the answer): the budget drill's calls
	// cost what a real model's would. Provider-wide scripts only: the demo
	// type's input schema has no place for them.
	InputTokens  int `json:"input_tokens,omitempty"`
	OutputTokens int `json:"output_tokens,omitempty"`
	// FirstTokenMS and TokensPerSecond pace a streamed answer (a request
	// asking for text/event-stream: the webhook contract's "Streaming the
	// answer"): the first delta after FirstTokenMS, then TokensPerSecond
	// deltas a second (0: the simulator's defaults, SetStream): in a
	// provider-wide script, or a job's own where its type's input allows
	// them (demo-stream). Cut breaks every stream at one event (the
	// drills'): provider-wide scripts only.
	FirstTokenMS    int        `json:"first_token_ms,omitempty"`
	TokensPerSecond float64    `json:"tokens_per_second,omitempty"`
	Cut             *StreamCut `json:"cut,omitempty"`
}

// DemoOutcomes are the outcomes a script may name ("" is ok).
var DemoOutcomes = []string{OutcomeOK, OutcomeError, OutcomeTimeout, OutcomeMalformed, OutcomeOversized, OutcomeRateLimited}

// Validate refuses an outcome the simulator does not know and a latency
// outside [0, MaxDemoLatency].
func (s DemoScript) Validate() error {
	if s.Outcome != "" && !slices.Contains(DemoOutcomes, s.Outcome) {
		return fmt.Errorf("outcome %q must be one of %s", s.Outcome, strings.Join(DemoOutcomes, ", "))
	}
	if s.LatencyMS < 0 || time.Duration(s.LatencyMS)*time.Millisecond > MaxDemoLatency {
		return fmt.Errorf("latency_ms %d must be between 0 and %d", s.LatencyMS, MaxDemoLatency.Milliseconds())
	}
	if s.FirstTokenMS < 0 || time.Duration(s.FirstTokenMS)*time.Millisecond > MaxDemoLatency {
		return fmt.Errorf("first_token_ms %d must be between 0 and %d", s.FirstTokenMS, MaxDemoLatency.Milliseconds())
	}
	if s.TokensPerSecond < 0 {
		return fmt.Errorf("tokens_per_second %v must not be negative", s.TokensPerSecond)
	}
	if s.Cut != nil {
		return s.Cut.Validate()
	}
	return nil
}

// DemoInput is the demo job type's input.
type DemoInput struct {
	Prompt   string                `json:"prompt"`
	Simulate map[string]DemoScript `json:"simulate,omitempty"`
}

// DemoStats is what the simulator saw for one provider: every request
// counted (repeats of a key included), the idempotency keys of the last
// MaxCalls, how many requests it executed, and the keys it executed more
// than once (a drill asserts there are none: a repeat of a key is answered
// from memory, never executed again).
type DemoStats struct {
	Calls                int      `json:"calls"`
	IdempotencyKeys      []string `json:"idempotency_keys"`
	Executions           int      `json:"executions"`
	ExecutedMoreThanOnce []string `json:"executed_more_than_once"`
	// Replays counts repeats answered with the first answer, InProgress
	// those answered 409 because the first request still ran.
	Replays    int `json:"replays"`
	InProgress int `json:"in_progress"`
	// Streamed counts the answers sent as a stream.
	Streamed int `json:"streamed"`
}

// DemoSimulator serves any number of webhook providers on /{provider} (e.g.
// /sim-primary, /sim-fallback), each honouring onejob's webhook provider
// contract (docs/webhook-provider-contract.md): a request's work runs to
// completion even if its client gives up, a repeat of an Idempotency-Key
// is never executed again (409 while the first runs, then the first
// answer, whole), and a request that asks for a stream gets its answer
// as the contract's delta and answer events, paced (SetStream, a
// provider-wide script's first_token_ms and tokens_per_second). Each call's behaviour is scripted by the job input it
// carries, else by the provider-wide script (PUT /control/{provider} with a
// DemoScript; DELETE clears it); unscripted calls answer ok at once. GET
// /calls returns the per-provider stats as JSON for out-of-process
// end-to-end suites.
type DemoSimulator struct {
	mu      sync.Mutex
	stats   map[string]*demoProvider
	scripts map[string]DemoScript
	seq     int
	// gates hold a provider's answers to one prompt until released (Gate,
	// Hold).
	gates map[string]gate
	// pace paces every provider's streamed answers (SetStream), unless its
	// script says otherwise.
	pace StreamOptions
}

type gate struct {
	open chan struct{}
	// outlive: the work waits on after its caller gave up (Hold).
	outlive bool
}

// Gate makes providerName hold its answer to prompt until release is
// called (or the request ends): a drill orders two providers' answers by
// an event, not by latencies a busy machine stretches.
func (d *DemoSimulator) Gate(providerName, prompt string) (release func()) {
	return d.gate(providerName, prompt, false)
}

// Hold is Gate for work that goes on after its caller gave up (a call that
// timed out, its attempt unknown): the work ends only once released, so a
// drill decides when the provider finishes, not a latency a busy machine
// may outlast.
func (d *DemoSimulator) Hold(providerName, prompt string) (release func()) {
	return d.gate(providerName, prompt, true)
}

func (d *DemoSimulator) gate(providerName, prompt string, outlive bool) (release func()) {
	g := gate{open: make(chan struct{}), outlive: outlive}
	d.mu.Lock()
	if d.gates == nil {
		d.gates = map[string]gate{}
	}
	d.gates[providerName+"\x00"+prompt] = g
	d.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(g.open) }) }
}

// awaitGate waits for the gate of providerName and prompt, if any.
func (d *DemoSimulator) awaitGate(r *http.Request, providerName, prompt string) {
	d.mu.Lock()
	g, ok := d.gates[providerName+"\x00"+prompt]
	d.mu.Unlock()
	if !ok {
		return
	}
	if g.outlive {
		<-g.open
		return
	}
	select {
	case <-g.open:
	case <-r.Context().Done():
	}
}

type demoProvider struct {
	streamed   int
	calls      int
	arrivals   []Arrival
	limited    int
	keys       []string
	replays    int
	inProgress int
	runs       *executions
}

// NewDemo returns an empty DemoSimulator.
func NewDemo() *DemoSimulator {
	return &DemoSimulator{stats: map[string]*demoProvider{}, scripts: map[string]DemoScript{}}
}

// StartDemo serves a new DemoSimulator on a loopback port.
func StartDemo() (*DemoSimulator, *Server, error) {
	d := NewDemo()
	srv, err := Start(d)
	if err != nil {
		return nil, nil, err
	}
	return d, srv, nil
}

// DemoMaxConcurrent is the demo providers' declared max_concurrent.
const DemoMaxConcurrent = 8

// DemoConfig is the provider config of sim-primary and sim-fallback served by
// the webhook adapter against a DemoSimulator at baseURL. Their health
// limits are a local machine's, so that a brownout shows within seconds: a
// call is slow past 1 s (a demo call answers at once unless its input
// scripts a latency), 3 failures within 10 s open a breaker for 5 s
// (doubling to a minute on re-trips), one probe half-open for at most 3 s,
// and at most 8 attempts holding a provider; both offer the webhook
// contract's lookup and declare a key retention of 24 h.
func DemoConfig(baseURL string) provider.Config {
	base := strings.TrimRight(baseURL, "/")
	limits := func(pc provider.ProviderConfig) provider.ProviderConfig {
		pc.SlowCallAfter, pc.MaxProcessingTime, pc.MaxConcurrent = "1s", "1m", DemoMaxConcurrent
		// The demo simulator offers the contract's lookup (the reconciler
		// never re-sends to it) and keeps its last 10,000 keys, far longer
		// than a day of demo traffic needs.
		pc.Lookup, pc.KeyRetention = true, "24h"
		pc.Breaker = &provider.BreakerConfig{Failures: 3, Window: "10s", Cooldown: "5s", MaxCooldown: "1m", Probes: 1, HalfOpenMax: "3s"}
		return pc
	}
	return provider.Config{Providers: []provider.ProviderConfig{
		limits(provider.ProviderConfig{Name: DemoPrimary, Kind: provider.KindWebhook, BaseURL: base + "/" + DemoPrimary}),
		limits(provider.ProviderConfig{Name: DemoFallback, Kind: provider.KindWebhook, BaseURL: base + "/" + DemoFallback}),
	}}
}

// Arrival is one request a demo provider received: when, for which job.
type Arrival struct {
	At    time.Time
	JobID string
	// Traceparent is the request's W3C traceparent: the span that called
	// ("" for an untraced job).
	Traceparent string
}

// Arrivals returns the requests the provider received (the last MaxCalls),
// in arrival order, lookups excluded: what its account's rate counts.
func (d *DemoSimulator) Arrivals(providerName string) []Arrival {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return slices.Clone(latest(st.arrivals))
	}
	return nil
}

// RateLimited returns how many requests the provider answered 429.
func (d *DemoSimulator) RateLimited(providerName string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return st.limited
	}
	return 0
}

// Calls returns how many requests reached the provider, including ones that
// timed out or failed and repeats of a key.
func (d *DemoSimulator) Calls(providerName string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return st.calls
	}
	return 0
}

// IdempotencyKeys returns the Idempotency-Key headers the provider received
// (the last MaxCalls).
func (d *DemoSimulator) IdempotencyKeys(providerName string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return slices.Clone(latest(st.keys))
	}
	return nil
}

// Finished returns a channel closed once the provider's work on key has
// ended (nil when it has not seen the key). A "timeout" never ends.
func (d *DemoSimulator) Finished(providerName, key string) <-chan struct{} {
	return d.provider(providerName).runs.finished(key)
}

// Stats returns a snapshot of every provider's stats.
func (d *DemoSimulator) Stats() map[string]DemoStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]DemoStats, len(d.stats))
	for name, st := range d.stats {
		total, twice := st.runs.stats()
		if twice == nil {
			twice = []string{}
		}
		out[name] = DemoStats{Calls: st.calls, IdempotencyKeys: slices.Clone(latest(st.keys)),
			Executions: total, ExecutedMoreThanOnce: twice, Replays: st.replays, InProgress: st.inProgress, Streamed: st.streamed}
	}
	return out
}

// Reset forgets all recorded calls and provider-wide scripts.
func (d *DemoSimulator) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats = map[string]*demoProvider{}
	d.scripts = map[string]DemoScript{}
}

// SetScript scripts every call to providerName that carries no script of
// its own (what PUT /control/{provider} does).
func (d *DemoSimulator) SetScript(providerName string, s DemoScript) error {
	if err := s.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scripts[providerName] = s
	return nil
}

// SetStream paces (and breaks) every provider's streamed answers, unless
// its provider-wide script says otherwise: onejob run's
// --demo-first-token and --demo-token-rate.
func (d *DemoSimulator) SetStream(o StreamOptions) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pace = o
}

// paceOf is how a provider's streamed answer under script goes.
func (d *DemoSimulator) paceOf(script DemoScript) StreamOptions {
	d.mu.Lock()
	p := d.pace
	d.mu.Unlock()
	if script.FirstTokenMS > 0 {
		p.FirstToken = time.Duration(script.FirstTokenMS) * time.Millisecond
	}
	if script.TokensPerSecond > 0 {
		p.TokenRate = script.TokensPerSecond
	}
	if script.Cut != nil {
		p.Cut = script.Cut
	}
	return p
}

// ownPace is p with the pace a job's own script names, if any (a job's
// script never breaks a stream: Cut is provider-wide).
func ownPace(p StreamOptions, script DemoScript) StreamOptions {
	if script.FirstTokenMS > 0 {
		p.FirstToken = time.Duration(script.FirstTokenMS) * time.Millisecond
	}
	if script.TokensPerSecond > 0 {
		p.TokenRate = script.TokensPerSecond
	}
	return p
}

// ClearScript removes providerName's provider-wide script.
func (d *DemoSimulator) ClearScript(providerName string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.scripts, providerName)
}

// provider returns (creating) a provider's records.
func (d *DemoSimulator) provider(name string) *demoProvider {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.stats[name]
	if !ok {
		st = &demoProvider{runs: newExecutions()}
		d.stats[name] = st
	}
	return st
}

// record counts a request and returns its provider's records, a fresh
// request id and the provider-wide script.
func (d *DemoSimulator) record(name, key string) (*demoProvider, string, DemoScript, bool) {
	st := d.provider(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	st.calls++
	st.keys = remember(st.keys, key)
	d.seq++
	script, scripted := d.scripts[name]
	return st, fmt.Sprintf("sim-%s-%d", name, d.seq), script, scripted
}

func (d *DemoSimulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if r.Method == http.MethodGet && name == "calls" {
		writeJSON(w, http.StatusOK, d.Stats())
		return
	}
	if target, ok := strings.CutPrefix(name, "control/"); ok {
		d.control(w, r, target)
		return
	}
	if name == "" || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	var body webhook.Request
	raw, ok := decode(w, r, &body)
	if !ok {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	st, requestID, wide, scripted := d.record(name, key)

	var in DemoInput
	if err := json.Unmarshal(body.Input, &in); err != nil {
		w.Header().Set("X-Request-Id", requestID)
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "input is not a demo input: " + err.Error()})
		return
	}
	script, own := in.Simulate[name]
	if !own && scripted {
		script = wide
	}
	if r.Header.Get(webhook.HeaderLookup) != webhook.LookupOnly {
		d.count(func() {
			st.arrivals = remember(st.arrivals, Arrival{At: time.Now(), JobID: body.JobID, Traceparent: r.Header.Get("traceparent")})
		})
	}
	if script.Outcome == OutcomeRateLimited {
		d.count(func() { st.limited++ })
		w.Header().Set("X-Request-Id", requestID)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate limited"})
		return
	}

	e, state := &execution{done: make(chan struct{})}, keyNew
	if r.Header.Get(webhook.HeaderLookup) == webhook.LookupOnly {
		// The contract's lookup: what became of the key, never executed.
		if e, state = st.runs.lookup(key); state == keyNew || key == "" {
			w.Header().Set("X-Request-Id", requestID)
			w.Header().Set(webhook.HeaderLookup, webhook.LookupUnknown)
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no trace of Idempotency-Key " + key})
			return
		}
	} else if key != "" {
		e, state = st.runs.begin(key, raw, true)
	}
	switch state {
	case keyAnswered:
		d.count(func() { st.replays++ })
		e.answer.replayTo(w)
		return
	case keyInProgress:
		d.count(func() { st.inProgress++ })
		w.Header().Set("X-Request-Id", requestID)
		writeJSON(w, http.StatusConflict, map[string]string{"error": "a request with Idempotency-Key " + key + " is still in progress"})
		return
	case keyMismatch:
		w.Header().Set("X-Request-Id", requestID)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "Idempotency-Key " + key + " was used with a different request"})
		return
	}
	if script.Outcome == OutcomeTimeout {
		// The work never finishes: repeats of the key get 409 for as long
		// as the simulator runs.
		w.Header().Set("X-Request-Id", requestID)
		hang(r)
		return
	}
	work := func(w http.ResponseWriter) {
		d.awaitGate(r, name, in.Prompt)
		w.Header().Set("X-Request-Id", requestID)
		demoWork(w, name, in.Prompt, script)
	}
	if wantsStream(r) {
		// The pace is the job's own script's (a type whose input allows
		// it: demo-stream), else the provider-wide script's, else the
		// simulator's.
		pace := d.paceOf(wide)
		if own {
			pace = ownPace(pace, script)
		}
		st.runs.streamAnswer(w, r, e, pace, true, work,
			func(a answer) *streamed { return webhookStream(Call{}, a) },
			func(int) { d.count(func() { st.streamed++ }) })
		return
	}
	st.runs.run(w, r, e, work)
}

func (d *DemoSimulator) count(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// demoWork is one call's work: its scripted latency, then its answer.
func demoWork(w http.ResponseWriter, name, prompt string, script DemoScript) {
	if latency := min(time.Duration(max(script.LatencyMS, 0))*time.Millisecond, MaxDemoLatency); latency > 0 {
		time.Sleep(latency)
	}
	switch script.Outcome {
	case OutcomeError:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "simulated outage of " + name})
	case OutcomeOversized:
		out := demoOutput(name, prompt)
		out["text"] += " " + strings.Repeat("x", OversizedBytes)
		writeJSON(w, http.StatusOK, map[string]any{"output": out, "model": "sim"})
	case OutcomeMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("this is not JSON {"))
	default:
		out := demoOutput(name, prompt)
		// Usage as a model-backed webhook may report it: words for tokens,
		// unless the script says what to report.
		usage := map[string]int{"input_tokens": len(strings.Fields(prompt)), "output_tokens": len(strings.Fields(out["text"]))}
		if script.InputTokens+script.OutputTokens > 0 {
			usage = map[string]int{"input_tokens": script.InputTokens, "output_tokens": script.OutputTokens}
		}
		writeJSON(w, http.StatusOK, map[string]any{"output": out, "model": "sim", "usage": usage})
	}
}

// control serves PUT and DELETE /control/{provider}: the provider-wide
// script for brownout drills.
func (d *DemoSimulator) control(w http.ResponseWriter, r *http.Request, name string) {
	if name == "" || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodPut:
		var s DemoScript
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body is not a script: " + err.Error()})
			return
		}
		if err := d.SetScript(name, s); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, s)
	case http.MethodDelete:
		d.ClearScript(name)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "PUT, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}
}

// The asynchronous demo provider: the Responses simulator (background mode)
// behind the openai-background adapter.
const (
	DemoAsync = "sim-async"
	// DemoAsyncSecretRef names its webhook signing secret, which the local
	// stack makes and hands to the events function's secret source.
	DemoAsyncSecretRef = "ONEJOB_SIM_ASYNC_WEBHOOK_SECRET"
)

// DemoAsyncOutput is what an asynchronous demo provider's work answers:
// the demo contract's output, naming it (DemoAsync, DemoHookAsync).
func DemoAsyncOutput(name string) json.RawMessage {
	return json.RawMessage(`{"text":"answer from ` + name + `","provider":"` + name + `"}`)
}

// The other asynchronous demo provider: the webhook-async simulator behind
// the webhook-async adapter (docs/webhook-provider-contract.md).
const (
	DemoHookAsync = "sim-hook-async"
	// DemoHookAsyncSecretRef names the secret it signs its callbacks with,
	// which the local stack makes.
	DemoHookAsyncSecretRef = "ONEJOB_SIM_HOOK_ASYNC_WEBHOOK_SECRET"
)

// DemoHookAsyncConfig is sim-hook-async's provider config for a
// webhook-async simulator served at baseURL, calling back the API at
// apiURL.
func DemoHookAsyncConfig(baseURL, apiURL string) provider.ProviderConfig {
	return provider.ProviderConfig{Name: DemoHookAsync, Kind: provider.KindWebhookAsync,
		BaseURL: strings.TrimRight(baseURL, "/") + WebhookAsyncPath, WebhookSecretRef: DemoHookAsyncSecretRef,
		CallbackURL:  strings.TrimRight(apiURL, "/") + provider.CallbackPath + DemoHookAsync,
		KeyRetention: "24h", SlowCallAfter: "1s", MaxProcessingTime: "1m"}
}

// DemoAsyncConfig is sim-async's provider config for a Responses simulator
// served at baseURL.
func DemoAsyncConfig(baseURL string) provider.ProviderConfig {
	return provider.ProviderConfig{Name: DemoAsync, Kind: provider.KindOpenAIBackground,
		BaseURL: strings.TrimRight(baseURL, "/") + "/v1", Model: "gpt-4.1-mini", WebhookSecretRef: DemoAsyncSecretRef,
		SlowCallAfter: "1s", MaxProcessingTime: "1m"}
}
