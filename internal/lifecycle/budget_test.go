package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
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
