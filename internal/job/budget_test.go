package job_test

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestMoneyParsesAndPrints(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want job.Money
		ok   bool
		out  string
	}{
		{"0.10", 100_000_000, true, "0.1"},
		{"2.5", 2_500_000_000, true, "2.5"},
		{"0", 0, true, "0"},
		{"0.000000001", 1, true, "0.000000001"},
		{"0.0000000001", 0, false, ""},
		{"-1", 0, false, ""},
		{"1e3", 0, false, ""},
		{"", 0, false, ""},
		{"ten", 0, false, ""},
		{"99999999999", 0, false, ""},
	} {
		got, err := job.ParseUSD(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
		if c.ok && got.USD() != c.out {
			t.Errorf("%q prints as %q, want %q", c.in, got.USD(), c.out)
		}
	}
}

func TestPriceCostRoundsUp(t *testing.T) {
	t.Parallel()
	p := job.Price{Version: "v", Input: 150_000_000, Output: 600_000_000} // $0.15 and $0.60 per million
	for _, c := range []struct {
		in, out int
		want    job.Money
	}{
		{0, 0, 0},
		{1, 0, 150},
		{1_000_000, 0, 150_000_000},
		{0, 1_000_000, 600_000_000},
		{1000, 500, 150_000 + 300_000},
	} {
		if got := p.Cost(c.in, c.out); got != c.want {
			t.Errorf("Cost(%d, %d) = %d, want %d", c.in, c.out, got, c.want)
		}
	}
	// A thousandth of a nano-dollar still costs one: never an under-count.
	if got := (job.Price{Input: 1}).Cost(1, 0); got != 1 {
		t.Errorf("a fraction of a nano-dollar cost %d, want 1", got)
	}
	// The worst case bounds what any answer within the type's output limit
	// and a request of that many bytes can cost.
	basis := job.CostBasis{RequestBytes: 1200, MaxOutputTokens: 256}
	if w, c := p.WorstCase(basis), p.Cost(1200, 256); w < c {
		t.Errorf("worst case %d below the cost of a request with a token per byte %d", w, c)
	}
}

// TestWorstCaseCountsTheProvidersOverhead (review N-L3): a provider that
// adds its own prompt to every request (Anthropic's tool-use system
// prompt, 313 tokens in its simulator) bills input the request's bytes do
// not bound; the worst case counts the price's overhead, at every tier.
func TestWorstCaseCountsTheProvidersOverhead(t *testing.T) {
	t.Parallel()
	p := job.Price{Version: "v", Input: job.NanosPerUSD, Output: 5 * job.NanosPerUSD, OverheadInputTokens: 346,
		Discount: job.Discount{Flex2h: 30}}
	basis := job.CostBasis{RequestBytes: 40, MaxOutputTokens: 100}
	// A short request: 40 bytes bound 56 tokens, the provider's prompt
	// adds 313, the answer uses every output token.
	billed := 40 + 313
	for _, at := range []job.Price{p, p.At(job.TierNow), p.At(job.TierFlex2h)} {
		if w, c := at.WorstCase(basis), at.Cost(billed, basis.MaxOutputTokens); w < c || w != at.Cost(job.InputBound(40)+346, 100) {
			t.Errorf("%s: worst case %d, a billed answer %d", at.Version, w, c)
		}
		without := at
		without.OverheadInputTokens = 0
		if w, c := without.WorstCase(basis), at.Cost(billed, basis.MaxOutputTokens); w >= c {
			t.Errorf("%s: without the overhead the worst case %d still bounds %d: the case shows nothing", at.Version, w, c)
		}
	}
	if r := p.At(job.TierFlex2h).Rates(); r.OverheadInputTokens != 0 || r.Version != "v@2h" || r.Input != 700_000_000 {
		t.Errorf("the rates a spend records: %+v", r)
	}
}

