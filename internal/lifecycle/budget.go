package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// Budgets in money (job.Budget): a create sets its first attempt's worst
// case aside in the owner's record (one more conditional write), before
// the job is written, so a create past the budget is refused with nothing
// run; a fallback or a hedge sets its own aside at admission; the write
// that ends an attempt is followed by one that settles its reservation at
// what the provider reported. Without a budget none of this is written.

// CostBasisOf is what prices a rendered request: the bytes a model reads
// (system, prompt, output schema) and the output tokens it may write.
func CostBasisOf(req provider.Request) job.CostBasis {
	return job.CostBasis{RequestBytes: len(req.System) + len(req.Prompt) + len(req.OutputSchema), MaxOutputTokens: req.MaxOutputTokens}
}

// Budget is the engine's budget for owners' spend.
func (e *Engine) Budget() job.Budget { return e.budget }

// reserveFirst sets aside, for j's first attempt, the most it can cost on
// any of its priced providers. It refuses with *job.BudgetError past the
// owner's budget, with *job.InvalidError when none of the job's providers
// has a price (never priced at 0). already: the key was reserved before
// (a replay of a job that holds it).
func (e *Engine) reserveFirst(ctx context.Context, j *job.Job, basis job.CostBasis) (already bool, err error) {
	var worst job.Money
	ok := false
	for _, p := range j.Providers {
		price, priced, err := e.priceAt(p, j.Tier.OrNow())
		if err != nil {
			// The job would run at a tier its provider is not priced
			// for: refused, never billed at another tier's price.
			return false, &job.InvalidError{Field: "tier", Reason: err.Error()}
		}
		if priced {
			worst, ok = max(worst, price.WorstCase(basis)), true
		}
	}
	if !ok {
		return false, &job.InvalidError{Field: "providers",
			Reason: "none of these providers has a price, and this owner's spend is budgeted: a budgeted job runs only on priced providers"}
	}
	key := job.AttemptKey(j.ID, 1)
	ok, already, u, err := e.reserve(ctx, j.Owner, key, worst)
	if err != nil || !ok {
		return false, err
	}
	j.Reservation = &job.Spend{Key: key, Reserved: worst}
	if already {
		if r, held := u.Budget.Reserved[key]; held {
			j.Reservation.Reserved = r
		}
	}
	return already, nil
}

// reserve sets amount aside for key; a refusal is a *job.BudgetError.
func (e *Engine) reserve(ctx context.Context, owner, key string, amount job.Money) (bool, bool, job.OwnerUsage, error) {
	now := e.now()
	win, resets := e.budget.Window(now)
	ok, already, u, err := e.owners.Reserve(ctx, owner, job.Reservation{Key: key, Amount: amount, Budget: e.budget, Window: win, Now: now})
	if err != nil {
		return false, false, u, err
	}
	if !ok {
		retry := resets.Sub(now)
		if len(u.Budget.Reserved) > 0 {
			retry = min(retry, BudgetRecheck)
		}
		return false, false, u, &job.BudgetError{Amount: u.Budget.Amount, Remaining: max(0, u.Budget.Headroom), Needed: amount,
			Resets: resets, RetryAfter: retry}
	}
	return true, already, u, nil
}

// ReserveAttempt sets aside what attempt n of j can cost on provider (a
// fallback or a hedge; the first attempt spends its create's): the spend
// to record on the attempt, nil when the job is not budgeted. Refused: a
// *job.BudgetError, or ErrUnpriced for a provider without a price.
func (e *Engine) ReserveAttempt(ctx context.Context, j job.Job, n int, prov string, basis job.CostBasis) (*job.Spend, error) {
	if j.Reservation == nil || !e.budget.Enabled() {
		return nil, nil
	}
	price, ok, err := e.priceAt(prov, j.Tier.OrNow())
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnpriced, err)
	case !ok:
		return nil, ErrUnpriced
	}
	if n == 1 {
		s := *j.Reservation
		s.Price = price.Rates()
		return &s, nil
	}
	key := job.AttemptKey(j.ID, n)
	worst := price.WorstCase(basis)
	if _, _, _, err := e.reserve(ctx, j.Owner, key, worst); err != nil {
		return nil, err
	}
	return &job.Spend{Key: key, Price: price.Rates(), Reserved: worst}, nil
}

