package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
)

// The streaming part: every adapter that implements provider.Streamer is
// held to Call's rules. Its Stream sends the request Call sends (the
// simulator sees the same one, but for the stream flags), and returns
// what Call returns for the same scripted answer, in every mode (the same
// Response, or the same error: class, status, message, sentinels, usage);
// the pieces it hands the sink, joined, are the answer's output; a stream
// broken at any event (the connection dropped before it or in its middle,
// the answer ended short, the event garbled) is ambiguous and says so
// (provider.ErrStreamCut); the API's own error inside a stream is that
// error; an answer past the bounds is refused as Call refuses an oversize
// body; a cancelled stream returns at once, ambiguous, with the usage
// reported so far; a repeat of a key (replayed whole by a receiver that
// keeps its keys) gives the same answer.

// streamModes are the scripted answers Stream and Call must agree on.
var streamModes = []sim.Mode{sim.ModeGood, sim.ModeExtraKey, sim.ModeSemantic, sim.ModeProse, sim.ModeContentFilter,
	sim.ModeTruncated, sim.ModeRefusal, sim.ModeRateLimited, sim.ModeServerError, sim.ModeBadRequest, sim.ModeQuotaExhausted, sim.ModeModelTimeout, sim.ModeMalformed}

// sentinels are the errors a failure is compared by.
var sentinels = []error{provider.ErrNoStructuredOutput, provider.ErrContentFiltered, provider.ErrMalformedResponse,
	provider.ErrHTTPStatus, provider.ErrAccountExhausted, provider.ErrTransport, provider.ErrStreamCut}

// collector is a sink that keeps the pieces it was handed.
type collector struct {
	mu     sync.Mutex
	pieces []string
	first  chan struct{}
	once   sync.Once
}

func newCollector() *collector { return &collector{first: make(chan struct{})} }

func (c *collector) sink(text string) {
	c.mu.Lock()
	c.pieces = append(c.pieces, text)
	c.mu.Unlock()
	c.once.Do(func() { close(c.first) })
}

func (c *collector) joined() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.pieces, "")
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pieces)
}

// streamer is the adapter under test as a provider.Streamer.
func streamer(t *testing.T, p provider.Provider) provider.Streamer {
	t.Helper()
	s, ok := p.(provider.Streamer)
	if !ok {
		t.Fatalf("%T is no provider.Streamer", p)
	}
	return s
}

// sameRequest reports how the request a simulator saw for a stream
// differs from the one it saw for Call ("" when only the stream flags do).
func sameRequest(call, stream sim.Call) string {
	norm := func(c sim.Call) sim.Call {
		c.Path, c.RequestID, c.Replay, c.Stream, c.StreamUsage, c.Events, c.OutputTokens = "", "", "", false, false, 0, 0
		return c
	}
	if a, b := norm(call), norm(stream); !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("Call sent %+v, Stream %+v", a, b)
	}
	if call.Stream || !stream.Stream {
		return fmt.Sprintf("stream flags: Call %v, Stream %v", call.Stream, stream.Stream)
	}
	return ""
}

// sameOutcome reports how Stream's outcome differs from Call's ("" when
// it does not).
func sameOutcome(callResp, streamResp provider.Response, callErr, streamErr error) string {
	if (callErr == nil) != (streamErr == nil) {
		return fmt.Sprintf("Call: %v, Stream: %v", callErr, streamErr)
	}
	if callErr == nil {
		if !reflect.DeepEqual(callResp, streamResp) {
			return fmt.Sprintf("Call answered %+v (%s, usage %+v), Stream %+v (%s, usage %+v)",
				callResp, callResp.Output, callResp.Usage, streamResp, streamResp.Output, streamResp.Usage)
		}
		return ""
	}
	var a, b *provider.CallError
	if !errors.As(callErr, &a) || !errors.As(streamErr, &b) {
		return fmt.Sprintf("not CallErrors: Call %T %v, Stream %T %v", callErr, callErr, streamErr, streamErr)
	}
	type shape struct {
		Class      provider.Class
		Status     int
		RetryAfter time.Duration
		RequestID  string
		Usage      *provider.Usage
		Replayed   bool
		Is         []bool
	}
	of := func(ce *provider.CallError) shape {
		s := shape{Class: ce.Class, Status: ce.Status, RetryAfter: ce.RetryAfter, RequestID: ce.ProviderRequestID, Usage: ce.Usage, Replayed: ce.Replayed}
		for _, target := range sentinels {
			s.Is = append(s.Is, errors.Is(ce, target))
		}
		return s
	}
	if sa, sb := of(a), of(b); !reflect.DeepEqual(sa, sb) {
		return fmt.Sprintf("Call failed %+v (%v), Stream %+v (%v)", sa, callErr, sb, streamErr)
	}
	if a.Msg != b.Msg {
		return fmt.Sprintf("Call said %q, Stream %q", a.Msg, b.Msg)
	}
	return ""
}

