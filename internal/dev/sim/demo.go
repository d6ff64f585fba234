package sim

import (
	"encoding/json"
	"fmt"
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
)

// OversizedBytes is the size of an oversized demo answer's text: past
// DynamoDB's 400 KB item, by a margin.
const OversizedBytes = 450 << 10

// MaxDemoLatency caps a scripted latency so a typo cannot park a handler.
const MaxDemoLatency = time.Minute

// DemoScript is one provider's scripted behaviour in a demo job input.
type DemoScript struct {
	LatencyMS int    `json:"latency_ms"`
	Outcome   string `json:"outcome"`
}

// DemoInput is the demo job type's input.
type DemoInput struct {
	Prompt   string                `json:"prompt"`
	Simulate map[string]DemoScript `json:"simulate,omitempty"`
}

// DemoStats is what the simulator saw for one provider: every call
// counted, the idempotency keys of the last MaxCalls.
type DemoStats struct {
	Calls           int      `json:"calls"`
	IdempotencyKeys []string `json:"idempotency_keys"`
}

// DemoSimulator serves any number of webhook providers on /{provider} (e.g.
// /sim-primary, /sim-fallback). Each call's behaviour is scripted by the job
// input it carries; unscripted providers answer ok at once. GET /calls
// returns the per-provider stats as JSON for out-of-process end-to-end suites.
type DemoSimulator struct {
	mu    sync.Mutex
	stats map[string]*DemoStats
	seq   int
}

// NewDemo returns an empty DemoSimulator.
func NewDemo() *DemoSimulator {
	return &DemoSimulator{stats: map[string]*DemoStats{}}
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

// DemoConfig is the provider config of sim-primary and sim-fallback served by
// the webhook adapter against a DemoSimulator at baseURL. Their health
// limits are a local machine's, so that a brownout shows within seconds: a
// call is slow past 1 s (a demo call answers at once unless its input
// scripts a latency), 3 failures within 10 s open a breaker for 5 s
// (doubling to a minute on re-trips), one probe half-open for at most 3 s,
// and at most 8 attempts holding a provider.
func DemoConfig(baseURL string) provider.Config {
	base := strings.TrimRight(baseURL, "/")
	limits := func(pc provider.ProviderConfig) provider.ProviderConfig {
		pc.SlowCallAfter, pc.MaxProcessingTime, pc.MaxConcurrent = "1s", "1m", 8
		pc.Breaker = &provider.BreakerConfig{Failures: 3, Window: "10s", Cooldown: "5s", MaxCooldown: "1m", Probes: 1, HalfOpenMax: "3s"}
		return pc
	}
	return provider.Config{Providers: []provider.ProviderConfig{
		limits(provider.ProviderConfig{Name: DemoPrimary, Kind: provider.KindWebhook, BaseURL: base + "/" + DemoPrimary}),
		limits(provider.ProviderConfig{Name: DemoFallback, Kind: provider.KindWebhook, BaseURL: base + "/" + DemoFallback}),
	}}
}

// Calls returns how many requests reached the provider, including ones that
// timed out or failed.
func (d *DemoSimulator) Calls(providerName string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return st.Calls
	}
	return 0
}

// IdempotencyKeys returns the Idempotency-Key headers the provider received
// (the last MaxCalls).
func (d *DemoSimulator) IdempotencyKeys(providerName string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st, ok := d.stats[providerName]; ok {
		return slices.Clone(latest(st.IdempotencyKeys))
	}
	return nil
}

// Stats returns a snapshot of every provider's stats.
func (d *DemoSimulator) Stats() map[string]DemoStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]DemoStats, len(d.stats))
	for name, st := range d.stats {
		out[name] = DemoStats{Calls: st.Calls, IdempotencyKeys: slices.Clone(latest(st.IdempotencyKeys))}
	}
	return out
}

// Reset forgets all recorded calls.
func (d *DemoSimulator) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats = map[string]*DemoStats{}
}

func (d *DemoSimulator) record(name, key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.stats[name]
	if !ok {
		st = &DemoStats{}
		d.stats[name] = st
	}
	st.Calls++
	st.IdempotencyKeys = remember(st.IdempotencyKeys, key)
	d.seq++
	return fmt.Sprintf("sim-%s-%d", name, d.seq)
}

func (d *DemoSimulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if r.Method == http.MethodGet && name == "calls" {
		writeJSON(w, http.StatusOK, d.Stats())
		return
	}
	if name == "" || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	var body webhook.Request
	if _, ok := decode(w, r, &body); !ok {
		return
	}
	w.Header().Set("X-Request-Id", d.record(name, r.Header.Get("Idempotency-Key")))

	var in DemoInput
	if err := json.Unmarshal(body.Input, &in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "input is not a demo input: " + err.Error()})
		return
	}
	script := in.Simulate[name]
	if script.Outcome == OutcomeTimeout {
		hang(r)
		return
	}
	latency := min(time.Duration(max(script.LatencyMS, 0))*time.Millisecond, MaxDemoLatency)
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	switch script.Outcome {
	case OutcomeError:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "simulated outage of " + name})
	case OutcomeOversized:
		out := demoOutput(name, in.Prompt)
		out["text"] += " " + strings.Repeat("x", OversizedBytes)
		writeJSON(w, http.StatusOK, map[string]any{"output": out, "model": "sim"})
	case OutcomeMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("this is not JSON {"))
	default:
		out := demoOutput(name, in.Prompt)
		// Usage as a model-backed webhook may report it: words for tokens.
		writeJSON(w, http.StatusOK, map[string]any{"output": out, "model": "sim",
			"usage": map[string]int{"input_tokens": len(strings.Fields(in.Prompt)), "output_tokens": len(strings.Fields(out["text"]))}})
	}
}
