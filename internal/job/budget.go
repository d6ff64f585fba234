package job

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Money is an amount in nano-dollars (10⁻⁹ USD): exact integer sums, and
// a price of $0.15 per million tokens is 150 per token. int64 holds about
// $9.2 billion.
type Money int64

// NanosPerUSD is one dollar in Money.
const NanosPerUSD Money = 1_000_000_000

// ParseUSD reads a non-negative decimal dollar amount ("0.10", "2.5"), to
// the nano-dollar; more digits, a sign or an exponent are refused.
func ParseUSD(s string) (Money, error) {
	if s == "" || strings.ContainsAny(s, "+-eE") {
		return 0, fmt.Errorf("%q is not a dollar amount such as 0.10", s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, fmt.Errorf("%q is not a dollar amount such as 0.10", s)
	}
	r.Mul(r, big.NewRat(int64(NanosPerUSD), 1))
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, fmt.Errorf("%q has more than 9 decimals or is too large", s)
	}
	return Money(r.Num().Int64()), nil
}

// USD is the amount as a decimal dollar string with 9 decimals at most,
// trailing zeros dropped ("0.03", "1").
func (m Money) USD() string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	s := fmt.Sprintf("%d.%09d", m/NanosPerUSD, m%NanosPerUSD)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return sign + s
}

// Price is a provider's price per million tokens, from a versioned price
// table: the version is recorded on every attempt priced with it.
type Price struct {
	Version string
	// Input and Output are per million tokens.
	Input, Output Money
	// OverheadInputTokens is what the provider adds to the input of every
	// request onejob sends it, beyond what the request's bytes bound
	// (InputBound): Anthropic's tool-use system prompt, added whenever a
	// tool is given (313 to 346 tokens for current Claude models), on
	// the Messages API and on Bedrock alike. It is billed as input, so
	// the worst case counts it: without it a short request settles above
	// its reservation (review N-L3).
	OverheadInputTokens int
	// Discount is how much less the provider charges for work that may
	// wait. Only a provider that runs work at a tier (its kind's:
	// provider.RunsTier) may have one: a discount on another is refused
	// where prices are loaded (deploy.BudgetConfig, lifecycle.NewTasks).
	Discount Discount
	// Kind is the priced provider's kind as the price table declares it
	// (provider.Kinds; empty: not declared): which tier it runs a job at,
	// and so which of its prices that job pays (lifecycle prices it).
	Kind string
}

// MaxOverheadInputTokens bounds a price's OverheadInputTokens: the largest
// documented is a few hundred tokens.
const MaxOverheadInputTokens = 10_000

// Discount is, per completion window, how many percent less a provider
// charges for work that may wait that long (OpenAI background: 2h 30, 8h
// 40; a batch or a flex tier: 50). A struct, not a map, so that a Price
// (recorded on every spend) stays comparable.
type Discount struct{ Flex2h, Flex8h, Batch24h int }

// Of is the discount for tier t, in percent.
func (d Discount) Of(t Tier) int {
	switch t {
	case TierFlex2h:
		return d.Flex2h
	case TierFlex8h:
		return d.Flex8h
	case TierBatch24h:
		return d.Batch24h
	}
	return 0
}

// At is the price of work that may wait t: this price less its discount
// for t, rounded up (never an under-count), its version naming the tier
// ("2026-12@2h") so an attempt's spend says which price it paid.
func (p Price) At(t Tier) Price {
	d := p.Discount.Of(t)
	if d <= 0 {
		return Price{Version: p.Version, Input: p.Input, Output: p.Output, OverheadInputTokens: p.OverheadInputTokens}
	}
	less := func(m Money) Money { return Money((int64(m)*int64(100-d) + 99) / 100) }
	return Price{Version: p.Version + "@" + string(t), Input: less(p.Input), Output: less(p.Output), OverheadInputTokens: p.OverheadInputTokens}
}

// Rates is what an attempt's spend records of the price it is settled
// at: its version and its rates (the overhead only bounds the
// reservation; settlement prices the tokens reported, overhead included).
func (p Price) Rates() Price { return Price{Version: p.Version, Input: p.Input, Output: p.Output} }

