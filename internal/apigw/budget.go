package apigw

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Owners' spend: GET /v1/usage (the caller's own), GET /v1/admin/owners
// (every owner's, paged) and POST /v1/admin/owners/{owner}/budget (an
// operator sets one owner's amount, or returns it to the deployment's).

// Owners is what the usage routes need of the engine.
type Owners interface {
	Usage(ctx context.Context, owner string) (job.OwnerUsage, error)
	ListOwners(ctx context.Context, limit int, cursor string) ([]job.OwnerUsage, string, error)
	SetBudget(ctx context.Context, owner string, amount *job.Money) (job.OwnerUsage, error)
	Budget() job.Budget
}

// usageOwnerView is one owner's counters and spend.
type usageOwnerView struct {
	Owner          string      `json:"owner"`
	UnfinishedJobs int         `json:"unfinished_jobs"`
	HeldRequests   int         `json:"held_requests"`
	Budget         *budgetView `json:"budget,omitempty"`
	Quotas         *quotasView `json:"quotas,omitempty"`
	UpdatedAt      *time.Time  `json:"updated_at,omitempty"`
}

// budgetView is an owner's spend in the current window, in US dollars as
// decimal strings (exact; no float rounding).
type budgetView struct {
	AmountUSD    string    `json:"amount_usd"`
	Own          bool      `json:"own"`
	SpentUSD     string    `json:"spent_usd"`
	ReservedUSD  string    `json:"reserved_usd"`
	RemainingUSD string    `json:"remaining_usd"`
	Reservations int       `json:"reservations"`
	Period       string    `json:"period"`
	WindowEnds   time.Time `json:"window_ends"`
}

type quotasView struct {
	UnfinishedJobs   int `json:"unfinished_jobs,omitempty"`
	HeldRequests     int `json:"held_requests,omitempty"`
	CreatesPerMinute int `json:"creates_per_minute,omitempty"`
	CreateBurst      int `json:"create_burst,omitempty"`
}

func (h *Handler) usageView(u job.OwnerUsage) usageOwnerView {
	v := usageOwnerView{Owner: u.Owner, UnfinishedJobs: u.Unfinished, HeldRequests: u.Holds}
	if !u.UpdatedAt.IsZero() {
		t := u.UpdatedAt
		v.UpdatedAt = &t
	}
	if q := h.jobs.Quotas(); q.Enabled() {
		v.Quotas = &quotasView{UnfinishedJobs: q.UnfinishedJobs, HeldRequests: q.HeldRequests,
			CreatesPerMinute: q.Creates.PerMinute, CreateBurst: q.Creates.Burst}
	}
	if h.owners == nil {
		return v
	}
	b := h.owners.Budget()
	if !b.Enabled() {
		return v
	}
	now := h.now()
	_, ends := b.Window(now)
	// As a reservation would see it: the window and amount brought current.
	ob, _ := job.DecideBudget(u.Budget, b, nil, now)
	held := u.Budget.Held()
	v.Budget = &budgetView{AmountUSD: ob.Amount.USD(), Own: ob.Own, SpentUSD: ob.Spent.USD(), ReservedUSD: held.USD(),
		RemainingUSD: max(0, ob.Headroom).USD(), Reservations: len(u.Budget.Reserved), Period: b.Period.String(), WindowEnds: ends}
	return v
}

// getUsage is the caller's own counters and spend.
func (h *Handler) getUsage(ctx context.Context, r *request) (reply, error) {
	if h.owners == nil {
		return reply{status: http.StatusOK, body: h.usageView(job.OwnerUsage{Owner: r.owner})}, nil
	}
	u, err := h.owners.Usage(ctx, r.owner)
	if err != nil {
		return reply{}, err
	}
	u.Owner = r.owner
	return reply{status: http.StatusOK, body: h.usageView(u)}, nil
}

// ownersPage is one page of every owner's usage.
type ownersPage struct {
	Owners     []usageOwnerView `json:"owners"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

// listOwners is every owner's counters and spend, for operators.
func (h *Handler) listOwners(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("listing every owner's usage")
	}
	p, err := r.page(func(job.Status) bool { return false }, "")
	if err != nil {
		return reply{}, err
	}
	page := ownersPage{Owners: []usageOwnerView{}}
	if h.owners == nil {
		return reply{status: http.StatusOK, body: page}, nil
	}
	us, next, err := h.owners.ListOwners(ctx, p.limit, p.cursor)
	if err != nil {
		return reply{}, err
	}
	for _, u := range us {
		page.Owners = append(page.Owners, h.usageView(u))
	}
	page.NextCursor = next
	return reply{status: http.StatusOK, body: page}, nil
}

// setBudget sets one owner's amount ({"amount_usd": "0.10"}), or returns
// it to the deployment's ({"amount_usd": null}).
func (h *Handler) setBudget(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("setting an owner's budget")
	}
	owner := r.params["owner"]
	if !job.ValidKey(owner) {
		return reply{}, fail(CodeNotFound, "no such owner")
	}
	if h.owners == nil || !h.owners.Budget().Enabled() {
		return reply{}, fail(CodeConflict, "this deployment budgets no spend (set a budget period first)")
	}
	body, err := h.jsonBody(r)
	if err != nil {
		return reply{}, err
	}
	m, errs := members(body, "amount_usd")
	if m == nil {
		return reply{}, invalid(errs...)
	}
	raw, ok := m["amount_usd"]
	var amount *job.Money
	switch {
	case !ok:
		errs = append(errs, FieldError{Pointer: "/amount_usd", Detail: "is required (null returns the owner to the deployment's amount)"})
	case !isNull(raw):
		var s string
		if json.Unmarshal(raw, &s) != nil {
			errs = append(errs, FieldError{Pointer: "/amount_usd", Detail: `must be a decimal string such as "0.10", or null`})
			break
		}
		a, err := job.ParseUSD(s)
		if err != nil || a > maxBudget {
			errs = append(errs, FieldError{Pointer: "/amount_usd", Detail: `must be a decimal string from "0" to "1000000" with at most 9 decimals`})
			break
		}
		amount = &a
	}
	if len(errs) > 0 {
		return reply{}, invalid(errs...)
	}
	u, err := h.owners.SetBudget(ctx, owner, amount)
	if err != nil {
		return reply{}, err
	}
	return reply{status: http.StatusOK, body: h.usageView(u)}, nil
}

// maxBudget bounds an owner's amount: a million dollars a window.
const maxBudget = 1_000_000 * job.NanosPerUSD