// priceAt is provider prov's price for a job that may wait t: its price at
// the tier the provider runs the job at (provider.RunTier of the price's
// declared kind; a price that declares none is taken at the job's tier, as
// prices were before they declared kinds, which lifecycle.NewTasks allows
// only where that is the tier the provider runs). ok is false when prov
// has no price. A tier the provider runs in a mode always billed below its
// standard price (a batch, a flex tier) that its price gives no rate for
// is a *TierUnpricedError: the job would be billed at another tier's price.
func (e *Engine) priceAt(prov string, t job.Tier) (job.Price, bool, error) {
	price, ok := e.budget.Prices[prov]
	if !ok {
		return job.Price{}, false, nil
	}
	if price.Kind == "" {
		return price.At(t), true, nil
	}
	run, mode := provider.RunTier(price.Kind, t)
	if mode.Discounted() && price.Discount.Of(run) <= 0 {
		return job.Price{}, false, &TierUnpricedError{Provider: prov, Tier: t, Run: run, Mode: mode}
	}
	return price.At(run), true, nil
}

// TierUnpricedError refuses a job that would run at a tier its provider's
// price gives no rate for.
type TierUnpricedError struct {
	Provider string
	Tier     job.Tier
	Run      job.Tier
	Mode     provider.Mode
}

func (e *TierUnpricedError) Error() string {
	return fmt.Sprintf("provider %s runs a job that may wait %s as %s work (tier %s), and its price gives no rate for that tier", e.Provider, e.Tier, e.Mode, e.Run)
}

// BudgetRecheck is how soon a refused owner may find room again while its
// running attempts hold reservations (they settle at what they cost,
// usually less than their worst case).
const BudgetRecheck = 10 * time.Second

// ErrUnpriced refuses a budgeted job's attempt on a provider with no price.
var ErrUnpriced = errors.New("the provider has no price: it runs no budgeted job")

// ReleaseUnlaunched gives back a reservation whose attempt was never
// launched (its launch lost, or failed).
func (e *Engine) ReleaseUnlaunched(ctx context.Context, owner string, s *job.Spend, n int) {
	if s == nil || n == 1 {
		return // the create's reservation stays with its job
	}
	e.release(ctx, owner, s.Key, s.Reserved, 0)
}

func (e *Engine) release(ctx context.Context, owner, key string, reserved, cost job.Money) {
	if err := e.owners.Release(ctx, owner, key, reserved, cost, e.now()); err != nil {
		// Left reserved: the owner's headroom is too low, never too high.
		e.log.WarnContext(ctx, "budget_release_failed", "owner", owner, "reservation", key, "error", err.Error())
	}
}

// settleSpend settles the reservations a transition ended: each ended
// attempt's at its cost (job.SpendOf), and a first attempt's that never
// launched, at nothing.
func (e *Engine) settleSpend(ctx context.Context, before, after job.Job) {
	for _, a := range job.Ended(before, after) {
		cost, source := job.SpendOf(a)
		e.log.InfoContext(ctx, "budget_settled", "job_id", a.JobID, "attempt", a.Number, "owner", after.Owner,
			"reserved_usd", a.Spend.Reserved.USD(), "cost_usd", cost.USD(), "source", string(source))
		if cost > a.Spend.Reserved {
			// Charged as billed, but the worst case did not bound it: the
			// provider's price entry under-counts (an overhead it adds to
			// every request, not declared: overheadInputTokens).
			e.log.WarnContext(ctx, "budget_settled_above_reservation", "job_id", a.JobID, "attempt", a.Number,
				"provider", a.Provider, "reserved_usd", a.Spend.Reserved.USD(), "cost_usd", cost.USD())
		}
		e.release(ctx, after.Owner, a.Spend.Key, a.Spend.Reserved, cost)
	}
	if job.UnlaunchedReservation(before, after) {
		e.release(ctx, after.Owner, after.Reservation.Key, after.Reservation.Reserved, 0)
	}
}

// SetBudget sets an owner's own amount (nil: the deployment's again).
func (e *Engine) SetBudget(ctx context.Context, owner string, amount *job.Money) (job.OwnerUsage, error) {
	if !e.budget.Enabled() {
		return job.OwnerUsage{}, ErrNoBudgets
	}
	return e.owners.SetBudget(ctx, owner, job.OwnBudget{Amount: amount}, e.budget, e.now())
}

// ErrNoBudgets: the deployment budgets no spend, so no owner's can be set.
var ErrNoBudgets = errors.New("this deployment has no budget period")

// ListOwners is one page of every owner's record, for operators.
func (e *Engine) ListOwners(ctx context.Context, limit int, cursor string) ([]job.OwnerUsage, string, error) {
	if e.owners == nil {
		return nil, "", nil
	}
	return e.owners.ListOwners(ctx, limit, cursor)
}