// Cost is what in input and out output tokens cost, rounded up to the
// nano-dollar (never an under-count).
func (p Price) Cost(in, out int) Money {
	c := new(big.Int).Mul(big.NewInt(int64(in)), big.NewInt(int64(p.Input)))
	c.Add(c, new(big.Int).Mul(big.NewInt(int64(out)), big.NewInt(int64(p.Output))))
	q, r := c.QuoRem(c, big.NewInt(1_000_000), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return Money(math.MaxInt64)
	}
	return Money(q.Int64())
}

// Budget is what every owner may spend per period unless an operator set
// its own amount (OwnerBudget.Own). The zero Budget is no budget: owners'
// spend is not counted and nothing is reserved.
type Budget struct {
	Amount Money
	// Period is how long a budget lasts before it starts again, in windows
	// aligned to the Unix epoch: a 24h period restarts at 00:00 UTC.
	Period time.Duration
	// Prices are the providers' prices, by provider name. A provider with
	// no price runs no budgeted job (never priced at 0).
	Prices map[string]Price
}

// Enabled reports whether owners' spend is budgeted.
func (b Budget) Enabled() bool { return b.Period > 0 }

// Validate refuses a budget without a period or prices without a version.
func (b Budget) Validate() error {
	if b.Amount < 0 || b.Period < 0 {
		return errors.New("budget: the amount and the period must not be negative")
	}
	if b.Amount > 0 && b.Period == 0 {
		return errors.New("budget: an amount needs a period")
	}
	if b.Period > 0 && b.Period < time.Minute {
		return errors.New("budget: the period must be at least a minute")
	}
	for name, p := range b.Prices {
		if p.Version == "" || p.Input < 0 || p.Output < 0 {
			return fmt.Errorf("budget: the price of %s needs a version and non-negative prices", name)
		}
		if p.OverheadInputTokens < 0 || p.OverheadInputTokens > MaxOverheadInputTokens {
			return fmt.Errorf("budget: the price of %s: the overhead is 0 to %d input tokens", name, MaxOverheadInputTokens)
		}
		for _, d := range []int{p.Discount.Flex2h, p.Discount.Flex8h, p.Discount.Batch24h} {
			if d < 0 || d > 99 {
				return fmt.Errorf("budget: the price of %s: a tier's discount is 0 to 99 percent", name)
			}
		}
	}
	return nil
}

// Window is the period window now falls in, as an index since the epoch,
// and when it ends.
func (b Budget) Window(now time.Time) (index int64, ends time.Time) {
	p := int64(b.Period)
	index = now.UnixNano() / p
	return index, time.Unix(0, (index+1)*p).UTC()
}

// InputBound bounds the input tokens of a request of n bytes from above
// without its tokenizer: a BPE token (tiktoken, Claude's, Llama's) stands
// for at least one byte of UTF-8, so a request never has more tokens than
// bytes. PerMessageTokens covers the framing tokens each chat message adds.
func InputBound(bytes int) int { return bytes + PerMessageTokens*2 }

// PerMessageTokens is the most framing tokens a chat message adds (OpenAI
// counts 3 per message plus 3 priming the answer; 8 covers both providers).
const PerMessageTokens = 8

// CostBasis is what prices a job's attempts before they run: the bytes of
// its rendered request (system, prompt, output schema) and the most
// output tokens its type allows.
type CostBasis struct {
	RequestBytes    int
	MaxOutputTokens int
}

// WorstCase is the most an attempt of a request can cost at price p: its
// input bound, the provider's own overhead, and every output token the
// type allows.
func (p Price) WorstCase(b CostBasis) Money {
	return p.Cost(InputBound(b.RequestBytes)+p.OverheadInputTokens, b.MaxOutputTokens)
}

// WorstCase is the most one attempt of a job with basis b that may wait t
// can cost on any of providers that has a price; ok is false when none has
// one.
func (b Budget) WorstCase(providers []string, basis CostBasis, t Tier) (Money, bool) {
	var most Money
	ok := false
	for _, p := range providers {
		if price, priced := b.Prices[p]; priced {
			most, ok = max(most, price.At(t).WorstCase(basis)), true
		}
	}
	return most, ok
}

// OwnerBudget is an owner's spend in the current window: Headroom is its
// amount less what it spent in the window and what its open attempts
// hold (Reserved, by attempt key), kept as one number so that a reserving
// write can compare it (a condition cannot add).
type OwnerBudget struct {
	Amount Money
	// Own: an operator set this owner's amount; else it follows the
	// deployment's.
	Own      bool
	Window   int64
	Headroom Money
	Spent    Money
	Reserved map[string]Money
	// ReservedAt is when each reservation was made: one older than
	// RecountQuiet whose attempt ended (or never launched) was not settled
	// (a write lost to a crash or a fault), and a recount settles it.
	ReservedAt map[string]time.Time
}

