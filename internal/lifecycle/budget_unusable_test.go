package lifecycle_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// TestBilledButUnusableAnswersArePaid (review N-H1): both providers answer
// every call, but with nothing onejob can use: a truncated answer
// reporting every output token the type allows, or a filtered one
// reporting no usage. Each such attempt is paid (its usage, else its
// whole reservation), so an owner with $0.10 runs out after a few calls
// instead of spending without end at $0: its creates are refused before
// any provider call, and it never spends more than its budget.
func TestBilledButUnusableAnswersArePaid(t *testing.T) {
	t.Parallel()
	worst := demoWorst(t)
	for _, c := range []struct {
		name string
		err  *provider.CallError
		cost job.Money // of one attempt
	}{
		{"TruncatedReportsItsUsage", &provider.CallError{Class: provider.ClassRetryable, Status: 200,
			Msg: "output truncated at the token limit (finish_reason length)", Err: provider.ErrNoStructuredOutput,
			Usage: &provider.Usage{InputTokens: 300, OutputTokens: 256}}, testPrice.Cost(300, 256)},
		{"FilteredWithoutUsageSpendsTheReservation", &provider.CallError{Class: provider.ClassRetryable, Status: 200,
			Msg: "the content filter stopped the answer", Err: provider.ErrContentFiltered}, worst},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			amount := job.NanosPerUSD / 10
			r := newRigWith(t, budgeted(amount))
			r.certify(t, "demo", fallback)
			for _, name := range []string{primary, fallback} {
				e := *c.err
				e.Provider = name
				r.prov[name].answer = answers(provider.Response{}, &e)
			}
			created, refused := 0, false
			for i := range 20 {
				j, err := r.createBudgeted(t, fmt.Sprintf("k%d", i))
				if errors.Is(err, job.ErrBudgetExceeded) {
					refused = true
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				created++
				for range 3 {
					_, _ = r.run(t, j.ID)
				}
			}
			calls := r.prov[primary].calls.Load() + r.prov[fallback].calls.Load()
			b := r.budgetOf(t)
			if !refused || b.Spent != job.Money(calls)*c.cost || b.Spent > amount || b.Held() != 0 {
				t.Fatalf("%d jobs created, refused %v, %d provider calls: spent %s held %s of %s, want %s a call",
					created, refused, calls, b.Spent.USD(), b.Held().USD(), amount.USD(), c.cost.USD())
			}
			t.Logf("%d jobs, %d unusable answers paid %s USD of %s, then refused", created, calls, b.Spent.USD(), amount.USD())
		})
	}
}
