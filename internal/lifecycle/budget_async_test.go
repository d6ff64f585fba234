package lifecycle_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// budgetedAsync is an asyncTasks rig whose owners' spend is budgeted, the
// asynchronous provider priced at testPrice.
func budgetedAsync(t *testing.T, name string) *asyncTasks {
	t.Helper()
	r := newAsyncTasks(t, name)
	// Replaced before the tasks are made (start): they are built on it.
	r.rig = newRigWith(t, job.Budget{Amount: job.NanosPerUSD, Period: budgeted(0).Period,
		Prices: map[string]job.Price{name: testPrice}})
	return r
}

// createBudgeted makes owner's demo job on the asynchronous provider
// alone, its first attempt's worst case reserved.
func (r *asyncTasks) createBudgeted(t *testing.T, owner string) job.Job {
	t.Helper()
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello from ` + owner + `"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := r.eng.Create(t.Context(), job.Request{Owner: owner, IdempotencyKey: "k-" + owner, Type: "demo", Input: input,
		Providers: []string{r.name}, Primary: r.name, Basis: lifecycle.CostBasisOf(req)})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// paidAsWorked ends owner's job on work that ended unusable, by polling,
// and checks that the owner paid what the work reported it was billed,
// or its whole reservation when it reported nothing.
func (r *asyncTasks) paidAsWorked(t *testing.T, owner string, end func(id string) provider.Usage) {
	t.Helper()
	j := r.createBudgeted(t, owner)
	r.runUntilWait(t, j.ID)
	u := end(remoteOf(t, r.get(t, j.ID), 1).ID)
	r.clock.Advance(providerWork)
	r.runToEnd(t, j.ID, job.StatusFailed)
	got := r.get(t, j.ID)
	a, _ := got.Attempt(1)
	cost, source := job.SpendOf(a)
	b, err := r.st.Usage(t.Context(), owner)
	if err != nil {
		t.Fatal(err)
	}
	want, wantSource := testPrice.Cost(u.InputTokens, u.OutputTokens), job.SpendReported
	if u.InputTokens+u.OutputTokens == 0 {
		// Ended work is an answer: without usage, its whole reservation.
		want, wantSource = a.Spend.Reserved, job.SpendWorstCase
	}
	if a.Spend == nil || cost != want || source != wantSource || b.Budget.Spent != want || b.Budget.Held() != 0 {
		t.Fatalf("%s: attempt %s (%+v) cost %s (%s), owner spent %s held %s; want the work's %+v: %s",
			owner, a.State, a.Error, cost.USD(), source, b.Budget.Spent.USD(), b.Budget.Held().USD(), u, want.USD())
	}
}

// TestUnusableAsyncWorkIsPaid (review N-H1): work that ended with nothing
// onejob can use (cut at the token limit, stopped by the content filter,
// refused, failed; a receiver's work that failed or gave no output) is
// billed by its provider, and its owner pays what the work reported, or
// its reservation when it reported nothing (a failed response).
func TestUnusableAsyncWorkIsPaid(t *testing.T) {
	t.Parallel()
	t.Run("Responses", func(t *testing.T) {
		t.Parallel()
		r := budgetedAsync(t, asyncName)
		s, err := sim.NewResponses(sim.ResponsesOptions{Oracle: sim.Fixed{GoodOutput: good(asyncName)}, APIKey: "sk-test",
			ProcessingTime: providerWork, WebhookURL: r.callbackURL(), WebhookSecret: asyncSecret, NowFunc: r.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		s.DropWebhooks(true)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		a, err := openai.NewAsync(openai.Config{Name: asyncName, BaseURL: srv.URL + "/v1", Model: "gpt-test",
			APIKey: provider.Secret("sk-test"), HTTPClient: srv.Client(), Now: r.clock.Now}, asyncSecret)
		if err != nil {
			t.Fatal(err)
		}
		r.start(t, a)
		for _, o := range []sim.WorkOutcome{sim.WorkIncomplete, sim.WorkContentFilter, sim.WorkRefusal, sim.WorkFailed} {
			s.SetOutcome(o)
			r.paidAsWorked(t, "owner-"+string(o), func(id string) provider.Usage {
				if err := s.Complete(id); err != nil {
					t.Fatal(err)
				}
				rec, _ := s.Get(id)
				return provider.Usage{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens}
			})
		}
	})
	t.Run("WebhookAsync", func(t *testing.T) {
		t.Parallel()
		r := budgetedAsync(t, hookAsyncName)
		s, err := sim.NewWebhookAsync(sim.WebhookAsyncOptions{Oracle: sim.Fixed{GoodOutput: good(hookAsyncName)}, Token: hookAsyncToken,
			ProcessingTime: providerWork, CallbackSecret: asyncSecret, NowFunc: r.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		s.DropCallbacks(true)
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		a, err := webhook.NewAsync(webhook.AsyncConfig{Name: hookAsyncName, URL: srv.URL + sim.WebhookAsyncPath,
			CallbackURL: r.callbackURL(), Token: hookAsyncToken, WebhookSecret: asyncSecret, HTTPClient: srv.Client(), Now: r.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		r.start(t, a)
		for _, o := range []sim.WorkOutcome{sim.WorkFailed, sim.WorkProse} {
			s.SetOutcome(o)
			r.paidAsWorked(t, "owner-"+string(o), func(id string) provider.Usage {
				if err := s.Complete(id); err != nil {
					t.Fatal(err)
				}
				rec, _ := s.Get(id)
				return provider.Usage{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens}
			})
		}
	})
}
