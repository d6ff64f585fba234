package stack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/apiclient"
	"github.com/onejob/onejob/internal/dev/sim"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Issue 26's budget drill: every owner may spend $0.10 a day; each demo
// call reports 300 input and 250 output tokens ($0.028 at the demo
// prices), and a demo job's worst case is about $0.029. One owner's jobs,
// one after the other: 3 run, the 4th is refused with 429 budget-exceeded
// before any provider call. Three other owners each send 20 creates at
// once: none of them ever spends more than its budget, each has exactly
// the 3 jobs it can afford, and the providers saw only those.
//
// Beside them (review N-H1), a provider that answers every call
// finish_reason: length with all of its 100,000 output tokens billed
// (OpenAI's wire format, sim.ModeTruncated): TruncatedAnswersArePaid.
func TestABudgetRefusesBeforeAnyProviderCall(t *testing.T) {
	t.Parallel()
	truncating := startTruncating(t)
	prices := stack.DemoPrices()
	prices[truncatingName] = truncatingPrice
	b := job.Budget{Amount: job.NanosPerUSD / 10, Period: 24 * time.Hour, Prices: prices}
	s := ownStack(t, "budget", stack.Config{CertifyDemo: true, Budget: b, Catalog: withLongType(t),
		Providers: provider.Config{Providers: []provider.ProviderConfig{{Name: truncatingName, Kind: provider.KindOpenAI,
			BaseURL: truncating.url + "/v1", Model: "gpt-4o-mini"}}}})
	for _, p := range []string{sim.DemoPrimary, sim.DemoFallback} {
		if err := s.Sim.SetScript(p, sim.DemoScript{InputTokens: 300, OutputTokens: 250}); err != nil {
			t.Fatal(err)
		}
	}
	cost := stack.DemoPrices()[sim.DemoPrimary].Cost(300, 250)
	calls := func(ids map[string]bool) (n int) {
		for _, p := range []string{sim.DemoPrimary, sim.DemoFallback} {
			for _, a := range s.Sim.Arrivals(p) {
				if ids[a.JobID] {
					n++
				}
			}
		}
		return n
	}

	t.Run("OneAfterAnother", func(t *testing.T) {
		t.Parallel()
		alice := newClient(t, s, "budget-alice")
		ids := map[string]bool{}
		for i := 1; i <= 3; i++ {
			j := alice.submit("demo", fmt.Sprintf("budget-alice-%d", i), nil)
			ids[j.ID] = true
			alice.await(j.ID, 60*time.Second, "succeeded", func(j apiclient.Job) bool { return j.Status == "succeeded" })
		}
		// Only alice's calls are counted: the other owners' jobs (the
		// subtest beside this one) reach the same providers meanwhile.
		fourth := map[string]bool{job.NewID("budget-alice", "budget-alice-4"): true}
		code, header, body := alice.do(http.MethodPost, "/v1/jobs", "budget-alice-4",
			map[string]any{"type": "demo", "input": map[string]any{"prompt": "e2e budget-alice-4"}})
		if code != http.StatusTooManyRequests || !strings.Contains(string(body), apigw.CodeBudgetExceeded.Type()) {
			t.Fatalf("the 4th job: %d %s", code, body)
		}
		if !strings.HasPrefix(header.Get("RateLimit"), `"budget";r=`) || header.Get("Retry-After") == "" {
			t.Fatalf("the refusal's fields: RateLimit %q Retry-After %q", header.Get("RateLimit"), header.Get("Retry-After"))
		}
		if n, refused := calls(ids), calls(fourth); n != 3 || refused != 0 {
			t.Fatalf("the providers saw %d calls of alice's 3 jobs, and %d of her refused 4th", n, refused)
		}
		u := usage(t, alice)
		if u.Budget == nil || u.Budget.SpentUSD != (3*cost).USD() || u.Budget.ReservedUSD != "0" {
			t.Fatalf("alice's usage: %+v", u.Budget)
		}
		t.Logf("alice: 3 jobs ran, spent %s USD of 0.10; the 4th refused (%s)", u.Budget.SpentUSD, header.Get("RateLimit"))
	})

	t.Run("TwentyAtOnce", func(t *testing.T) {
		t.Parallel()
		owners := []string{"budget-bob", "budget-carol", "budget-dave"}
		var mu sync.Mutex
		accepted := map[string]map[string]bool{}
		refused := map[string]int{}
		var wg sync.WaitGroup
		for _, o := range owners {
			c := newClient(t, s, o)
			accepted[o] = map[string]bool{}
			for i := range 20 {
				wg.Go(func() {
					key := fmt.Sprintf("%s-%d", o, i)
					code, _, body, err := c.api.Do(t.Context(), http.MethodPost, "/v1/jobs", key,
						map[string]any{"type": "demo", "input": map[string]any{"prompt": "e2e " + key}})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("%s: %v", key, err)
					case code == http.StatusCreated:
						var j apiclient.Job
						if err := json.Unmarshal(body, &j); err != nil {
							t.Error(err)
						}
						accepted[o][j.ID] = true
					case code == http.StatusTooManyRequests && strings.Contains(string(body), apigw.CodeBudgetExceeded.Type()):
						refused[o]++
					default:
						t.Errorf("%s: %d %s", key, code, body)
					}
				})
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, o := range owners {
			c := newClient(t, s, o)
			for id := range accepted[o] {
				c.await(id, 60*time.Second, "succeeded", func(j apiclient.Job) bool { return j.Status == "succeeded" })
			}
			u := usage(t, c)
			spent, err := job.ParseUSD(u.Budget.SpentUSD)
			if err != nil {
				t.Fatal(err)
			}
			// Each job costs $0.028, so a budget of $0.10 affords 3 and
			// never a 4th, however the creates interleave.
			if len(accepted[o]) != 3 || refused[o] != 17 || spent > b.Amount || calls(accepted[o]) != 3 {
				t.Errorf("%s: %d accepted, %d refused, spent %s USD, %d provider calls", o, len(accepted[o]), refused[o], spent.USD(), calls(accepted[o]))
			}
			t.Logf("%s: 20 creates at once, %d accepted, %d refused, spent %s USD of 0.10", o, len(accepted[o]), refused[o], spent.USD())
		}
	})

	t.Run("TruncatedAnswersArePaid", func(t *testing.T) {
		t.Parallel()
		truncatedAnswersArePaid(t, s, truncating, b)
	})

	t.Run("AnOperatorSetsAnOwnersBudget", func(t *testing.T) {
		t.Parallel()
		op := newClient(t, s, "budget-operator", "jobs:admin")
		erin := newClient(t, s, "budget-erin")
		code, _, body := op.do(http.MethodPost, "/v1/admin/owners/budget-erin/budget", "", map[string]any{"amount_usd": "0.05"})
		if code != http.StatusOK {
			t.Fatalf("set erin's budget: %d %s", code, body)
		}
		// $0.05 affords one job's worst case, not two.
		j := erin.submit("demo", "budget-erin-1", nil)
		erin.await(j.ID, 60*time.Second, "succeeded", func(j apiclient.Job) bool { return j.Status == "succeeded" })
		if code, _, body := erin.do(http.MethodPost, "/v1/jobs", "budget-erin-2",
			map[string]any{"type": "demo", "input": map[string]any{"prompt": "e2e budget-erin-2"}}); code != http.StatusTooManyRequests {
			t.Fatalf("erin's second job: %d %s", code, body)
		}
		if u := usage(t, erin); u.Budget == nil || !u.Budget.Own || u.Budget.AmountUSD != "0.05" {
			t.Fatalf("erin's usage: %+v", u.Budget)
		}
		code, _, body = op.do(http.MethodGet, "/v1/admin/owners?limit=100", "", nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"owner":"budget-erin"`) {
			t.Fatalf("operators' view: %d %s", code, body)
		}
	})
}

type budgetUsage struct {
	Budget *struct {
		AmountUSD   string `json:"amount_usd"`
		Own         bool   `json:"own"`
		SpentUSD    string `json:"spent_usd"`
		ReservedUSD string `json:"reserved_usd"`
	} `json:"budget"`
}

func usage(t *testing.T, c *client) budgetUsage {
	t.Helper()
	code, _, body := c.do(http.MethodGet, "/v1/usage", "", nil)
	var u budgetUsage
	if code != http.StatusOK || json.Unmarshal(body, &u) != nil {
		t.Fatalf("usage: %d %s", code, body)
	}
	return u
}
