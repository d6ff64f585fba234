package sim

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/onejob/onejob/internal/provider/webhook"
)

// A webhook receiver's streamed answer, as onejob's webhook provider
// contract describes it (docs/webhook-provider-contract.md, "Streaming
// the answer"): a request whose Accept names text/event-stream may be
// answered 200 text/event-stream, with delta events ({"text": the next
// piece of the output's JSON text}) and then one answer event whose data
// is the body the answer would have had whole; a failure after the
// stream started is an error event, {"status", "error"}. An answer that
// is no 200 is written whole, as before a stream starts; so is a repeat
// of a key (its first answer, replayed whole).

// wantsStream reports whether a webhook request asks for a streamed
// answer (its Accept names text/event-stream).
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := strings.Cut(part, ";")
		if strings.EqualFold(strings.TrimSpace(mt), webhook.MediaEventStream) {
			return true
		}
	}
	return false
}

// webhookStream cuts a webhook answer into the contract's events.
func webhookStream(_ Call, a answer) *streamed {
	if _, ok := jsonAnswer(a); !ok {
		return nil
	}
	var body struct {
		Output json.RawMessage `json:"output"`
	}
	_ = json.Unmarshal(a.body, &body)
	var events []streamEvent
	if strings.HasPrefix(strings.TrimSpace(string(body.Output)), "{") {
		for _, p := range textPieces(string(body.Output)) {
			events = append(events, deltaOf(sse(webhook.EventDelta, map[string]string{"text": p})))
		}
	}
	answer := sse(webhook.EventAnswer, strings.TrimSpace(string(a.body)))
	events = append(events, answer)
	return &streamed{contentType: webhook.MediaEventStream, events: events,
		fail: sse(webhook.EventError, map[string]any{"status": http.StatusServiceUnavailable, "error": "the receiver failed after the stream started"})}
}