func TestBudgetWorstCaseNeedsAPrice(t *testing.T) {
	t.Parallel()
	cheap := job.Price{Version: "v", Input: job.NanosPerUSD, Output: job.NanosPerUSD}
	dear := job.Price{Version: "v", Input: 10 * job.NanosPerUSD, Output: 10 * job.NanosPerUSD}
	// flex is the dearest now and the cheapest for work that waits 8h.
	flex := job.Price{Version: "v", Input: 20 * job.NanosPerUSD, Output: 20 * job.NanosPerUSD, Discount: job.Discount{Flex2h: 30, Flex8h: 95}}
	b := job.Budget{Amount: job.NanosPerUSD, Period: time.Hour, Prices: map[string]job.Price{"a": cheap, "b": dear, "flex": flex}}
	basis := job.CostBasis{RequestBytes: 100, MaxOutputTokens: 100}
	for _, c := range []struct {
		providers []string
		tier      job.Tier
		want      job.Money
		ok        bool
	}{
		{[]string{"a", "b"}, job.TierNow, dear.WorstCase(basis), true},
		{[]string{"a", "unpriced"}, job.TierNow, cheap.WorstCase(basis), true},
		{[]string{"unpriced"}, job.TierNow, 0, false},
		{[]string{"a", "flex"}, job.TierNow, flex.WorstCase(basis), true},
		{[]string{"a", "flex"}, job.TierFlex2h, flex.At(job.TierFlex2h).WorstCase(basis), true},
		// 95% off makes flex cheaper than a, which has no discount: a
		// fallback to a would cost a's full price, so that is the worst.
		{[]string{"a", "flex"}, job.TierFlex8h, cheap.WorstCase(basis), true},
	} {
		got, ok := b.WorstCase(c.providers, basis, c.tier)
		if got != c.want || ok != c.ok {
			t.Errorf("WorstCase(%v, %s) = %d, %v; want %d, %v", c.providers, c.tier, got, ok, c.want, c.ok)
		}
	}
}

func TestPriceAtTier(t *testing.T) {
	t.Parallel()
	p := job.Price{Version: "2026-12", Input: 1_250, Output: 10_000, Discount: job.Discount{Flex2h: 30, Flex8h: 40, Batch24h: 50}}
	for _, c := range []struct {
		tier job.Tier
		want job.Price
	}{
		{job.TierNow, job.Price{Version: "2026-12", Input: 1_250, Output: 10_000}},
		{"", job.Price{Version: "2026-12", Input: 1_250, Output: 10_000}},
		// 875 and 7000 exactly; 750 and 6000 exactly.
		{job.TierFlex2h, job.Price{Version: "2026-12@2h", Input: 875, Output: 7_000}},
		{job.TierFlex8h, job.Price{Version: "2026-12@8h", Input: 750, Output: 6_000}},
		// A batch's half price: 625 and 5000 exactly.
		{job.TierBatch24h, job.Price{Version: "2026-12@24h", Input: 625, Output: 5_000}},
	} {
		if got := p.At(c.tier); got != c.want {
			t.Errorf("At(%q) = %+v, want %+v", c.tier, got, c.want)
		}
	}
	// Rounded up, never an under-count: 30% off 1 nano-dollar is 0.7, so 1.
	if got := (job.Price{Version: "v", Input: 1, Discount: job.Discount{Flex2h: 30}}).At(job.TierFlex2h).Input; got != 1 {
		t.Errorf("30%% off 1 is %d, want 1 (rounded up)", got)
	}
	// A price without discounts is the same price at every tier.
	plain := job.Price{Version: "v", Input: 3, Output: 4}
	if got := plain.At(job.TierFlex8h); got != plain {
		t.Errorf("a price without discounts at 8h = %+v, want %+v", got, plain)
	}
	for _, d := range []job.Discount{{Flex2h: -1}, {Flex8h: 100}, {Batch24h: 100}, {Batch24h: -50}} {
		b := job.Budget{Period: time.Hour, Prices: map[string]job.Price{"p": {Version: "v", Discount: d}}}
		if b.Validate() == nil {
			t.Errorf("discount %+v validated", d)
		}
	}
}

