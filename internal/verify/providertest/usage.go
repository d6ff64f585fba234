package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// gated answers the demo contract for provider name once open is closed.
type gated struct {
	name string
	open <-chan struct{}
}

func (g gated) Good(sim.Call) (json.RawMessage, error) {
	<-g.open
	return json.RawMessage(fmt.Sprintf(`{"text":"answer from %s","provider":%q}`, g.name, g.name)), nil
}

func (g gated) Semantic(c sim.Call) (json.RawMessage, error) { return g.Good(c) }

// winWatch is memstore telling when a job's result is written.
type winWatch struct {
	*memstore.Store
	once sync.Once
	won  chan struct{}
}

func (w *winWatch) Apply(ctx context.Context, t job.Transition) (lifecycle.Applied, error) {
	res, err := w.Store.Apply(ctx, t)
	if err == nil && res.OK && t.Kind() == job.KindComplete {
		w.once.Do(func() { close(w.won) })
	}
	return res, err
}

type providerMap map[string]provider.Provider

func (m providerMap) Get(name string) (provider.Provider, bool) { p, ok := m[name]; return p, ok }

// usageOnEveryAttempt runs a hedged demo job through the lifecycle with two
// adapters of this kind, each on its own simulator: the hedge answers first
// and wins, the primary answers after and is discarded — and both attempts
// record the model that answered and the tokens their simulator charged,
// since both were paid for.
func usageOnEveryAttempt(t *testing.T, h Harness) {
	ctx := t.Context()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	jt, ok := cat.Get("demo-hedge")
	if !ok {
		t.Fatal("no demo-hedge job type")
	}
	st := &winWatch{Store: memstore.New(), won: make(chan struct{})}
	if err := st.PutCertification(ctx, job.Certification{JobType: "demo-hedge", ContractVersion: jt.ContractVersion(),
		Provider: sim.DemoFallback, Passed: true, CertifiedAt: fixedNow}); err != nil {
		t.Fatal(err)
	}
	always := make(chan struct{})
	close(always)
	rigs := map[string]rig{
		// The primary answers only once the hedge's result is written.
		sim.DemoPrimary:  h.start(t, sim.Options{Oracle: gated{name: sim.DemoPrimary, open: st.won}}),
		sim.DemoFallback: h.start(t, sim.Options{Oracle: gated{name: sim.DemoFallback, open: always}}),
	}
	eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{
		Engine: eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat}, Certifications: st,
		Providers:   providerMap{sim.DemoPrimary: rigs[sim.DemoPrimary].p, sim.DemoFallback: rigs[sim.DemoFallback].p},
		CallTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler),
		// The hedge delay passes at once; polls are short.
		AfterFunc: func(d time.Duration) <-chan time.Time {
			if h, _ := jt.HedgeAfter(); d == h {
				ch := make(chan time.Time, 1)
				ch <- time.Time{}
				return ch
			}
			return time.After(d)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := eng.Create(ctx, job.Request{Owner: "o", IdempotencyKey: "usage", Type: "demo-hedge",
		Input: json.RawMessage(`{"prompt":"hello"}`), Providers: []string{sim.DemoPrimary, sim.DemoFallback}, Primary: sim.DemoPrimary})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.Run(ctx, lifecycle.NewRunInput(j.ID, lifecycle.RunTimeout(jt))); err != nil {
		t.Fatalf("run: %v", err)
	}
	j, err = eng.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != job.StatusSucceeded || j.CompletedBy != 2 {
		t.Fatalf("job %s completed by %d, want the hedge (2): %+v", j.Status, j.CompletedBy, j.Attempts)
	}
	for n, name := range map[int]string{1: sim.DemoPrimary, 2: sim.DemoFallback} {
		a, _ := j.Attempt(n)
		calls := rigs[name].sim.Calls()
		if len(calls) != 1 {
			t.Fatalf("%s saw %d calls, want 1", name, len(calls))
		}
		c := calls[0]
		u := a.Usage
		switch {
		case u == nil:
			t.Fatalf("attempt %d (%s, %s) records no usage", n, name, a.State)
		case h.NoUsage && (u.InputTokens != 0 || u.OutputTokens != 0):
			t.Errorf("attempt %d: usage %+v from a format that reports none", n, *u)
		case !h.NoUsage && (u.InputTokens != c.InputTokens || u.OutputTokens != c.OutputTokens || u.InputTokens == 0 || u.Model != c.Model):
			t.Errorf("attempt %d (%s): usage %+v, want the simulator's %s, %d in, %d out", n, a.State, *u, c.Model, c.InputTokens, c.OutputTokens)
		}
	}
	if a, _ := j.Attempt(1); a.State != job.AttemptDiscarded {
		t.Errorf("attempt 1 is %s, want discarded", a.State)
	}
}

