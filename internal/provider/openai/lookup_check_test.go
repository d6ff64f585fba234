package openai_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
)

// TestLookupSettlesOnlyThisAttemptsCompletion: a completion found is
// settled on only if its metadata carries the attempt's key exactly and it
// was created after the attempt was sent (security review L6).
func TestLookupSettlesOnlyThisAttemptsCompletion(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	const key = "onejob-abc123:job_x/1"
	tests := []struct {
		name     string
		metadata string
		created  time.Time
		settles  bool
	}{
		{"ThisAttempts", key, sent.Add(time.Second), true},
		{"AnotherDeploymentsKey", "onejob-other:job_x/1", sent.Add(time.Second), false},
		{"TheOldFormIsNotThisKey", "job_x/1", sent.Add(time.Second), false},
		{"CreatedBeforeTheSend", key, sent.Add(-time.Hour), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = fmt.Fprintf(w, `{"object":"list","has_more":false,"data":[{"id":"chatcmpl-1","object":"chat.completion","created":%d,"model":"gpt-test",`+
					`"metadata":{"onejob_attempt":%q},"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"{\"text\":\"hi\"}"}}],`+
					`"usage":{"prompt_tokens":1,"completion_tokens":1}}]}`, tc.created.Unix(), tc.metadata)
			}))
			t.Cleanup(srv.Close)
			p, err := openai.NewProvider(openai.Config{Name: "o", BaseURL: srv.URL + "/v1", Model: "gpt-test", APIKey: provider.Secret("k"), Lookup: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.(provider.Settler).Settle(t.Context(), provider.Request{JobID: "job_x", Attempt: 1, IdempotencyKey: key, JobType: "demo",
				Prompt: "hi", SentAt: sent})
			if tc.settles && (err != nil || got.Evidence != provider.EvidenceAnswered) {
				t.Fatalf("Settle = %+v, %v; want the answer", got, err)
			}
			if !tc.settles && err == nil {
				t.Fatalf("Settle = %+v; want no evidence", got)
			}
		})
	}
}