func TestDecideBudget(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	def := job.Budget{Amount: 100, Period: day}
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	win, ends := def.Window(now)
	if !ends.Equal(time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("a day's window ends at %v, want midnight UTC", ends)
	}
	own := job.Money(500)
	for _, c := range []struct {
		name    string
		cur     job.OwnerBudget
		change  *job.OwnBudget
		want    job.OwnerBudget
		changed bool
	}{
		{"FirstUse", job.OwnerBudget{}, nil, job.OwnerBudget{Amount: 100, Window: win, Headroom: 100}, true},
		{"Current", job.OwnerBudget{Amount: 100, Window: win, Headroom: 40, Spent: 30, Reserved: map[string]job.Money{"k": 30}}, nil,
			job.OwnerBudget{Amount: 100, Window: win, Headroom: 40, Spent: 30}, false},
		// A new window forgets what was spent; what running attempts
		// hold still counts.
		{"NewWindow", job.OwnerBudget{Amount: 100, Window: win - 1, Headroom: 10, Spent: 60, Reserved: map[string]job.Money{"k": 30}}, nil,
			job.OwnerBudget{Amount: 100, Window: win, Headroom: 70}, true},
		{"DeploymentRaised", job.OwnerBudget{Amount: 80, Window: win, Headroom: 10, Spent: 70}, nil,
			job.OwnerBudget{Amount: 100, Window: win, Headroom: 30, Spent: 70}, true},
		{"OwnAmountKept", job.OwnerBudget{Amount: 500, Own: true, Window: win, Headroom: 400, Spent: 100}, nil,
			job.OwnerBudget{Amount: 500, Own: true, Window: win, Headroom: 400, Spent: 100}, false},
		{"OperatorSetsOwn", job.OwnerBudget{Amount: 100, Window: win, Headroom: 0, Spent: 100}, &job.OwnBudget{Amount: &own},
			job.OwnerBudget{Amount: 500, Own: true, Window: win, Headroom: 400, Spent: 100}, true},
		// Lowered below what is spent: the headroom goes negative and
		// every reservation is refused until the window ends.
		{"OperatorReturnsToDeployment", job.OwnerBudget{Amount: 500, Own: true, Window: win, Headroom: 300, Spent: 200}, &job.OwnBudget{},
			job.OwnerBudget{Amount: 100, Window: win, Headroom: -100, Spent: 200}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, changed := job.DecideBudget(c.cur, def, c.change, now)
			got.Reserved = nil
			if changed != c.changed || got.Amount != c.want.Amount || got.Own != c.want.Own || got.Window != c.want.Window ||
				got.Headroom != c.want.Headroom || got.Spent != c.want.Spent {
				t.Errorf("DecideBudget = %+v, %v; want %+v, %v", got, changed, c.want, c.changed)
			}
			if changed && !got.Current(def, win) {
				t.Errorf("a decided budget %+v is not current", got)
			}
		})
	}
}

func TestSpendOfAnEndedAttempt(t *testing.T) {
	t.Parallel()
	p := job.Price{Version: "v", Input: job.NanosPerUSD, Output: 2 * job.NanosPerUSD}
	spend := &job.Spend{Key: "job_x/1", Price: p, Reserved: 5000}
	for _, c := range []struct {
		name   string
		a      job.Attempt
		want   job.Money
		source job.SpendSource
	}{
		{"Reported", job.Attempt{State: job.AttemptSucceeded, Spend: spend, Usage: &job.Usage{InputTokens: 1000, OutputTokens: 500}},
			2_000_000, job.SpendReported},
		{"ContractViolationIsPaid", job.Attempt{State: job.AttemptFailed, Spend: spend, Error: &job.Failure{Class: job.ClassContractViolation},
			Usage: &job.Usage{InputTokens: 10, OutputTokens: 10}}, 30_000, job.SpendReported},
		{"RefusedIsFree", job.Attempt{State: job.AttemptFailed, Spend: spend, Error: &job.Failure{Class: job.ClassRetryable}}, 0, job.SpendNone},
		{"RateLimitedIsFree", job.Attempt{State: job.AttemptFailed, Spend: spend, Error: &job.Failure{Class: job.ClassRateLimited}}, 0, job.SpendNone},
		{"ServerErrorIsFree", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassRetryable, ProviderStatus: 503}}, 0, job.SpendNone},
		{"BadRequestIsFree", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassNonRetryable, ProviderStatus: 400}}, 0, job.SpendNone},
		{"UncertifiedIsFree", job.Attempt{State: job.AttemptFailed, Spend: spend, Error: &job.Failure{Class: job.ClassUncertified}}, 0, job.SpendNone},
		// Review N-H1: an answer onejob cannot use is billed all the same.
		{"TruncatedAnswerIsPaid", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassRetryable, ProviderStatus: 200, Message: "finish_reason length"},
			Usage: &job.Usage{InputTokens: 300, OutputTokens: 100_000}}, 200_300_000, job.SpendReported},
		{"UnusableAnswerWithoutUsageSpendsTheReservation", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassRetryable, ProviderStatus: 200}, Usage: &job.Usage{Latency: time.Second}}, 5000, job.SpendWorstCase},
		{"RefusedWorkWithoutUsageSpendsTheReservation", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassNonRetryable, ProviderStatus: 200}}, 5000, job.SpendWorstCase},
		{"ContractViolationWithoutUsageSpendsTheReservation", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassContractViolation}}, 5000, job.SpendWorstCase},
		{"AnswerWithoutUsageSpendsTheReservation", job.Attempt{State: job.AttemptSucceeded, Spend: spend}, 5000, job.SpendWorstCase},
		{"SettledUnknownSpendsTheReservation", job.Attempt{State: job.AttemptFailed, Spend: spend, Error: &job.Failure{Class: job.ClassAmbiguous}},
			5000, job.SpendWorstCase},
		{"OperatorsFailureWithoutUsageSpendsTheReservation", job.Attempt{State: job.AttemptFailed, Spend: spend,
			Error: &job.Failure{Class: job.ClassRetryable}, Resolution: &job.Resolved{Outcome: job.AttemptFailed}}, 5000, job.SpendWorstCase},
		{"NotBudgeted", job.Attempt{State: job.AttemptSucceeded, Usage: &job.Usage{InputTokens: 1}}, 0, job.SpendNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, source := job.SpendOf(c.a)
			if got != c.want || source != c.source {
				t.Errorf("SpendOf = %d, %s; want %d, %s", got, source, c.want, c.source)
			}
		})
	}
}

func TestBudgetValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		b    job.Budget
		ok   bool
	}{
		{"None", job.Budget{}, true},
		{"Daily", job.Budget{Amount: 1, Period: 24 * time.Hour}, true},
		{"AmountWithoutPeriod", job.Budget{Amount: 1}, false},
		{"TooShort", job.Budget{Amount: 1, Period: time.Second}, false},
		{"PriceWithoutVersion", job.Budget{Amount: 1, Period: time.Hour, Prices: map[string]job.Price{"p": {Input: 1}}}, false},
		{"Overhead", job.Budget{Amount: 1, Period: time.Hour, Prices: map[string]job.Price{"p": {Version: "v", OverheadInputTokens: 346}}}, true},
		{"NegativeOverhead", job.Budget{Amount: 1, Period: time.Hour, Prices: map[string]job.Price{"p": {Version: "v", OverheadInputTokens: -1}}}, false},
		{"HugeOverhead", job.Budget{Amount: 1, Period: time.Hour,
			Prices: map[string]job.Price{"p": {Version: "v", OverheadInputTokens: job.MaxOverheadInputTokens + 1}}}, false},
	} {
		if err := c.b.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestDecideReservation(t *testing.T) {
	t.Parallel()
	p := job.Price{Version: "v", Input: job.NanosPerUSD, Output: job.NanosPerUSD}
	key1, key2 := "job_a/1", "job_a/2"
	spend := func(k string) *job.Spend { return &job.Spend{Key: k, Price: p, Reserved: 9000} }
	reserved := &job.Spend{Key: key1, Reserved: 9000}
	paid := &job.Usage{InputTokens: 2, OutputTokens: 3}
	for _, c := range []struct {
		name    string
		key     string
		j       job.Job
		found   bool
		release bool
		cost    job.Money
	}{
		{"JobNeverWritten", key1, job.Job{}, false, true, 0},
		{"PendingJobKeepsItsCreatesReservation", key1, job.Job{Status: job.StatusPending, Reservation: reserved}, true, false, 0},
		{"CancelledBeforeLaunch", key1, job.Job{Status: job.StatusCancelled, Reservation: reserved}, true, true, 0},
		{"RunningAttemptKeepsIt", key1, job.Job{Status: job.StatusRunning, Reservation: reserved,
			Attempts: []job.Attempt{{Number: 1, State: job.AttemptRunning, Spend: spend(key1)}}}, true, false, 0},
		{"UnknownAttemptKeepsIt", key2, job.Job{Status: job.StatusUnknown, Reservation: reserved,
			Attempts: []job.Attempt{{Number: 1, State: job.AttemptFailed, Spend: spend(key1)}, {Number: 2, State: job.AttemptUnknown, Spend: spend(key2)}}},
			true, false, 0},
		{"EndedAttemptsLostSettlement", key1, job.Job{Status: job.StatusSucceeded, Reservation: reserved,
			Attempts: []job.Attempt{{Number: 1, State: job.AttemptSucceeded, Spend: spend(key1), Usage: paid}}}, true, true, p.Cost(2, 3)},
		{"LaunchThatNeverApplied", key2, job.Job{Status: job.StatusRunning, Reservation: reserved,
			Attempts: []job.Attempt{{Number: 1, State: job.AttemptRunning, Spend: spend(key1)}}}, true, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			release, cost := job.DecideReservation(c.key, c.j, c.found)
			if release != c.release || cost != c.cost {
				t.Errorf("DecideReservation = %v, %d; want %v, %d", release, cost, c.release, c.cost)
			}
		})
	}
	// Only reservations older than RecountQuiet are looked at.
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	b := job.OwnerBudget{Reserved: map[string]job.Money{"old": 1, "young": 1},
		ReservedAt: map[string]time.Time{"old": now.Add(-job.RecountQuiet), "young": now.Add(-time.Second), "settled": now.Add(-time.Hour)}}
	if got := job.StaleReservations(b, now); len(got) != 1 || got[0] != "old" {
		t.Errorf("StaleReservations = %v, want [old]", got)
	}
}