// Set reports whether the owner's budget was ever initialised.
func (b OwnerBudget) Set() bool { return b.Window != 0 }

// Held is what the owner's open attempts hold.
func (b OwnerBudget) Held() Money {
	var sum Money
	for _, m := range b.Reserved {
		sum += m
	}
	return sum
}

// OwnBudget is an operator's change of one owner's amount; Amount nil
// returns the owner to the deployment's.
type OwnBudget struct{ Amount *Money }

// DecideBudget brings an owner's budget to the current window and amount
// before a reservation: first use (the deployment's amount, nothing
// spent), a new window (what was spent no longer counts; reservations
// still hold), an amount the deployment changed (for owners without their
// own), or an operator's change (change nil: none). ok is false when
// nothing needs writing.
func DecideBudget(cur OwnerBudget, def Budget, change *OwnBudget, now time.Time) (OwnerBudget, bool) {
	win, _ := def.Window(now)
	after := cur
	after.Reserved = nil // the store keeps reservations; only the numbers move
	changed := false
	if !cur.Set() {
		after = OwnerBudget{Amount: def.Amount, Window: win, Headroom: def.Amount - cur.Held()}
		changed = true
	}
	if after.Window != win {
		after.Headroom += after.Spent
		after.Spent, after.Window = 0, win
		changed = true
	}
	amount, isOwn := def.Amount, false
	switch {
	case change != nil && change.Amount != nil:
		amount, isOwn = *change.Amount, true
	case change == nil && cur.Own:
		amount, isOwn = cur.Amount, true
	}
	if after.Amount != amount || after.Own != isOwn {
		after.Headroom += amount - after.Amount
		after.Amount, after.Own = amount, isOwn
		changed = true
	}
	return after, changed
}

// Current reports whether the owner's budget is in window win at the
// deployment's amount (or its own): a reservation may be written on it.
func (b OwnerBudget) Current(def Budget, win int64) bool {
	return b.Set() && b.Window == win && (b.Own || b.Amount == def.Amount)
}

// Reservation sets Amount aside from an owner's budget for one attempt
// (Key: AttemptKey), before its provider is called.
type Reservation struct {
	Key    string
	Amount Money
	// Budget is the deployment's; Window the current window's index.
	Budget Budget
	Window int64
	Now    time.Time
}

// SpendSource says where an attempt's cost came from.
type SpendSource string

const (
	// SpendReported: priced from the tokens the provider reported.
	SpendReported SpendSource = "provider_reported"
	// SpendWorstCase: the provider reported nothing for an answer (or an
	// operator settled it): its reservation is spent.
	SpendWorstCase SpendSource = "reserved_worst_case"
	// SpendNone: the provider certainly did not act on the request
	// (Failure.NotActed).
	SpendNone SpendSource = "not_billed"
)

// Spend is what a budgeted attempt set aside, at which price: once it
// ended, SpendOf is what it cost.
type Spend struct {
	// Key is the reservation's in the owner's budget: the attempt's
	// (AttemptKey), or for a first attempt the one its create reserved.
	Key      string
	Price    Price
	Reserved Money
}

// SpendOf is what an ended attempt cost: priced from the tokens its
// provider reported, whatever became of the answer (a truncated, refused
// or filtered answer, one without the requested structure or breaking
// the contract: the model ran, and the provider bills it); nothing only
// when its failure proves the provider did not act (Failure.NotActed);
// otherwise (an answer without usage, an unknown attempt settled out of
// band without it, whatever the settlement says: the provider may have
// billed work it never delivered) its whole reservation, which bounds it.
func SpendOf(a Attempt) (Money, SpendSource) {
	s := a.Spend
	if s == nil {
		return 0, SpendNone
	}
	if u := a.Usage; u != nil && u.InputTokens+u.OutputTokens > 0 {
		return s.Price.Cost(u.InputTokens, u.OutputTokens), SpendReported
	}
	if a.Resolution == nil && a.State == AttemptFailed && a.Error != nil && a.Error.NotActed() {
		return 0, SpendNone
	}
	return s.Reserved, SpendWorstCase
}

