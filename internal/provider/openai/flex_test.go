package openai_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestFlexTier: an openai-flex provider sends the attempts that may wait
// at the flex service tier and the others at the default one; a model
// without flex is refused before anything is sent (as the API refuses it);
// no flex capacity is a 429 the provider did not act on.
func TestFlexTier(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.Options{Oracle: sim.Fixed{GoodOutput: goodOutput}, APIKey: "sk-test"})
	srv := httptest.NewServer(s.OpenAI())
	t.Cleanup(srv.Close)
	flex := func(model string) *openai.Adapter {
		a, err := openai.New(openai.Config{Name: "openai-flex", BaseURL: srv.URL + "/v1", Model: model, APIKey: "sk-test", Flex: true})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	at := func(tier job.Tier, attempt int) provider.Request {
		req := providertest.Request(attempt)
		if tier != job.TierNow {
			req.Tier = string(tier)
		}
		return req
	}
	a := flex("o3")
	if a.Kind() != provider.KindOpenAIFlex {
		t.Fatalf("kind %s", a.Kind())
	}
	for i, tc := range []struct {
		tier job.Tier
		want string
	}{{job.TierNow, ""}, {job.TierFlex2h, "flex"}, {job.TierBatch24h, "flex"}} {
		req := at(tc.tier, i+1)
		if _, err := a.Call(t.Context(), req); err != nil {
			t.Fatalf("%s: %v", tc.tier, err)
		}
		calls := s.Calls()
		if got := calls[len(calls)-1].ServiceTier; got != tc.want {
			t.Fatalf("a %s attempt sent service_tier %q, want %q", tc.tier, got, tc.want)
		}
	}
	// A model without flex: refused before sending, as the API refuses it.
	before := len(s.Calls())
	if _, err := flex("gpt-4o").Call(t.Context(), at(job.TierFlex8h, 9)); !errors.Is(err, provider.ErrModelRule) || len(s.Calls()) != before {
		t.Fatalf("flex on gpt-4o: %v, %d calls sent", err, len(s.Calls())-before)
	}
	hreq, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"service_tier":"flex"}`))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Authorization", "Bearer sk-test")
	resp, err := srv.Client().Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Unsupported service_tier: flex") {
		t.Fatalf("the simulator took flex on gpt-4o: %d %s", resp.StatusCode, body)
	}
	// No flex capacity: 429, not run, not billed.
	s.SetFlexUnavailable(1)
	_, err = a.Call(t.Context(), at(job.TierFlex8h, 10))
	var ce *provider.CallError
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Class != provider.ClassRetryable || ce.Usage != nil ||
		!(job.Failure{Class: job.ClassRateLimited}).NotActed() {
		t.Fatalf("no flex capacity: %v", err)
	}
	if s.Executions(at(job.TierFlex8h, 10).IdempotencyKey) != 0 {
		t.Fatal("a request refused for flex capacity ran")
	}
	if _, err := a.Call(t.Context(), at(job.TierFlex8h, 11)); err != nil {
		t.Fatalf("once capacity is back: %v", err)
	}
}
