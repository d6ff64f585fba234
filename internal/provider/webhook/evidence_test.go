package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/webhook"
	"github.com/onejob/onejob/internal/verify/providertest"
)

// TestEvidenceRules: what each answer to a re-send or a lookup proves
// (docs/webhook-provider-contract.md, the table).
func TestEvidenceRules(t *testing.T) {
	t.Parallel()
	const answer = `{"output":{"text":"hi"}}`
	tests := []struct {
		name     string
		lookup   bool
		status   int
		replayed bool
		unknown  bool
		body     string
		want     provider.Evidence // "": no evidence (an error)
		class    provider.Class
	}{
		{"ReplayedOKIsTheFirstAnswer", false, 200, true, false, answer, provider.EvidenceAnswered, ""},
		{"UnmarkedOKIsExecutedNow", false, 200, false, false, answer, provider.EvidenceExecuted, ""},
		{"Unmarked402IsNoEvidence", false, 402, false, false, `{"error":"no credits"}`, "", ""},
		{"Unmarked400IsNoEvidence", false, 400, false, false, `{"error":"bad"}`, "", ""},
		{"Unmarked410IsNoEvidence", false, 410, false, false, `{"error":"gone"}`, "", ""},
		{"Replayed400IsARefusal", false, 400, true, false, `{"error":"bad"}`, provider.EvidenceRefused, provider.ClassNonRetryable},
		{"Replayed402IsExhausted", false, 402, true, false, `{"error":"no credits"}`, provider.EvidenceRefused, provider.ClassExhausted},
		{"ConflictIsInProgress", false, 409, false, false, `{"error":"running"}`, provider.EvidenceInProgress, ""},
		{"Unmarked404ToAReSendIsNoEvidence", false, 404, false, true, `{}`, "", ""},
		{"LookupReplayedIsTheFirstAnswer", true, 200, true, false, answer, provider.EvidenceAnswered, ""},
		{"LookupUnknownKeyIsAbsent", true, 404, false, true, `{"error":"no trace"}`, provider.EvidenceAbsent, ""},
		{"LookupPlain404IsNoEvidence", true, 404, false, false, `{"error":"not found"}`, "", ""},
		{"LookupUnmarkedOKBreaksTheContract", true, 200, false, false, answer, "", ""},
		{"LookupInProgress", true, 409, false, false, `{"error":"running"}`, provider.EvidenceInProgress, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var gotLookup string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotLookup = r.Header.Get(webhook.HeaderLookup)
				if tc.replayed {
					w.Header().Set(provider.HeaderIdempotentReplayed, "true")
				}
				if tc.unknown {
					w.Header().Set(webhook.HeaderLookup, webhook.LookupUnknown)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			a, err := webhook.New(webhook.Config{Name: "hook", URL: srv.URL, Lookup: tc.lookup})
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Settle(t.Context(), providertest.Request(1))
			if (gotLookup == webhook.LookupOnly) != tc.lookup {
				t.Fatalf("lookup header %q, lookup %v", gotLookup, tc.lookup)
			}
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("Settle = %+v, want no evidence (an error)", got)
			case tc.want != "" && (err != nil || got.Evidence != tc.want):
				t.Fatalf("Settle = %+v, %v; want %s", got, err, tc.want)
			case tc.class != "" && provider.Classify(got.Err) != tc.class:
				t.Fatalf("class %s, want %s", provider.Classify(got.Err), tc.class)
			}
			if a.SettleExecutes() == tc.lookup {
				t.Fatal("SettleExecutes must be the opposite of the lookup")
			}
		})
	}
}