// NotActed reports whether a failure proves its provider did not act on
// the request, so that it billed nothing; anything it cannot prove is
// paid for (SpendOf). Certainly not acted on:
//   - never sent: an uncertified provider, one unavailable (its breaker
//     open), an attempt not sent under the provider's declared rate;
//   - answered 429 (ClassRateLimited): the rate refused it before any work;
//   - refused with a status that is no answer (ProviderStatus 3xx, 4xx,
//     5xx): a redirect never followed; a 4xx refusal of the request (bad
//     request, auth, billing), before the model runs; a 5xx, the
//     provider's own failure, which carries no answer to bill (the
//     providers bill the answers they give; a webhook receiver may never
//     answer 5xx for work it did, rule 7 of its contract);
//   - no status at all (ProviderStatus 0) on a failure that is not
//     ambiguous: the request was refused before it was sent (rendering,
//     the adapter's own checks, an unconfigured provider) or the
//     connection failed before it was whole written (refused, no such
//     host). A request that may have arrived is ambiguous: its attempt is
//     unknown, never failed this way.
//
// An answer (a 2xx: truncated, refused, filtered, malformed, without the
// structure asked for; ended asynchronous work), a contract violation (an
// answer the type refused), an ambiguous failure and a settled one are
// not: the provider acted, or may have.
func (f Failure) NotActed() bool {
	switch f.Class {
	case ClassUncertified, ClassUnavailable, ClassRateLimited:
		return true
	case ClassRetryable, ClassNonRetryable:
		return f.ProviderStatus < 200 || f.ProviderStatus > 299
	}
	return false
}

// Ended lists the budgeted attempts a transition ends (open before, not
// after): their reservations are settled.
func Ended(before, after Job) []Attempt {
	var out []Attempt
	for _, a := range after.Attempts {
		b, ok := before.Attempt(a.Number)
		if ok && b.State.Open() && !a.State.Open() && a.Spend != nil {
			out = append(out, a)
		}
	}
	return out
}

// UnlaunchedReservation reports whether a transition settles a job whose
// first attempt, reserved at its create, never started: that reservation
// is given back.
func UnlaunchedReservation(before, after Job) bool {
	_, launched := after.Attempt(1)
	return after.Reservation != nil && !launched && SettlesJob(before, after)
}

// StaleReservations are the owner's reservations made more than
// RecountQuiet before now: long enough that whatever made one has written
// the job or launched the attempt it was for, if it ever will.
func StaleReservations(b OwnerBudget, now time.Time) []string {
	var out []string
	for k, at := range b.ReservedAt {
		if _, held := b.Reserved[k]; held && now.Sub(at) >= RecountQuiet {
			out = append(out, k)
		}
	}
	return out
}

// DecideReservation says whether a stale reservation (key) still holds:
// j is the live job of its key's job ID (found false: none). It holds
// while its attempt is open, or, for a create's reservation, while the
// job waits to launch its first attempt. Otherwise it is settled: at what
// its attempt cost (the settling write was lost), or at nothing when no
// attempt ever held it (the job was never written, or the launch it was
// set aside for did not apply).
func DecideReservation(key string, j Job, found bool) (release bool, cost Money) {
	if !found {
		return true, 0
	}
	for _, a := range j.Attempts {
		if a.Spend != nil && a.Spend.Key == key {
			if a.State.Open() {
				return false, 0
			}
			cost, _ := SpendOf(a)
			return true, cost
		}
	}
	if r := j.Reservation; r != nil && r.Key == key && j.Unsettled() {
		return false, 0
	}
	return true, 0
}

// BudgetError refuses an attempt or a create past the owner's budget:
// nothing was reserved, no provider called.
type BudgetError struct {
	Amount    Money
	Remaining Money
	// Needed is what the refused job or attempt would have set aside.
	Needed Money
	// Resets is when the window ends; RetryAfter is when to ask again:
	// sooner while the owner's running attempts may settle below their
	// reservations.
	Resets     time.Time
	RetryAfter time.Duration
}

// ErrBudgetExceeded is wrapped by *BudgetError.
var ErrBudgetExceeded = errors.New("budget exceeded")

func (e *BudgetError) Error() string {
	return fmt.Sprintf("budget exceeded: %s USD left of %s, %s needed", e.Remaining.USD(), e.Amount.USD(), e.Needed.USD())
}

// Unwrap makes errors.Is(err, ErrBudgetExceeded) hold.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// LimitBudget names the budget in the RateLimit fields.
const LimitBudget = "budget"
