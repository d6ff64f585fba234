package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/provider"
)

// Settles says how an adapter's provider can be asked about an attempt
// whose answer was lost (provider.Settler).
type Settles int

const (
	// SettleNone: the API offers no way to ask (Anthropic Messages, Bedrock
	// Converse, OpenAI without lookup): the adapter must not implement
	// provider.Settler.
	SettleNone Settles = iota
	// SettleResend: the same request is sent again under the same
	// Idempotency-Key, and the provider answers it without executing it
	// again (webhooks keeping onejob's contract).
	SettleResend
	// SettleLookup: the provider is asked for what the attempt produced
	// (OpenAI stored completions, by metadata).
	SettleLookup
)

// gate is an oracle whose answer waits until open is closed; entered is
// closed once the simulated work has started (the request arrived).
type gate struct {
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) Good(sim.Call) (json.RawMessage, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return goodOutput, nil
}

func (g *gate) Semantic(c sim.Call) (json.RawMessage, error) { return g.Good(c) }

// lost sends req and gives up once the provider has it and is working on
// it: the attempt's answer is lost, its outcome unknown.
func lost(t *testing.T, p provider.Provider, g *gate, req provider.Request) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, req)
		errc <- err
	}()
	await(t, g.entered, "the request's arrival")
	cancel()
	callError(t, <-errc, provider.ClassAmbiguous)
}

// patience turns a hang (a provider executing a repeat it should have
// answered from memory, say) into a failure instead of a test timeout.
const patience = time.Minute

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	if ch == nil {
		t.Fatalf("waiting for %s: the simulator has not seen it", what)
	}
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatalf("%s did not happen within %v", what, patience)
	}
}

func ask(t *testing.T, s provider.Settler, req provider.Request) (provider.Settlement, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	return s.Settle(ctx, req)
}

// settle asks s about req and checks what every settlement shares.
func settle(t *testing.T, s provider.Settler, req provider.Request, want provider.Evidence) provider.Settlement {
	t.Helper()
	got, err := ask(t, s, req)
	if err != nil {
		t.Fatalf("Settle = %v, want evidence %s", err, want)
	}
	if got.Evidence != want {
		t.Fatalf("Settle = %s (%s), want %s", got.Evidence, got.Detail, want)
	}
	if got.Detail == "" || len(got.Detail) > 400 || strings.Contains(got.Detail, APIKey) {
		t.Fatalf("Detail %q: want a bounded account of what happened, without the credential", got.Detail)
	}
	return got
}

// noEvidence asserts Settle got no answer this time: an error, to ask again.
func noEvidence(t *testing.T, s provider.Settler, req provider.Request) {
	t.Helper()
	got, err := ask(t, s, req)
	if err == nil {
		t.Fatalf("Settle = %s (%s), want an error (ask again later)", got.Evidence, got.Detail)
	}
	if strings.Contains(err.Error(), APIKey) {
		t.Fatalf("credential leaked into error: %v", err)
	}
}

// answered checks an answered settlement carries the executed call's answer.
func answered(t *testing.T, h Harness, got provider.Settlement, c sim.Call) {
	t.Helper()
	resp := got.Response
	if !JSONEqual(t, resp.Output, goodOutput) {
		t.Errorf("Output = %s, want %s", resp.Output, goodOutput)
	}
	if resp.Model == "" || resp.Model != c.Model {
		t.Errorf("Model = %q, want the one that answered, %q", resp.Model, c.Model)
	}
	if !h.NoUsage && (resp.Usage == nil || resp.Usage.InputTokens != c.InputTokens || resp.Usage.OutputTokens != c.OutputTokens || c.InputTokens == 0) {
		t.Errorf("Usage = %+v, want the simulator's %d input, %d output tokens", resp.Usage, c.InputTokens, c.OutputTokens)
	}
	if resp.ProviderRequestID == "" || !strings.Contains(resp.ProviderRequestID, c.RequestID) {
		t.Errorf("ProviderRequestID = %q, want the executed call's (%s)", resp.ProviderRequestID, c.RequestID)
	}
}

// executed is the one call the simulator executed for key.
func executed(t *testing.T, s *sim.Simulator, key string) sim.Call {
	t.Helper()
	var found []sim.Call
	for _, c := range s.Calls() {
		if c.IdempotencyKey == key && c.Replay == "" {
			found = append(found, c)
		}
	}
	if len(found) != 1 || s.Executions(key) != 1 {
		t.Fatalf("%s executed %d times (%d calls recorded), want once", key, s.Executions(key), len(found))
	}
	return found[0]
}

