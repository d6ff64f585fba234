package sim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
)

// ownClient is a client with a transport of the test's own: POSTs through
// http.DefaultTransport can fail with "CloseIdleConnections called" when a
// parallel test closes an httptest.Server, which closes that shared pool's
// idle connections, and net/http never retries a POST.
func ownClient(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func post(t *testing.T, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := ownClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func TestDemoSimulatorStats(t *testing.T) {
	t.Parallel()
	demo, srv, err := sim.StartDemo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	body := `{"job_id":"j","attempt":1,"idempotency_key":"j/1","job_type":"demo","input":{"prompt":"hi","simulate":{"sim-primary":{"outcome":"error"}}},"prompt":"hi"}`

	if resp := post(t, srv.URL()+"/sim-primary", "j/1", body); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("sim-primary status = %d", resp.StatusCode)
	}
	resp := post(t, srv.URL()+"/sim-fallback", "j/2", body)
	var out struct {
		Output map[string]string `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Output["provider"] != "sim-fallback" || !strings.Contains(out.Output["text"], "hi") {
		t.Errorf("sim-fallback answer = %+v, %v", out, err)
	}
	if resp := post(t, srv.URL()+"/a/b", "x", body); resp.StatusCode != http.StatusNotFound {
		t.Errorf("nested path status = %d", resp.StatusCode)
	}
	if resp := post(t, srv.URL()+"/sim-primary", "j/3", `{"input":"not an object"}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad input status = %d", resp.StatusCode)
	}

	get, err := http.Get(srv.URL() + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	var stats map[string]sim.DemoStats
	if err := json.NewDecoder(get.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if stats["sim-primary"].Calls != 2 || stats["sim-fallback"].Calls != 1 || stats["sim-fallback"].IdempotencyKeys[0] != "j/2" {
		t.Errorf("stats = %+v", stats)
	}
	demo.Reset()
	if demo.Calls("sim-primary") != 0 {
		t.Error("Reset did not clear")
	}
}

func TestDemoConfig(t *testing.T) {
	t.Parallel()
	cfg := sim.DemoConfig("http://127.0.0.1:9/")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Providers[1].BaseURL != "http://127.0.0.1:9/sim-fallback" {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestTicketTriageOracle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prompt, category string
	}{
		{"Outage", "Subject: Site is down\n\nEverything returns 503", "outage"},
		{"Billing", "Subject: Refund\n\nI was charged twice", "billing"},
		{"Account", "Subject: Can't log in\n\nReset my password", "account"},
		{"FeatureRequest", "Subject: Idea\n\nIt would be nice to have dark mode", "feature_request"},
		{"Other", "Subject: Hello\n\nJust saying thanks", "other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, _ := sim.TicketTriage{}.Good(sim.Call{Prompt: tc.prompt})
			var out struct {
				Category string `json:"category"`
			}
			_ = json.Unmarshal(raw, &out)
			if out.Category != tc.category {
				t.Errorf("category = %s, want %s", out.Category, tc.category)
			}
		})
	}
}
