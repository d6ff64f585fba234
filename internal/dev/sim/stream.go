package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Streamed answers. A request that asks for a stream (OpenAI and
// Anthropic "stream": true, Bedrock's converse-stream, a webhook's
// Accept: text/event-stream) gets the same answer the simulator would
// give whole, as the API's events: the work (play) runs first, exactly as
// for a whole answer, and what it answered is cut into events, each
// format its own (stream_openai.go and its siblings). An answer that is
// no success (a refusal, an error status, a body that is not JSON) is
// written whole, as the APIs refuse before a stream starts.
//
// The pace is the simulated model's: FirstToken before the first delta,
// then TokenRate deltas a second. Tests pace nothing (the zero value) and
// break streams on purpose (StreamCut) to see what a client makes of a
// stream that ends early.

// StreamOptions pace a simulator's streamed answers and break them.
type StreamOptions struct {
	// FirstToken is how long the simulated model takes to its first delta.
	FirstToken time.Duration
	// TokenRate is how many deltas a second follow it (0: no wait).
	TokenRate float64
	// Cut, when set, breaks every stream at one event (a test hook).
	Cut *StreamCut
}

// CutKind is how a stream breaks.
type CutKind string

const (
	// CutDrop closes the connection before the event, abruptly (the
	// client reads an unexpected end).
	CutDrop CutKind = "drop"
	// CutMidEvent writes the first half of the event's bytes, then closes
	// the connection abruptly.
	CutMidEvent CutKind = "mid_event"
	// CutEnd ends the answer cleanly before the event: a stream short of
	// its end, its last events never sent.
	CutEnd CutKind = "end"
	// CutMalformed sends the event garbled (SSE data that is not JSON, an
	// event-stream message whose checksum fails) and goes on.
	CutMalformed CutKind = "malformed"
	// CutError sends the API's own error in place of the event (an
	// Anthropic overloaded_error event, an OpenAI chunk carrying a
	// server_error, Bedrock's modelStreamErrorException, a webhook
	// receiver's error event) and ends the stream.
	CutError CutKind = "error"
)

// StreamCut breaks a stream at its event At (0 is the first event).
type StreamCut struct {
	At   int     `json:"at"`
	Kind CutKind `json:"kind"`
}

// CutKinds are the ways a stream can be broken.
var CutKinds = []CutKind{CutDrop, CutMidEvent, CutEnd, CutMalformed, CutError}

// Validate refuses a kind the simulators do not know and a negative event.
func (c StreamCut) Validate() error {
	if !slices.Contains(CutKinds, c.Kind) {
		return fmt.Errorf("cut kind %q must be one of %v", c.Kind, CutKinds)
	}
	if c.At < 0 {
		return fmt.Errorf("cut at %d must not be negative", c.At)
	}
	return nil
}

// streamEvent is one event of a streamed answer, encoded.
type streamEvent struct {
	data []byte
	// bad is the event garbled (CutMalformed).
	bad []byte
	// delta: a piece of the answer's text, which the pace spaces out.
	delta bool
}

// streamed is what a format's stream func makes of an answer: the
// answer's content type and its events; nil when the answer is written
// whole.
type streamed struct {
	contentType string
	events      []streamEvent
	// fail is the API's error event, for CutError.
	fail streamEvent
}

// SetStream changes how subsequent streams are paced and broken.
func (s *Simulator) SetStream(o StreamOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Stream = o
}

// textPieces cuts text into the pieces a model's deltas carry: one token
// of the simulators' tokenizer each, with the spaces before it, so that
// the pieces joined are text exactly.
func textPieces(text string) []string {
	idx := tokenSpans(text)
	if len(idx) == 0 {
		if text == "" {
			return nil
		}
		return []string{text}
	}
	pieces := make([]string, 0, len(idx))
	start := 0
	for i := 1; i < len(idx); i++ {
		pieces = append(pieces, text[start:idx[i][0]])
		start = idx[i][0]
	}
	return append(pieces, text[start:])
}

// sse encodes one server-sent event: an event line when typ is named,
// then data as one line of JSON (data is JSON text or a value to encode).
func sse(typ string, data any) streamEvent {
	var raw []byte
	switch d := data.(type) {
	case string:
		raw = []byte(d)
	case []byte:
		raw = d
	default:
		raw, _ = json.Marshal(d)
	}
	var b strings.Builder
	if typ != "" {
		b.WriteString("event: " + typ + "\n")
	}
	b.WriteString("data: " + string(raw) + "\n\n")
	bad := ""
	if typ != "" {
		bad = "event: " + typ + "\n"
	}
	// Half an object: no JSON reader takes it.
	bad += "data: " + string(raw[:len(raw)/2]) + "\n\n"
	return streamEvent{data: []byte(b.String()), bad: []byte(bad)}
}

// deltaOf marks an event as a delta of the answer's text.
func deltaOf(e streamEvent) streamEvent { e.delta = true; return e }

// streamAnswer serves a streamed request: the work runs (detached from
// the client, as every simulated work, and kept under its key), then its
// answer goes to the client as the format's events, paced, while the
// work's time runs on; the key's stored answer stays whole (a repeat of
// an idempotent format's key gets it whole, as onejob's webhook contract
// allows). When the client goes away mid-stream, a format that honours
// its key finishes the work (the contract's rule 4), the others stop (as
// the APIs stop generating when the stream is closed).
func (x *executions) streamAnswer(w http.ResponseWriter, r *http.Request, e *execution, pace StreamOptions, idempotent bool,
	work func(http.ResponseWriter), stream func(answer) *streamed, started func(total int)) {
	type head struct {
		a      answer
		out    *streamed
		events chan streamEvent
	}
	heads := make(chan head, 1)
	ctx := r.Context()
	if idempotent {
		ctx = lifeOf(r)
	}
	go func() {
		rec := newRecorder()
		work(rec)
		a := rec.answer()
		h := head{a: a, out: stream(a)}
		if h.out != nil {
			h.events = make(chan streamEvent, len(h.out.events))
		}
		heads <- h
		if h.out != nil {
			playPaced(ctx, h.out.events, pace, h.events)
			close(h.events)
		}
		x.finish(e, a)
	}()
	var h head
	select {
	case h = <-heads:
	case <-r.Context().Done():
		return
	}
	if h.out == nil {
		select {
		case <-e.done:
			e.answer.writeTo(w)
		case <-r.Context().Done():
		}
		return
	}
	if started != nil {
		started(len(h.out.events))
	}
	for k, vs := range h.a.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", h.out.contentType)
	w.Header().Del("Content-Length")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flush(w)
	i := 0
	for ev := range h.events {
		if c := pace.Cut; c != nil && c.At == i {
			switch c.Kind {
			case CutDrop:
				abort(w)
				return
			case CutMidEvent:
				_, _ = w.Write(ev.data[:len(ev.data)/2])
				flush(w)
				abort(w)
				return
			case CutEnd:
				return
			case CutError:
				_, _ = w.Write(h.out.fail.data)
				flush(w)
				return
			case CutMalformed:
				ev.data = ev.bad
			}
		}
		if _, err := w.Write(ev.data); err != nil {
			return
		}
		flush(w)
		i++
	}
}

// playPaced hands events on in order, spaced as pace says, until ctx ends.
func playPaced(ctx context.Context, events []streamEvent, pace StreamOptions, out chan<- streamEvent) {
	first := true
	for i, ev := range events {
		wait := time.Duration(0)
		switch {
		case ev.delta && first:
			wait, first = pace.FirstToken, false
		case ev.delta && pace.TokenRate > 0:
			wait = time.Duration(float64(time.Second) / pace.TokenRate)
		case first && i == len(events)-1:
			// An answer without deltas still takes its first token's time.
			wait = pace.FirstToken
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		out <- ev
	}
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// jsonAnswer decodes a work's answer when it is a 200 JSON object: what a
// format's events are cut from.
func jsonAnswer(a answer) (map[string]any, bool) {
	if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		return nil, false
	}
	var v map[string]any
	if json.Unmarshal(a.body, &v) != nil {
		return nil, false
	}
	return v, true
}