// runSettle runs the settlement cases for h.Settles.
func runSettle(t *testing.T, h Harness) {
	t.Helper()
	if h.Settles == SettleNone {
		t.Run("NotASettler", func(t *testing.T) {
			t.Parallel()
			r := h.start(t, sim.Options{})
			if _, ok := r.p.(provider.Settler); ok {
				t.Fatalf("%T implements provider.Settler, but its provider offers no way to ask about an attempt", r.p)
			}
		})
		return
	}
	settler := func(t *testing.T, r rig) provider.Settler {
		t.Helper()
		s, ok := r.p.(provider.Settler)
		if !ok {
			t.Fatalf("%T does not implement provider.Settler", r.p)
		}
		return s
	}

	t.Run("SettleLostAnswer", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		r := h.start(t, sim.Options{Oracle: g})
		s := settler(t, r)
		req := Request(1)
		lost(t, r.p, g, req)
		// The provider still works on it: a re-send is told so, a lookup
		// finds nothing yet (a completion is listed once it exists).
		switch h.Settles {
		case SettleResend:
			settle(t, s, req, provider.EvidenceInProgress)
		case SettleLookup:
			settle(t, s, req, provider.EvidenceAbsent)
		}
		close(g.open)
		await(t, r.sim.Finished(req.IdempotencyKey), "the end of the attempt's work")
		got := settle(t, s, req, provider.EvidenceAnswered)
		answered(t, h, got, executed(t, r.sim, req.IdempotencyKey))
		// Asking again changes nothing and runs nothing.
		again := settle(t, s, req, provider.EvidenceAnswered)
		if !JSONEqual(t, again.Response.Output, got.Response.Output) || again.Response.ProviderRequestID != got.Response.ProviderRequestID {
			t.Errorf("second settle %+v, first %+v", again.Response, got.Response)
		}
		executed(t, r.sim, req.IdempotencyKey)
		if !strings.Contains(r.logs.String(), `"evidence":"answered"`) {
			t.Errorf("no settle log line: %s", r.logs.String())
		}
	})

	t.Run("SettleAnsweredCall", func(t *testing.T) {
		t.Parallel()
		r := h.start(t, sim.Options{})
		s := settler(t, r)
		req := Request(2)
		resp, err := r.p.Call(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := settle(t, s, req, provider.EvidenceAnswered)
		answered(t, h, got, executed(t, r.sim, req.IdempotencyKey))
		if got.Response.ProviderRequestID != resp.ProviderRequestID && h.Settles == SettleResend {
			t.Errorf("request id %q, the call's was %q", got.Response.ProviderRequestID, resp.ProviderRequestID)
		}
	})

	// A re-send of a request never sent is that request's first sending;
	// only a lookup can find that nothing happened.
	if h.Settles == SettleLookup {
		t.Run("SettleNeverSent", func(t *testing.T) {
			t.Parallel()
			r := h.start(t, sim.Options{})
			got := settle(t, settler(t, r), Request(3), provider.EvidenceAbsent)
			if !strings.Contains(got.Detail, Request(3).IdempotencyKey) {
				t.Errorf("Detail %q does not name the attempt", got.Detail)
			}
			if n := len(r.sim.Calls()); n != 0 {
				t.Errorf("a lookup sent %d requests to the model", n)
			}
		})
	}

	refused := []struct {
		name   string
		mode   sim.Mode
		class  provider.Class
		status int
		is     error
	}{
		{"SettleRefusedRequest", sim.ModeBadRequest, provider.ClassNonRetryable, http.StatusBadRequest, provider.ErrHTTPStatus},
		{"SettleUnusableAnswer", sim.ModeContentFilter, provider.ClassRetryable, 0, provider.ErrNoStructuredOutput},
	}
	for _, tc := range refused {
		if tc.mode == sim.ModeBadRequest && h.Settles == SettleLookup {
			continue // a refused request creates no completion: a lookup finds nothing
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := h.start(t, sim.Options{Mode: tc.mode})
			s := settler(t, r)
			req := Request(1)
			_, callErr := r.p.Call(t.Context(), req)
			callError(t, callErr, tc.class)
			got := settle(t, s, req, provider.EvidenceRefused)
			ce := callError(t, got.Err, tc.class)
			if (tc.status != 0 && ce.Status != tc.status) || !errors.Is(got.Err, tc.is) {
				t.Errorf("Err = %v (status %d), want status %d wrapping %v", got.Err, ce.Status, tc.status, tc.is)
			}
			executed(t, r.sim, req.IdempotencyKey)
		})
	}

	if h.Settles == SettleResend {
		// A 5xx the receiver marks as the key's first answer, replayed, is
		// about the first request: it was not acted on.
		t.Run("SettleReplayedServerErrorIsARefusal", func(t *testing.T) {
			t.Parallel()
			r := h.start(t, sim.Options{Mode: sim.ModeServerError})
			req := Request(1)
			_, callErr := r.p.Call(t.Context(), req)
			callError(t, callErr, provider.ClassRetryable)
			got := settle(t, settler(t, r), req, provider.EvidenceRefused)
			if ce := callError(t, got.Err, provider.ClassRetryable); !ce.Replayed || ce.Status < 500 {
				t.Errorf("Err = %v (status %d, replayed %v), want the replayed 5xx", got.Err, ce.Status, ce.Replayed)
			}
		})
	}

	t.Run("SettleWithoutAnAnswerIsAnError", func(t *testing.T) {
		t.Parallel()
		if h.Settles == SettleResend {
			for _, mode := range []sim.Mode{sim.ModeServerError, sim.ModeRateLimited} {
				r := h.start(t, sim.Options{Mode: mode})
				noEvidence(t, settler(t, r), Request(1))
			}
		}
		r := h.start(t, sim.Options{APIKey: "another-key"})
		noEvidence(t, settler(t, r), Request(1))
		p := h.New(t, Env{BaseURL: refusingURL(t), APIKey: APIKey, Logger: provider.DiscardLogger(), Now: time.Now})
		s, ok := p.(provider.Settler)
		if !ok {
			t.Fatalf("%T does not implement provider.Settler", p)
		}
		noEvidence(t, s, Request(1))
	})
}
