package webhook

import (
	"context"
	"encoding/json"

	"github.com/onejob/onejob/internal/provider"
)

// The streamed answer (docs/webhook-provider-contract.md, "Streaming the
// answer"): the request Call sends, with Accept naming text/event-stream
// first. A receiver that streams answers 200 text/event-stream: delta
// events, each {"text": the next piece of the output's JSON text}, then
// one answer event whose data is the body the answer would have had
// whole ({"output", "model"?, "usage"?}), read exactly as Call reads it
// (parse). A failure after the stream started is an error event,
// {"status": the status it would have had, "error": "…", "usage"?},
// classified as that status, and paid for as an answer (the stream had
// started: provider.JSONClient.StreamError). Any other answer (a receiver that does not stream, a
// repeat of a key replayed whole, a refusal before the stream started)
// is read as Call reads it, its output handed to the sink in one piece.
// A stream that ends before its answer event is cut: ambiguous.

// The streamed answer's media type, events and Accept header.
const (
	MediaEventStream = "text/event-stream"
	EventDelta       = "delta"
	EventAnswer      = "answer"
	EventError       = "error"
	// AcceptStream asks for a stream, and takes a whole answer.
	AcceptStream = MediaEventStream + ", application/json"
)

// Delta is a delta event's data.
type Delta struct {
	Text string `json:"text"`
}

// StreamFailure is an error event's data: the status the answer would
// have had, why, and what the receiver's model was billed before it
// failed.
type StreamFailure struct {
	Status int             `json:"status"`
	Error  string          `json:"error"`
	Usage  *provider.Usage `json:"usage,omitempty"`
}

// Stream implements provider.Streamer.
func (a *Adapter) Stream(ctx context.Context, req provider.Request, sink provider.Sink) (resp provider.Response, err error) {
	start := a.Clock()()
	defer func() { provider.LogCall(ctx, a.Logger(), a.cfg.Name, req, a.Clock()().Sub(start), resp, err) }()
	prep, err := a.Prepare(req)
	if err != nil {
		return provider.Response{}, err
	}
	sresp, err := a.Client().PostStream(ctx, a.cfg.URL, a.header(req), prep.Body, AcceptStream)
	if err != nil {
		return provider.Response{}, err
	}
	defer sresp.Body.Close()
	if !sresp.EventStream() {
		hresp, err := a.Client().ReadWhole(sresp)
		if err != nil {
			return provider.Response{}, err
		}
		resp, err = a.parse(hresp)
		if err == nil {
			sink(string(resp.Output))
		}
		return resp, err
	}
	at := sresp.At()
	events := a.Client().Events(sresp)
	for {
		ev, err := events.Next()
		if err != nil {
			return provider.Response{}, a.Client().StreamFailure(at, err)
		}
		switch ev.Type {
		case EventDelta:
			var d Delta
			if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
				return provider.Response{}, a.Client().Cut(at, "malformed delta event: "+provider.Excerpt(ev.Data), err)
			}
			if d.Text != "" {
				sink(d.Text)
			}
		case EventAnswer:
			if !json.Valid([]byte(ev.Data)) {
				// A garbled event, not a malformed answer: what the
				// receiver answered is not known.
				return provider.Response{}, a.Client().Cut(at, "malformed answer event: "+provider.Excerpt(ev.Data), provider.ErrMalformedResponse)
			}
			at.Body = []byte(ev.Data)
			return a.parse(at)
		case EventError:
			var f StreamFailure
			if err := json.Unmarshal([]byte(ev.Data), &f); err != nil || f.Status < 400 || f.Status > 599 {
				return provider.Response{}, a.Client().Cut(at, "malformed error event: "+provider.Excerpt(ev.Data), err)
			}
			return provider.Response{}, a.Client().StreamError(at, f.Status, []byte(ev.Data)).Billed(f.Usage)
		}
	}
}
