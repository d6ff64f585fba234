package bedrock_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/bedrock"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestFlexTier: a bedrock-flex provider sends the attempts that may wait
// at Bedrock's flex service tier and the others at the default one; a
// Claude model, which Bedrock offers no flex for, is refused before
// anything is sent, as Bedrock refuses it.
func TestFlexTier(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: []byte(`{"category":"billing","priority":3,"summary":"Refund.","needs_human":false}`)}})
	srv := httptest.NewServer(s.Bedrock())
	t.Cleanup(srv.Close)
	flex := func(model string) *bedrock.Adapter {
		client, err := bedrock.NewClient(bedrock.ClientConfig{Region: "us-east-1", BaseEndpoint: srv.URL,
			Credentials: credentials.NewStaticCredentialsProvider("AKIDSIMULATOR", "secret", ""),
			HTTPClient:  &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := bedrock.New(bedrock.Config{Name: "bedrock-flex", ModelID: model, Client: client, Flex: true})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := flex("amazon.nova-lite-v1:0")
	if a.Kind() != provider.KindBedrockFlex {
		t.Fatalf("kind %s", a.Kind())
	}
	for i, tc := range []struct {
		tier job.Tier
		want string
	}{{job.TierNow, ""}, {job.TierFlex8h, "flex"}, {job.TierBatch24h, "flex"}} {
		req := providertest.Request(i + 1)
		if tc.tier != job.TierNow {
			req.Tier = string(tc.tier)
		}
		if _, err := a.Call(t.Context(), req); err != nil {
			t.Fatalf("%s: %v", tc.tier, err)
		}
		calls := s.Calls()
		if got := calls[len(calls)-1].ServiceTier; got != tc.want {
			t.Fatalf("a %s attempt sent serviceTier %q, want %q", tc.tier, got, tc.want)
		}
	}
	before := len(s.Calls())
	req := providertest.Request(9)
	req.Tier = string(job.TierFlex2h)
	if _, err := flex("us.anthropic.claude-sonnet-4-20250514-v1:0").Call(t.Context(), req); !errors.Is(err, provider.ErrModelRule) || len(s.Calls()) != before {
		t.Fatalf("flex on Claude: %v, %d calls sent", err, len(s.Calls())-before)
	}
	if bedrock.FlexModel("anthropic.claude-3-5-haiku-20241022-v1:0") || !bedrock.FlexModel("amazon.nova-pro-v1:0") {
		t.Fatal("FlexModel")
	}
}
