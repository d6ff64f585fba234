package lifecycle_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/memstore"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// budgetedAsync is an asyncTasks rig whose owners' spend is budgeted, the
// asynchronous provider priced at testPrice unless prices say otherwise.
func budgetedAsync(t *testing.T, name string, prices map[string]job.Price) *asyncTasks {
	t.Helper()
	r := newAsyncTasks(t, name)
	if prices == nil {
		prices = map[string]job.Price{name: testPrice}
	}
	// Replaced before the tasks are made (start): they are built on it.
	r.rig = newRigWith(t, job.Budget{Amount: job.NanosPerUSD, Period: budgeted(0).Period, Prices: prices})
	return r
}

// budgetedResponses is budgetedAsync on the Responses simulator, its
// webhooks dropped: the runs poll.
func budgetedResponses(t *testing.T, prices map[string]job.Price) (*asyncTasks, *sim.Responses) {
	t.Helper()
	r := budgetedAsync(t, asyncName, prices)
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
	return r, s
}

// TestAJobThatMayWaitIsPricedAtItsTier: a job created to wait 2h is
// reserved and settled at its asynchronous provider's 2h price (30% off
// here); a job of another owner that runs now pays the full price; a
// fallback without a discount is reserved at its full price, so a flex
// job is never under-reserved.
func TestAJobThatMayWaitIsPricedAtItsTier(t *testing.T) {
	t.Parallel()
	flex := testPrice
	flex.Discount = job.Discount{Flex2h: 30, Flex8h: 40}
	r, s := budgetedResponses(t, map[string]job.Price{asyncName: flex, fallback: testPrice})
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	basis := lifecycle.CostBasisOf(req)
	for _, c := range []struct {
		name      string
		owner     string
		tier      job.Tier
		providers []string
		reserved  job.Money
		price     job.Price
	}{
		{"FlexOnItsProvider", "owner-a", job.TierFlex2h, []string{asyncName}, flex.At(job.TierFlex2h).WorstCase(basis), flex.At(job.TierFlex2h)},
		{"NowPaysTheFullPrice", "owner-b", job.TierNow, []string{asyncName}, flex.WorstCase(basis), testPrice},
		{"AFallbackWithoutDiscountBoundsTheReservation", "owner-a", job.TierFlex2h, []string{asyncName, fallback},
			testPrice.WorstCase(basis), flex.At(job.TierFlex2h)},
	} {
		j, _, err := r.eng.Create(t.Context(), job.Request{Owner: c.owner, IdempotencyKey: "k-" + c.name,
			Type: "demo", Input: input, Providers: c.providers, Primary: asyncName, Basis: basis, Tier: c.tier})
		if err != nil {
			t.Fatal(err)
		}
		if j.Reservation == nil || j.Reservation.Reserved != c.reserved {
			t.Fatalf("%s: reserved %+v, want %d", c.name, j.Reservation, c.reserved)
		}
		r.runUntilParked(t, j.ID)
		id := remoteOf(t, r.get(t, j.ID), 1).ID
		if err := s.Complete(id); err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(providerWork)
		r.pass(t)
		if got := r.get(t, j.ID); got.Status != job.StatusSucceeded {
			t.Fatalf("%s: job %s after the pass", c.name, got.Status)
		}
		rec, _ := s.Get(id)
		a, _ := r.get(t, j.ID).Attempt(1)
		if a.Spend == nil || a.Spend.Price != c.price {
			t.Fatalf("%s: attempt 1's spend %+v, want priced %+v", c.name, a.Spend, c.price)
		}
		if cost, _ := job.SpendOf(a); cost != c.price.Cost(rec.InputTokens, rec.OutputTokens) || rec.OutputTokens == 0 {
			t.Fatalf("%s: cost %d, want %d", c.name, cost, c.price.Cost(rec.InputTokens, rec.OutputTokens))
		}
	}
	if v := flex.At(job.TierFlex2h).Version; v != "test-1@2h" {
		t.Fatalf("the 2h price's version %q", v)
	}
}

// TestADiscountOnASynchronousProviderIsRefused (review N-L7): a price
// table giving a tier discount to a provider that runs no work in a
// window (a synchronous one) would reserve and settle a job that may wait
// below what that provider charges: the tasks are not made. The same
// discount on the asynchronous provider is taken.
func TestADiscountOnASynchronousProviderIsRefused(t *testing.T) {
	t.Parallel()
	flex := testPrice
	flex.Discount = job.Discount{Flex8h: 40}
	cat, _ := catalog()
	a, err := openai.NewAsync(openai.Config{Name: asyncName, BaseURL: "http://127.0.0.1:9/v1", Model: "gpt-test"}, asyncSecret)
	if err != nil {
		t.Fatal(err)
	}
	providers := withAsync{providers{primary: &fakeProvider{name: primary}}, asyncName, a}
	for _, c := range []struct {
		discounted string
		ok         bool
	}{{primary, false}, {asyncName, true}} {
		st := memstore.New()
		eng, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: st, Owners: st,
			Budget: job.Budget{Amount: job.NanosPerUSD, Period: budgeted(0).Period, Prices: map[string]job.Price{c.discounted: flex}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: cat},
			Providers: providers, Certifications: st, CallTimeout: callTimeout})
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "price of "+c.discounted+" has a tier discount")) {
			t.Errorf("a discount on %s: %v, want taken %v", c.discounted, err, c.ok)
		}
	}
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
	r.runUntilParked(t, j.ID)
	u := end(remoteOf(t, r.get(t, j.ID), 1).ID)
	r.clock.Advance(providerWork)
	// The pass applies the failure and wakes the job (no provider left:
	// its run fails it).
	r.pass(t)
	if names := r.starts.names(); !slices.Contains(names, j.ID+"-1") {
		t.Fatalf("%s: the failure woke no run %s-1: %v", owner, j.ID, names)
	}
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
		r, s := budgetedResponses(t, nil)
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
		r := budgetedAsync(t, hookAsyncName, nil)
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