// unusableAnswersArePaid (review N-H1) runs one budgeted demo job per
// mode through the lifecycle with this adapter against its simulator: an
// answer onejob cannot use (cut at the token limit, refused, filtered)
// ends the attempt failed, and its owner pays what the simulator billed
// (its whole reservation when the format reports no usage); a refusal
// without an answer (a 5xx, a 400) costs nothing.
func unusableAnswersArePaid(t *testing.T, h Harness) {
	ctx := t.Context()
	cat, err := jobtype.Load()
	if err != nil {
		t.Fatal(err)
	}
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	price := job.Price{Version: "v", Input: job.NanosPerUSD, Output: 2 * job.NanosPerUSD, OverheadInputTokens: h.OverheadInputTokens}
	for _, c := range []struct {
		mode sim.Mode
		paid bool
	}{
		{sim.ModeTruncated, true}, {sim.ModeRefusal, true}, {sim.ModeContentFilter, true},
		{sim.ModeServerError, false}, {sim.ModeBadRequest, false},
	} {
		r := h.start(t, sim.Options{Mode: c.mode, Oracle: sim.Fixed{GoodOutput: json.RawMessage(`{"text":"from sim-primary","provider":"sim-primary"}`)}})
		st := memstore.New()
		eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Owners: st,
			Budget: job.Budget{Amount: job.NanosPerUSD, Period: 24 * time.Hour, Prices: map[string]job.Price{sim.DemoPrimary: price}}})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := lifecycle.NewTasks(lifecycle.TasksConfig{Engine: eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
			Certifications: st, Providers: providerMap{sim.DemoPrimary: r.p}, CallTimeout: 30 * time.Second,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		j, _, err := eng.Create(ctx, job.Request{Owner: "o", IdempotencyKey: string(c.mode), Type: "demo", Input: input,
			Providers: []string{sim.DemoPrimary}, Primary: sim.DemoPrimary, Basis: lifecycle.CostBasisOf(req)})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = tasks.Run(ctx, lifecycle.NewRunInput(j.ID, lifecycle.RunTimeout(jt)))
		if j, err = eng.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		a, _ := j.Attempt(1)
		u, err := st.Usage(ctx, "o")
		if err != nil {
			t.Fatal(err)
		}
		calls := r.sim.Calls()
		if j.Status != job.StatusFailed || a.State != job.AttemptFailed || a.Spend == nil || len(calls) != 1 {
			t.Fatalf("%s: job %s, attempt %+v, %d calls", c.mode, j.Status, a, len(calls))
		}
		want := job.Money(0)
		switch {
		case c.paid && h.NoUsage:
			want = a.Spend.Reserved
		case c.paid:
			want = price.Cost(calls[0].InputTokens, calls[0].OutputTokens)
		}
		if u.Budget.Spent != want || u.Budget.Held() != 0 || (c.paid && want == 0) {
			t.Errorf("%s: the owner spent %s USD (held %s), want %s: attempt %+v, usage %+v", c.mode, u.Budget.Spent.USD(),
				u.Budget.Held().USD(), want.USD(), a.Error, a.Usage)
		}
		// A webhook is sent no token limit: its receiver's model may bill
		// more than the type allows, and is charged as billed.
		if c.paid && h.SendsSchema && want > a.Spend.Reserved {
			t.Errorf("%s: paid %s USD, above the reservation %s USD", c.mode, want.USD(), a.Spend.Reserved.USD())
		}
	}
}
