package adapters_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

const secretValue = "sk-live-NEVER-LOG-ME"

func startSim(t *testing.T, handler func(*sim.Simulator) http.Handler) (*sim.Simulator, string) {
	t.Helper()
	s := sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"text":"hi","provider":"x"}`)}, APIKey: secretValue})
	srv, err := sim.Start(handler(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return s, srv.URL()
}

// TestRegistryFromJSONConfig builds every kind from JSON config against
// loopback simulators, resolves the key from the secret source and calls each
// provider once.
func TestRegistryFromJSONConfig(t *testing.T) {
	t.Parallel()
	oaiSim, oaiURL := startSim(t, (*sim.Simulator).OpenAI)
	antSim, antURL := startSim(t, (*sim.Simulator).Anthropic)
	brSim, brURL := startSim(t, (*sim.Simulator).Bedrock)
	whSim, whURL := startSim(t, (*sim.Simulator).Webhook)

	cfg, err := provider.ParseConfig([]byte(`{"providers":[
		{"name":"openai-primary","kind":"openai","base_url":"` + oaiURL + `/v1","model":"gpt-x","credential_ref":"OPENAI_API_KEY"},
		{"name":"anthropic-fallback","kind":"anthropic","base_url":"` + antURL + `","model":"claude-x","credential_ref":"ANTHROPIC_API_KEY"},
		{"name":"bedrock-claude","kind":"bedrock","base_url":"` + brURL + `","model":"anthropic.claude-x","region":"eu-west-1"},
		{"name":"hook","kind":"webhook","base_url":"` + whURL + `/run","credential_ref":"HOOK_TOKEN"}
	]}`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	env := map[string]string{"OPENAI_API_KEY": secretValue, "ANTHROPIC_API_KEY": secretValue, "HOOK_TOKEN": secretValue}
	var logs bytes.Buffer
	reg, err := adapters.NewRegistry(t.Context(), cfg,
		provider.EnvSecrets{Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok }},
		adapters.Options{
			Logger:         slog.New(slog.NewJSONHandler(&logs, nil)),
			AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", secretValue, ""),
		})
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	if got := strings.Join(reg.Names(), ","); got != "anthropic-fallback,bedrock-claude,hook,openai-primary" {
		t.Errorf("Names = %s", got)
	}
	req := callRequest()
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		if _, err := p.Call(t.Context(), req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, s := range map[string]*sim.Simulator{"openai": oaiSim, "anthropic": antSim, "bedrock": brSim, "webhook": whSim} {
		if calls := s.Calls(); len(calls) != 1 || !calls[0].Authorized || calls[0].IdempotencyKey != "j/1" {
			t.Errorf("%s simulator calls = %+v", name, calls)
		}
	}
	if strings.Contains(logs.String(), secretValue) {
		t.Errorf("secret in logs: %s", logs.String())
	}
	if !strings.Contains(logs.String(), `"provider":"bedrock-claude"`) {
		t.Errorf("missing call log: %s", logs.String())
	}
}

// callRequest is one call of the demo contract.
func callRequest() provider.Request {
	return provider.Request{
		JobID: "j", Attempt: 1, IdempotencyKey: "j/1", JobType: "demo", Prompt: "p",
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Input:        json.RawMessage(`{}`),
	}
}

func TestRegistryConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pc      provider.ProviderConfig
		opts    adapters.Options
		wantMsg string
	}{
		{"UnknownKind", provider.ProviderConfig{Name: "x", Kind: "grpc"}, adapters.Options{}, `unknown kind "grpc"`},
		{"MissingSecret", provider.ProviderConfig{Name: "x", Kind: "openai", Model: "m", CredentialRef: "NOPE"}, adapters.Options{}, "secret not found"},
		{"AnthropicWithoutKey", provider.ProviderConfig{Name: "x", Kind: "anthropic", Model: "m"}, adapters.Options{}, "api key is required"},
		{"BedrockWithoutCredentials", provider.ProviderConfig{Name: "x", Kind: "bedrock", Model: "m", Region: "r"}, adapters.Options{}, "AWSCredentials"},
		{"BedrockWithoutRegion", provider.ProviderConfig{Name: "x", Kind: "bedrock", Model: "m"},
			adapters.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("a", "b", "")}, "region is required"},
		{"WebhookPlainHTTP", provider.ProviderConfig{Name: "x", Kind: "webhook", BaseURL: "http://example.com/h"}, adapters.Options{}, "https"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := adapters.NewRegistry(t.Context(), provider.Config{Providers: []provider.ProviderConfig{tc.pc}},
				provider.EnvSecrets{Lookup: func(string) (string, bool) { return "", false }}, tc.opts)
			if !errors.Is(err, provider.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want ErrInvalidConfig mentioning %q", err, tc.wantMsg)
			}
		})
	}
}

// TestSettlersFromConfig: what the registry holds settles an unknown
// attempt exactly when its provider offers a way (the lead's reconciler
// type-asserts provider.Settler): webhooks and OpenAI with "lookup" do,
// OpenAI without it, Anthropic and Bedrock do not.
func TestSettlersFromConfig(t *testing.T) {
	t.Parallel()
	cfg, err := provider.ParseConfig([]byte(`{"providers":[
		{"name":"oai","kind":"openai","base_url":"http://127.0.0.1:9/v1","model":"gpt-4o"},
		{"name":"oai-lookup","kind":"openai","base_url":"http://127.0.0.1:9/v1","model":"gpt-4o","lookup":true},
		{"name":"ant","kind":"anthropic","base_url":"http://127.0.0.1:9","model":"claude-x","credential_ref":"K"},
		{"name":"br","kind":"bedrock","base_url":"http://127.0.0.1:9","model":"anthropic.claude-x","region":"eu-west-1"},
		{"name":"hook","kind":"webhook","base_url":"http://127.0.0.1:9/run"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := adapters.NewRegistry(t.Context(), cfg, provider.EnvSecrets{Lookup: func(string) (string, bool) { return "k", true }},
		adapters.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", "s", "")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"oai": false, "oai-lookup": true, "ant": false, "br": false, "hook": true}
	for name, settles := range want {
		p, _ := reg.Get(name)
		if _, ok := p.(provider.Settler); ok != settles {
			t.Errorf("%s (%T) is a Settler: %v, want %v", name, p, ok, settles)
		}
	}
}

// TestKindsRunTheirTiers holds provider.RunTier and RunsTier, which price
// tables are checked against (review N-L7: a tier discount only where the
// provider runs work in the window), to what each kind's adapter is: it
// says its kind; the kinds that run work in the background are exactly the
// provider.Async ones, those that run a day's window as batch lines the
// provider.Batcher ones, and a flex tier is openai-flex's only.
func TestKindsRunTheirTiers(t *testing.T) {
	t.Parallel()
	cfg, err := provider.ParseConfig([]byte(`{"providers":[
		{"name":"openai","kind":"openai","base_url":"http://127.0.0.1:9/v1","model":"gpt-4o"},
		{"name":"openai-flex","kind":"openai-flex","base_url":"http://127.0.0.1:9/v1","model":"o3"},
		{"name":"anthropic","kind":"anthropic","base_url":"http://127.0.0.1:9","model":"claude-x","credential_ref":"K"},
		{"name":"bedrock","kind":"bedrock","base_url":"http://127.0.0.1:9","model":"anthropic.claude-x","region":"eu-west-1"},
		{"name":"bedrock-flex","kind":"bedrock-flex","base_url":"http://127.0.0.1:9","model":"amazon.nova-lite-v1:0","region":"eu-west-1"},
		{"name":"webhook","kind":"webhook","base_url":"http://127.0.0.1:9/run"},
		{"name":"openai-background","kind":"openai-background","base_url":"http://127.0.0.1:9/v1","model":"gpt-4o",
			"webhook_secret_ref":"` + whsecRef + `"},
		{"name":"webhook-async","kind":"webhook-async","base_url":"http://127.0.0.1:9/work",
			"callback_url":"https://api.example/v1/provider-events/webhook-async","webhook_secret_ref":"` + whsecRef + `"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := adapters.NewRegistry(t.Context(), cfg, provider.EnvSecrets{Lookup: func(ref string) (string, bool) {
		if ref == whsecRef {
			return whsecValue, true
		}
		return "k", true
	}}, adapters.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", "s", "")})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(reg.Names()); got != len(provider.Kinds()) {
		t.Fatalf("%d providers for %d kinds", got, len(provider.Kinds()))
	}
	for _, kind := range provider.Kinds() {
		p, ok := reg.Get(kind)
		if !ok {
			t.Fatalf("no provider of kind %s", kind)
		}
		if k, ok := p.(provider.Kinded); !ok || k.Kind() != kind {
			t.Fatalf("%s (%T) does not say its kind", kind, p)
		}
		_, async := p.(provider.Async)
		_, batches := p.(provider.Batcher)
		for _, tier := range job.Tiers() {
			run, mode := provider.ModeFor(p, tier)
			if !run.Within(tier) || provider.RunsTier(kind, run) != true {
				t.Errorf("%s runs a %s job at %s", kind, tier, run)
			}
			switch mode {
			case provider.ModeBackground:
				if !async {
					t.Errorf("%s (%T) runs %s in the background, but is no provider.Async", kind, p, tier)
				}
			case provider.ModeBatch:
				if !batches || run != job.TierBatch24h {
					t.Errorf("%s (%T) runs %s as a batch line at %s", kind, p, tier, run)
				}
			case provider.ModeFlex:
				if kind != provider.KindOpenAIFlex && kind != provider.KindBedrockFlex {
					t.Errorf("%s runs %s at a flex tier", kind, tier)
				}
			case provider.ModeSync:
				if async || run != job.TierNow {
					t.Errorf("%s (%T) runs %s synchronously at %s", kind, p, tier, run)
				}
			}
			if tier != job.TierNow && provider.RunsTier(kind, tier) != (run == tier) {
				t.Errorf("%s: RunsTier(%s) %v, but it runs it at %s", kind, tier, provider.RunsTier(kind, tier), run)
			}
		}
		if async && batches {
			t.Errorf("%s is both asynchronous and a batcher", kind)
		}
		if !provider.RunsTier(kind, job.TierNow) || !provider.RunsTier(kind, "") {
			t.Errorf("%s does not run now", kind)
		}
	}
	// A job that may wait a day runs on openai and anthropic as a batch
	// line, on the background kinds in their longest window, on flex at
	// its flex tier.
	for kind, want := range map[string]job.Tier{provider.KindOpenAI: job.TierBatch24h, provider.KindAnthropic: job.TierBatch24h,
		provider.KindOpenAIBackground: job.TierFlex8h, provider.KindWebhookAsync: job.TierFlex8h, provider.KindOpenAIFlex: job.TierBatch24h,
		provider.KindBedrockFlex: job.TierBatch24h, provider.KindBedrock: job.TierNow, provider.KindWebhook: job.TierNow} {
		if run, _ := provider.RunTier(kind, job.TierBatch24h); run != want {
			t.Errorf("%s runs a 24h job at %s, want %s", kind, run, want)
		}
	}
	if provider.RunsTier("grpc", job.TierNow) || provider.RunsTier(provider.KindOpenAIBackground, "24h") || provider.RunsTier(provider.KindBedrock, "24h") {
		t.Error("an unknown kind or tier runs")
	}
	if got := provider.DiscountedTiers(provider.KindOpenAIFlex); len(got) != 3 {
		t.Errorf("openai-flex's discounted tiers: %v", got)
	}
	if got := provider.DiscountedTiers(provider.KindOpenAIBackground); len(got) != 0 {
		t.Errorf("openai-background's discounted tiers: %v (its windows' discounts are its price's to say)", got)
	}
}
