package openai_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
)

// TestAsyncEventNamesItsDelivery: a verified delivery names its response
// and itself, by its webhook-id until its signature goes stale (the
// lifecycle keeps the id that long to answer copies as duplicates), on
// openai-python's vector.
func TestAsyncEventNamesItsDelivery(t *testing.T) {
	t.Parallel()
	a, err := openai.NewAsync(openai.Config{Name: "oa", BaseURL: "https://api.openai.example/v1", Model: "gpt-test",
		APIKey: provider.Secret("sk-test")}, webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "wh_685c059ae39c8190af8c71ed1022a24d")
	h.Set("webhook-timestamp", "1750861210")
	h.Set("webhook-signature", "v1,gUAg4R2hWouRZqRQG4uJypNS8YK885G838+EHb4nKBY=")
	body := `{"id": "evt_685c059ae3a481909bdc86819b066fb6", "object": "event", "created_at": 1750861210, "type": "response.completed", "data": {"id": "resp_123"}}`
	sent := time.Unix(1750861210, 0)
	d, err := a.Event(h, []byte(body), sent.Add(4*time.Minute))
	want := provider.EventDelivery{ID: "wh_685c059ae39c8190af8c71ed1022a24d", WorkID: "resp_123", Expires: sent.UTC().Add(5 * time.Minute)}
	if err != nil || d != want {
		t.Fatalf("event = %+v, %v; want %+v", d, err, want)
	}
	if _, err := a.Event(h, []byte(body), want.Expires.Add(time.Second)); err == nil {
		t.Fatal("a copy past its expiry verified")
	}
}
