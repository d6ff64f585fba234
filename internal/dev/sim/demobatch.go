package sim

import (
	"net/http"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/provider"
)

// The batch demo providers (issue 40): the OpenAI Batch simulator behind
// the openai adapter (sim-batch-openai) and the Message Batches simulator
// behind the anthropic adapter (sim-batch-anthropic), served by one
// loopback server (their paths are apart), each line answered as the
// demo contract asks, naming its provider and echoing its prompt. A job
// that may wait a day runs on either as a batch line; one that may not,
// synchronously on the same simulators' chat and messages endpoints.
const (
	DemoBatchOpenAI    = "sim-batch-openai"
	DemoBatchAnthropic = "sim-batch-anthropic"
	// DemoFlex is an openai-flex provider on the same server's chat
	// completions, for the jobs that may wait a few hours.
	DemoFlex = "sim-flex"
	// DemoBatchKey is the simulators' API key (no secret: a local stack's).
	DemoBatchKey = "sk-sim-batch"
	// DemoBatchKeyRef names it for the providers' configuration.
	DemoBatchKeyRef = "ONEJOB_SIM_BATCH_KEY"
)

// demoFlexPath is where the server answers sim-flex.
const demoFlexPath = "/flex"

// DemoBatch is the batch demo providers' server: both simulators and the
// synchronous simulators their lines run through.
type DemoBatch struct {
	OpenAI    *OpenAIBatch
	Anthropic *MessageBatches
	// OpenAILines and AnthropicLines answer each line (and the
	// synchronous calls); Flex answers sim-flex (under /flex).
	OpenAILines, AnthropicLines, Flex *Simulator
	server                            *Server
}

// DemoBatchOptions configure the batch demo providers: their clock, sped
// up as the asynchronous demo providers' is, and how long a batch works.
type DemoBatchOptions struct {
	NowFunc        func() time.Time
	Speed          int
	ProcessingTime time.Duration
}

// StartDemoBatch serves the batch demo providers on a loopback port.
func StartDemoBatch(opts DemoBatchOptions) (*DemoBatch, error) {
	d := &DemoBatch{
		OpenAILines:    New(Options{Oracle: Demo{Provider: DemoBatchOpenAI}, APIKey: DemoBatchKey}),
		AnthropicLines: New(Options{Oracle: Demo{Provider: DemoBatchAnthropic}, APIKey: DemoBatchKey}),
		Flex:           New(Options{Oracle: Demo{Provider: DemoFlex}, APIKey: DemoBatchKey}),
	}
	base := BatchOptions{APIKey: DemoBatchKey, ProcessingTime: opts.ProcessingTime, NowFunc: opts.NowFunc, Speed: opts.Speed}
	var err error
	o := base
	o.Lines = d.OpenAILines
	if d.OpenAI, err = NewOpenAIBatch(o); err != nil {
		return nil, err
	}
	a := base
	a.Lines = d.AnthropicLines
	if d.Anthropic, err = NewMessageBatches(a); err != nil {
		d.OpenAI.Close()
		return nil, err
	}
	oh, ah := d.OpenAI.Handler(), d.Anthropic.Handler()
	oc, ac := d.OpenAILines.OpenAI(), d.AnthropicLines.Anthropic()
	fc := http.StripPrefix(demoFlexPath, d.Flex.OpenAI())
	d.server, err = Start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, demoFlexPath+"/"):
			fc.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/v1/messages/batches"):
			ah.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/v1/messages"):
			ac.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/v1/chat/completions"):
			oc.ServeHTTP(w, r)
		default:
			oh.ServeHTTP(w, r)
		}
	}))
	if err != nil {
		d.OpenAI.Close()
		d.Anthropic.Close()
		return nil, err
	}
	return d, nil
}

// URL is the server's base URL.
func (d *DemoBatch) URL() string { return d.server.URL() }

// Step applies what is due on both simulators' clocks (a stack calls it
// on a ticker).
func (d *DemoBatch) Step() {
	d.OpenAI.Step()
	d.Anthropic.Step()
}

// Close stops the server and the simulators.
func (d *DemoBatch) Close() {
	_ = d.server.Close()
	d.OpenAI.Close()
	d.Anthropic.Close()
}

// DemoBatchConfigs are the batch demo providers' configs for a DemoBatch
// served at baseURL: sim-batch-openai (openai), sim-batch-anthropic
// (anthropic) and sim-flex (openai-flex, on a model with a flex tier).
func DemoBatchConfigs(baseURL string) []provider.ProviderConfig {
	base := strings.TrimRight(baseURL, "/")
	return []provider.ProviderConfig{
		{Name: DemoBatchOpenAI, Kind: provider.KindOpenAI, BaseURL: base + "/v1", Model: "gpt-4.1-mini", CredentialRef: DemoBatchKeyRef,
			SlowCallAfter: "1s", MaxProcessingTime: "1m"},
		{Name: DemoBatchAnthropic, Kind: provider.KindAnthropic, BaseURL: base, Model: "claude-haiku-4-5", CredentialRef: DemoBatchKeyRef,
			SlowCallAfter: "1s", MaxProcessingTime: "1m"},
		{Name: DemoFlex, Kind: provider.KindOpenAIFlex, BaseURL: base + demoFlexPath + "/v1", Model: "o4-mini", CredentialRef: DemoBatchKeyRef,
			SlowCallAfter: "5s", MaxProcessingTime: "1m"},
	}
}