// runStream runs the streaming part.
func runStream(t *testing.T, h Harness) {
	t.Run("StreamIsCall", func(t *testing.T) {
		t.Parallel()
		for _, mode := range streamModes {
			t.Run(string(mode), func(t *testing.T) {
				t.Parallel()
				// Each on a simulator of its own, so both answers carry the
				// same request id.
				called, streamed := h.start(t, sim.Options{Mode: mode}), h.start(t, sim.Options{Mode: mode})
				req := Request(1)
				callResp, callErr := called.p.Call(t.Context(), req)
				sink := newCollector()
				resp, err := streamer(t, streamed.p).Stream(t.Context(), req, sink.sink)
				if d := sameOutcome(callResp, resp, callErr, err); d != "" {
					t.Fatal(d)
				}
				if d := sameRequest(called.sim.Calls()[0], streamed.sim.Calls()[0]); d != "" {
					t.Error(d)
				}
				if err == nil && sink.joined() != string(resp.Output) {
					t.Errorf("the pieces joined are %q, the answer %s", sink.joined(), resp.Output)
				}
				if err == nil && sink.count() < 2 {
					t.Errorf("the answer came in %d piece(s): not streamed", sink.count())
				}
				if err != nil && !strings.Contains(streamed.logs.String(), `"class":"`+string(provider.Classify(err))+`"`) {
					t.Errorf("failure not logged with its class: %s", streamed.logs.String())
				}
			})
		}
	})

	t.Run("StreamCutIsAmbiguous", func(t *testing.T) {
		t.Parallel()
		// A short answer: every way of breaking it at every event.
		short := json.RawMessage(`{"category":"billing","priority":3}`)
		r := h.start(t, sim.Options{Oracle: sim.Fixed{GoodOutput: short, SemanticOutput: short}})
		whole, err := streamer(t, r.p).Stream(t.Context(), Request(1), func(string) {})
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		events := r.sim.Calls()[0].Events
		if events < 3 {
			t.Fatalf("the stream had %d events", events)
		}
		attempt := 1
		for _, kind := range []sim.CutKind{sim.CutDrop, sim.CutMidEvent, sim.CutEnd, sim.CutMalformed} {
			for at := 0; at < events; at++ {
				attempt++
				r.sim.SetStream(sim.StreamOptions{Cut: &sim.StreamCut{At: at, Kind: kind}})
				sink := newCollector()
				_, err := streamer(t, r.p).Stream(t.Context(), Request(attempt), sink.sink)
				if err == nil {
					t.Fatalf("%s at event %d of %d: Stream succeeded", kind, at, events)
				}
				ce := callError(t, err, provider.ClassAmbiguous)
				if !errors.Is(err, provider.ErrStreamCut) {
					t.Errorf("%s at event %d: %v is no ErrStreamCut", kind, at, err)
				}
				if !strings.HasPrefix(string(whole.Output), sink.joined()) {
					t.Errorf("%s at event %d: the pieces %q are no beginning of the answer %s", kind, at, sink.joined(), whole.Output)
				}
				if u := ce.Usage; u != nil && whole.Usage != nil && (u.InputTokens > whole.Usage.InputTokens || u.OutputTokens > whole.Usage.OutputTokens) {
					t.Errorf("%s at event %d: usage %+v, more than the whole answer's %+v", kind, at, u, whole.Usage)
				}
			}
		}
	})

	t.Run("StreamErrorEvent", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		if _, err := streamer(t, r.p).Stream(t.Context(), Request(1), func(string) {}); err != nil {
			t.Fatal(err)
		}
		r.sim.SetStream(sim.StreamOptions{Cut: &sim.StreamCut{At: r.sim.Calls()[0].Events / 2, Kind: sim.CutError}})
		_, err := streamer(t, r.p).Stream(t.Context(), Request(2), func(string) {})
		// Retryable, as the API's documented status for it says, and paid
		// for: the stream's own status (a 2xx) says the model ran.
		ce := callError(t, err, provider.ClassRetryable)
		if !errors.Is(err, provider.ErrHTTPStatus) || ce.Status != http.StatusOK || ce.Detail.Message == "" {
			t.Errorf("the API's error inside the stream: %v (status %d, detail %+v), want the error it stands for", err, ce.Status, ce.Detail)
		}
	})

	t.Run("StreamTooLarge", func(t *testing.T) {
		t.Parallel()
		// The adapter reads 64 KiB of an answer, a quarter of it an event
		// (a webhook receiver's answer event, the whole answer, the 64 KiB).
		const limit = 64 << 10
		for _, tc := range []struct {
			name, text string
		}{
			// One word: one delta past an event's bound (and, with the
			// webhook's answer event, past the whole).
			{"OneEvent", strings.Repeat("y", 40<<10)},
			// Five words, each delta within an event's bound, all past the whole.
			{"AllEvents", strings.TrimSpace(strings.Repeat(strings.Repeat("x", 15<<10)+" ", 5))},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				out, _ := json.Marshal(map[string]string{"summary": tc.text})
				r := h.startWith(t, sim.Options{Oracle: sim.Fixed{GoodOutput: out, SemanticOutput: out}}, limit)
				_, err := streamer(t, r.p).Stream(t.Context(), Request(1), func(string) {})
				callError(t, err, provider.ClassRetryable)
				if !errors.Is(err, provider.ErrMalformedResponse) || (!errors.Is(err, provider.ErrStreamTooLarge) && !errors.Is(err, provider.ErrEventTooLarge)) {
					t.Errorf("%v: want a refused oversize answer", err)
				}
			})
		}
	})

	t.Run("StreamCancelled", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		// A slow model: the first piece, then one a minute; the test waits
		// for the first piece, never for the pace.
		r.sim.SetStream(sim.StreamOptions{TokenRate: 1.0 / 60})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		sink := newCollector()
		done := make(chan error, 1)
		go func() {
			_, err := streamer(t, r.p).Stream(ctx, Request(1), sink.sink)
			done <- err
		}()
		select {
		case <-sink.first:
		case err := <-done:
			t.Fatalf("Stream ended before its first piece: %v", err)
		}
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Stream went on after its ctx was cancelled")
		}
		ce := callError(t, err, provider.ClassAmbiguous)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%v does not wrap context.Canceled", err)
		}
		if c := r.sim.Calls()[0]; h.StartUsage && (ce.Usage == nil || ce.Usage.InputTokens != c.InputTokens) {
			t.Errorf("usage %+v, want the input the stream reported at its start, %d tokens", ce.Usage, c.InputTokens)
		}
	})

	t.Run("StreamRepeat", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		first, err := streamer(t, r.p).Stream(t.Context(), Request(1), func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		<-r.sim.Finished(Request(1).IdempotencyKey)
		sink := newCollector()
		again, err := streamer(t, r.p).Stream(t.Context(), Request(1), sink.sink)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first.Output, again.Output) || sink.joined() != string(again.Output) {
			t.Errorf("a repeat answered %s in pieces %q, the first %s", again.Output, sink.joined(), first.Output)
		}
	})

	if h.Settles != SettleNone {
		t.Run("StreamCutSettles", func(t *testing.T) {
			t.Parallel()
			// A stream cut in its middle: the provider finished the answer
			// nobody read, and settling the attempt finds it.
			r := h.start(t, sim.Options{})
			whole, err := streamer(t, r.p).Stream(t.Context(), Request(1), func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			r.sim.SetStream(sim.StreamOptions{Cut: &sim.StreamCut{At: r.sim.Calls()[0].Events / 2, Kind: sim.CutDrop}})
			req := Request(2)
			_, err = streamer(t, r.p).Stream(t.Context(), req, func(string) {})
			callError(t, err, provider.ClassAmbiguous)
			<-r.sim.Finished(req.IdempotencyKey)
			s, err := r.p.(provider.Settler).Settle(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if s.Evidence != provider.EvidenceAnswered || !JSONEqual(t, s.Response.Output, whole.Output) {
				t.Errorf("settled %+v (%s), want the answer the cut stream carried, %s", s, s.Response.Output, whole.Output)
			}
		})
	}

	t.Run("StreamRefusesWithoutAKey", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		req := Request(1)
		req.IdempotencyKey = ""
		_, err := streamer(t, r.p).Stream(t.Context(), req, func(string) {})
		callError(t, err, provider.ClassNonRetryable)
		if n := len(r.sim.Calls()); n != 0 {
			t.Errorf("simulator saw %d calls, want 0", n)
		}
	})

	t.Run("StreamHangIsAmbiguousAtDeadline", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{Mode: sim.ModeHang})
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		defer cancel()
		_, err := streamer(t, r.p).Stream(ctx, Request(1), func(string) {})
		callError(t, err, provider.ClassAmbiguous)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
		}
	})

	t.Run("StreamConnectionRefusedIsRetryable", func(t *testing.T) {
		t.Parallel()
		p := h.New(t, Env{BaseURL: refusingURL(t), APIKey: APIKey, Logger: provider.DiscardLogger(), Now: time.Now})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := streamer(t, p).Stream(ctx, Request(1), func(string) {})
		callError(t, err, provider.ClassRetryable)
	})
}
