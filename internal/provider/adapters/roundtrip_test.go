package adapters_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

// byType answers each embedded job type's contract: the triage oracle for
// ticket-triage, the demo oracle for the demo types.
type byType struct{}

func (byType) oracle(c sim.Call) sim.Oracle {
	if c.ToolName == "ticket-triage" || c.JobType == "ticket-triage" {
		return sim.TicketTriage{}
	}
	return sim.Demo{Provider: "sim-roundtrip"}
}

func (o byType) Good(c sim.Call) (json.RawMessage, error)     { return o.oracle(c).Good(c) }
func (o byType) Semantic(c sim.Call) (json.RawMessage, error) { return o.oracle(c).Semantic(c) }

// TestEveryJobTypeRoundTrips sends every golden case of every embedded job
// type through each adapter, built from providers.json as a deployment
// builds it, to its simulator: the simulator accepts the request (a strict
// schema inside its provider's documented subset, else its 400), strict
// mode is used where the provider enforces schemas, and the answer passes
// the type's whole contract (jobtype.CheckOutput). Each case is streamed
// too (provider.Streamer): the same answer, its pieces the answer's text
// (before OpenAI's strict-mode nulls are taken out of it).
func TestEveryJobTypeRoundTrips(t *testing.T) {
	t.Parallel()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name, kind, model string
		handler           func(*sim.Simulator) http.Handler
		path              string
		strict            bool
	}{
		{"OpenAI", provider.KindOpenAI, "gpt-4o", (*sim.Simulator).OpenAI, "/v1", true},
		{"AnthropicStrict", provider.KindAnthropic, "claude-sonnet-4-5", (*sim.Simulator).Anthropic, "", true},
		{"AnthropicGuided", provider.KindAnthropic, "claude-3-5-haiku-20241022", (*sim.Simulator).Anthropic, "", false},
		{"BedrockStrict", provider.KindBedrock, "us.anthropic.claude-sonnet-4-5-20250929-v1:0", (*sim.Simulator).Bedrock, "", true},
		{"BedrockGuided", provider.KindBedrock, "anthropic.claude-3-5-haiku-20241022-v1:0", (*sim.Simulator).Bedrock, "", false},
		{"Webhook", provider.KindWebhook, "", (*sim.Simulator).Webhook, "/run", false},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := sim.New(sim.Options{Oracle: byType{}, APIKey: secretValue})
			srv, err := sim.Start(k.handler(s))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			pc := provider.ProviderConfig{Name: "p", Kind: k.kind, Model: k.model, BaseURL: srv.URL() + k.path}
			switch k.kind {
			case provider.KindBedrock:
				pc.Region = "eu-west-1"
			default:
				pc.CredentialRef = "KEY"
			}
			reg, err := adapters.NewRegistry(t.Context(), provider.Config{Providers: []provider.ProviderConfig{pc}},
				provider.EnvSecrets{Lookup: func(string) (string, bool) { return secretValue, true }},
				adapters.Options{AWSCredentials: credentials.NewStaticCredentialsProvider("AKID", secretValue, "")})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := reg.Get("p")
			n := 0
			for _, name := range cat.Names() {
				jt, _ := cat.Get(name)
				for _, c := range jt.Cases() {
					n++
					req, err := jt.Request(c.Input)
					if err != nil {
						t.Fatal(err)
					}
					req.JobID, req.Attempt = "job-rt", n
					req.IdempotencyKey = fmt.Sprintf("job-rt/%d", n)
					resp, err := p.Call(t.Context(), req)
					if err != nil {
						t.Fatalf("%s/%s: %v", name, c.Name, err)
					}
					if err := jt.CheckOutput(resp.Output); err != nil {
						t.Errorf("%s/%s: the answer %s breaks the contract: %v", name, c.Name, resp.Output, err)
					}
					var pieces strings.Builder
					streamed, err := p.(provider.Streamer).Stream(t.Context(), req, func(s string) { pieces.WriteString(s) })
					if err != nil {
						t.Fatalf("%s/%s: Stream: %v", name, c.Name, err)
					}
					if string(streamed.Output) != string(resp.Output) || !json.Valid([]byte(pieces.String())) {
						t.Errorf("%s/%s: streamed %s in pieces %q, called %s", name, c.Name, streamed.Output, pieces.String(), resp.Output)
					}
					calls := s.Calls()
					if got := calls[len(calls)-1]; got.Refused != "" || got.Strict != k.strict || !got.Stream {
						t.Errorf("%s/%s: simulator saw strict %v (want %v), refused %q", name, c.Name, got.Strict, k.strict, got.Refused)
					}
				}
			}
			if n < 6 {
				t.Fatalf("only %d golden cases", n)
			}
		})
	}
}
