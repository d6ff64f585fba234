package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// testPrice is $10 and $100 per million tokens: a demo job's worst case
// is about $0.029, 300 input and 250 output tokens cost $0.028.
var testPrice = job.Price{Version: "test-1", Input: 10 * job.NanosPerUSD, Output: 100 * job.NanosPerUSD}

func budgeted(amount job.Money) job.Budget {
	return job.Budget{Amount: amount, Period: 24 * time.Hour, Prices: map[string]job.Price{primary: testPrice, fallback: testPrice}}
}

// demoWorst is a demo job's worst case at testPrice ({"prompt":"hello"}).
func demoWorst(t *testing.T) job.Money {
	t.Helper()
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	req, err := jt.Request(json.RawMessage(`{"prompt":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	return testPrice.WorstCase(lifecycle.CostBasisOf(req))
}

func (r *rig) createBudgeted(t *testing.T, key string) (job.Job, error) {
	t.Helper()
	cat, _ := catalog()
	jt, _ := cat.Get("demo")
	input := json.RawMessage(`{"prompt":"hello"}`)
	req, err := jt.Request(input)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := r.eng.Create(context.Background(), job.Request{Owner: "owner", IdempotencyKey: key, Type: "demo", Input: input,
		Providers: []string{primary, fallback}, Primary: primary, Basis: lifecycle.CostBasisOf(req)})
	return j, err
}

func (r *rig) budgetOf(t *testing.T) job.OwnerBudget {
	t.Helper()
	u, err := r.st.Usage(context.Background(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	return u.Budget
}

func TestABudgetedJobSettlesEachAttemptAtItsCost(t *testing.T) {
	t.Parallel()
	paid := provider.Response{Output: good(fallback), ProviderRequestID: "req-fb", Usage: &provider.Usage{InputTokens: 300, OutputTokens: 250}}
	for _, c := range []struct {
		name string
		// primary's answer; the fallback answers paid.
		primaryErr error
		// wantSpent of the job once it ended, from its attempts.
		wantSpent func(worst job.Money) job.Money
		attempts  int
	}{
		{"AnswerIsPriced", nil, func(job.Money) job.Money { return testPrice.Cost(300, 250) }, 1},
		// A refused call costs nothing; the fallback reserves its own.
		{"RefusalIsFreeAndTheFallbackReservesItsOwn", &provider.CallError{Provider: primary, Class: provider.ClassRetryable, Status: 503},
			func(job.Money) job.Money { return testPrice.Cost(300, 250) }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRigWith(t, budgeted(job.NanosPerUSD))
			r.certify(t, "demo", fallback)
			if c.primaryErr != nil {
				r.prov[primary].answer = answers(provider.Response{}, c.primaryErr)
			} else {
				r.prov[primary].answer = answers(provider.Response{Output: good(primary), Usage: paid.Usage}, nil)
			}
			r.prov[fallback].answer = answers(paid, nil)
			j, err := r.createBudgeted(t, "k")
			if err != nil {
				t.Fatal(err)
			}
			worst := demoWorst(t)
			if b := r.budgetOf(t); b.Held() != worst || j.Reservation == nil || j.Reservation.Reserved != worst {
				t.Fatalf("after the create: %+v, job reservation %+v, want %d held", b, j.Reservation, worst)
			}
			for range c.attempts {
				_, _ = r.run(t, j.ID)
			}
			got := r.get(t, j.ID)
			if got.Status != job.StatusSucceeded || len(got.Attempts) != c.attempts {
				t.Fatalf("job %s with %d attempts", got.Status, len(got.Attempts))
			}
			for _, a := range got.Attempts {
				if a.Spend == nil || a.Spend.Key != job.AttemptKey(j.ID, a.Number) || a.Spend.Price != testPrice {
					t.Fatalf("attempt %d's spend: %+v", a.Number, a.Spend)
				}
			}
			b := r.budgetOf(t)
			if want := c.wantSpent(worst); b.Spent != want || b.Held() != 0 || b.Headroom != job.NanosPerUSD-want {
				t.Fatalf("after the job: %+v, want %d spent and nothing held", b, want)
			}
		})
	}
}

func TestAnUnknownAttemptKeepsItsReservationUntilSettled(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, budgeted(job.NanosPerUSD))
	r.prov[primary].answer = answers(provider.Response{}, &provider.CallError{Provider: primary, Class: provider.ClassAmbiguous, Msg: "timed out after sending"})
	j, err := r.createBudgeted(t, "k")
	if err != nil {
		t.Fatal(err)
	}
	worst := demoWorst(t)
	_, _ = r.run(t, j.ID)
	if a, _ := r.get(t, j.ID).Attempt(1); a.State != job.AttemptUnknown {
		t.Fatalf("attempt 1 is %s", a.State)
	}
	if b := r.budgetOf(t); b.Held() != worst || b.Spent != 0 {
		t.Fatalf("while unknown: %+v, want its %d held", b, worst)
	}
	// An operator settles it: no usage is known, so its worst case is spent.
	if _, err := r.eng.Resolve(context.Background(), j.ID, 1, job.Resolution{Outcome: job.AttemptFailed, Reason: "checked", By: "op"}); err != nil {
		t.Fatal(err)
	}
	if b := r.budgetOf(t); b.Held() != 0 || b.Spent != worst {
		t.Fatalf("after the settlement: %+v, want %d spent", b, worst)
	}
}

func TestAFallbackPastTheBudgetWaits(t *testing.T) {
	t.Parallel()
	// A budget of 1.5 worst cases: the first attempt's answer breaks the
	// contract and is paid ($0.028), leaving less than a fallback's worst
	// case.
	worst := demoWorst(t)
	r := newRigWith(t, budgeted(worst*3/2))
	r.certify(t, "demo", fallback)
	r.prov[primary].answer = answers(provider.Response{Output: json.RawMessage(`{"text":"no"}`),
		Usage: &provider.Usage{InputTokens: 300, OutputTokens: 250}}, nil)
	j, err := r.createBudgeted(t, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = r.run(t, j.ID)
	_, err = r.run(t, j.ID)
	var te *lifecycle.TaskError
	if !errors.As(err, &te) {
		t.Fatalf("second run: %v", err)
	}
	got := r.get(t, j.ID)
	if got.Waiting == nil || got.Waiting.Reason != job.WaitBudget || len(got.Attempts) != 1 || r.prov[fallback].calls.Load() != 0 {
		t.Fatalf("job %s waiting %+v with %d attempts, %d fallback calls", got.Status, got.Waiting, len(got.Attempts), r.prov[fallback].calls.Load())
	}
	if b := r.budgetOf(t); b.Held() != 0 || b.Spent != testPrice.Cost(300, 250) {
		t.Fatalf("budget: %+v", b)
	}
	// A create past the budget is refused with nothing written.
	if _, err := r.createBudgeted(t, "k2"); !errors.Is(err, job.ErrBudgetExceeded) {
		t.Fatalf("a create past the budget: %v", err)
	}
}

// TestTheSweeperSettlesReservationsLeftBehind: reservations whose settling
// never happened (a crash between the job's write and the owner's, a
// create that reserved and died before writing its job) are settled by
// the sweeper once stale, while the owner's other jobs keep it busy; a
// reservation still backing an open attempt or a pending job is kept.
func TestTheSweeperSettlesReservationsLeftBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRigWith(t, budgeted(job.NanosPerUSD))
	r.prov[primary].answer = answers(provider.Response{Output: good(primary), Usage: &provider.Usage{InputTokens: 300, OutputTokens: 250}}, nil)
	done, err := r.createBudgeted(t, "done")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(t, done.ID); err != nil {
		t.Fatal(err)
	}
	pending, err := r.createBudgeted(t, "pending")
	if err != nil {
		t.Fatal(err)
	}
	worst := demoWorst(t)
	b := budgeted(job.NanosPerUSD)
	win, _ := b.Window(r.clock.Now())
	reserve := func(key string) {
		t.Helper()
		if ok, _, _, err := r.st.Reserve(ctx, "owner", job.Reservation{Key: key, Amount: worst, Budget: b, Window: win, Now: r.clock.Now()}); err != nil || !ok {
			t.Fatalf("reserve %s: %v %v", key, ok, err)
		}
	}
	reserve(done.ID + "/1")                          // its settling write was lost
	reserve("job_" + strings.Repeat("7", 26) + "/1") // a create that never wrote its job
	before := r.budgetOf(t)
	sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: r.st, Starter: &starter{}, Grace: time.Minute,
		NowFunc: r.clock.Now, Owners: r.st.Store, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.budgetOf(t); got.Held() != before.Held() {
		t.Fatalf("a young reservation was settled: %+v", got)
	}
	r.clock.Advance(job.RecountQuiet)
	// The owner is busy meanwhile: traffic does not hold the recount back.
	if _, err := r.createBudgeted(t, "busy"); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := r.budgetOf(t)
	spent := testPrice.Cost(300, 250)
	if got.Spent != 2*spent || len(got.Reserved) != 2 || got.Reserved[pending.Reservation.Key] != worst {
		t.Fatalf("after the sweep: %+v, want the done job's lost settlement spent (%d twice over) and the pending and busy jobs' held", got, spent)
	}
}

// TestTheSweeperRecountsEndpoints (review L2): an endpoint counted whose
// write failed, and whose uncount failed too, no longer holds a slot for
// good: once the owner is quiet, the recount counts its endpoints.
func TestTheSweeperRecountsEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	for range 2 {
		if ok, err := r.st.CountEndpoint(ctx, "owner", 10, r.clock.Now()); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if err := r.st.PutEndpoint(ctx, job.Endpoint{ID: "ep_1", Owner: "owner", URL: "https://hooks.example.com/", CreatedAt: r.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	sw, err := lifecycle.NewSweeper(lifecycle.SweeperConfig{Store: r.st, Starter: &starter{}, Grace: time.Minute,
		NowFunc: r.clock.Now, Owners: r.st.Store, Endpoints: r.st.Store, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(job.RecountQuiet)
	if _, err := sw.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if u, err := r.st.Usage(ctx, "owner"); err != nil || u.Endpoints != 1 {
		t.Fatalf("after the recount: %+v %v, want 1 endpoint", u, err)
	}
}

// TestATokenRateSpendsEachAttemptsWorstCase: a provider declaring 1,000
// tokens a minute takes one demo job (its worst case: the rendered
// request's bytes and 256 output tokens, about 560) and makes the next
// owner's wait (rate_limited), with no call.
func TestATokenRateSpendsEachAttemptsWorstCase(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pol := r.withRate(t, job.RateLimit{Tokens: 1000, Per: time.Minute})
	c, _ := catalog()
	r.certify(t, "demo", fallback)
	ctx := context.Background()
	first := r.demo(t)
	if _, err := r.run(t, first.ID); err != nil {
		t.Fatal(err)
	}
	jt, _ := c.Get("demo")
	req, _ := jt.Request(first.Input)
	basis := lifecycle.CostBasisOf(req)
	worst := job.InputBound(basis.RequestBytes) + basis.MaxOutputTokens
	h, err := r.st.Health(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	if total, _ := h.TokensUsed("owner", pol.Rate, r.clock.Now()); total != worst || r.get(t, first.ID).Status != job.StatusSucceeded {
		t.Fatalf("the first job spent %d tokens of the primary's rate, want its worst case %d", total, worst)
	}
	// The second needs its worst case again: neither provider has it left
	// (the fallback takes it: 1,000 per provider), then neither.
	second := r.demo(t)
	_, _ = r.run(t, second.ID)
	third := r.demo(t)
	_, _ = r.run(t, third.ID)
	got := r.get(t, third.ID)
	if got.Waiting == nil || got.Waiting.Reason != job.WaitRateLimited || len(got.Attempts) != 0 {
		t.Fatalf("the third job: %s, waiting %+v, %d attempts", got.Status, got.Waiting, len(got.Attempts))
	}
}

// TestAnAttemptNotSentInTimeIsGivenBack: under a declared rate, an attempt
// whose launch took longer than job.RateMargin after its admission is not
// sent (it could reach the provider after its spend left the window): it
// fails as rate-limited, forgiven, and the provider sees no call.
func TestAnAttemptNotSentInTimeIsGivenBack(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.withRate(t, job.RateLimit{Requests: 100, Per: time.Minute})
	j := r.demo(t)
	// The launch's write takes longer than the margin.
	r.st.interleave(func() { r.clock.Advance(job.RateMargin + time.Second) })
	_, _ = r.run(t, j.ID)
	got := r.get(t, j.ID)
	a, ok := got.Attempt(1)
	if !ok || a.State != job.AttemptFailed || a.Error == nil || a.Error.Class != job.ClassRateLimited || r.prov[primary].calls.Load() != 0 {
		t.Fatalf("attempt 1: %+v; primary calls %d", a, r.prov[primary].calls.Load())
	}
	if !strings.Contains(r.logs.String(), `"msg":"rate_send_late"`) {
		t.Fatal("no rate_send_late line")
	}
	// Asked again in time, it runs.
	_, _ = r.run(t, j.ID)
	if got := r.get(t, j.ID); got.Status != job.StatusSucceeded {
		t.Fatalf("the job after asking again: %s, %+v", got.Status, got.Attempts)
	}
}

// withRate rebuilds the rig's tasks with breakers whose every provider
// declares rate, and returns that policy.
func (r *rig) withRate(t *testing.T, rate job.RateLimit) job.HealthPolicy {
	t.Helper()
	pol := healthPolicy()
	pol.Rate = rate
	b, err := lifecycle.NewBreakers(lifecycle.BreakersConfig{Store: r.st.Store, PolicyFunc: func(string) job.HealthPolicy { return pol },
		NowFunc: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := catalog()
	r.tasks, err = lifecycle.NewTasks(lifecycle.TasksConfig{Engine: r.eng, Catalog: jobtype.Lookup[lifecycle.JobType]{Catalog: c},
		Providers: r.prov, Certifications: r.st, CallTimeout: callTimeout, PollInterval: pollInterval, OverdueGrace: overdue,
		NowFunc: r.clock.Now, AfterFunc: r.timers.after, Breakers: b, MaxProviderWait: 10 * time.Minute,
		Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}
