package apigw

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Providers is the providers' health, for operators (a
// *lifecycle.Breakers): every provider's breaker, and an operator's
// override of one.
type Providers interface {
	List(ctx context.Context, providers []string) ([]job.Health, error)
	Force(ctx context.Context, provider string, state job.ProviderState, by, reason string) (job.Health, error)
}

// Incident tools' bounds: one bulk resolution reads at most this many open
// jobs (a page of the operators' listing at a time) and names at most
// maxBulkListed of the attempts it matched; the rest follow with its
// next_cursor.
const (
	maxBulkScan   = 1000
	maxBulkListed = 200
)

type forcedView struct {
	State  string `json:"state"`
	By     string `json:"by"`
	Reason string `json:"reason"`
	At     string `json:"at"`
}

// providerView is one provider's health as operators read it.
type providerView struct {
	Name string `json:"name"`
	// State is what attempts see (an override wins); BreakerState the
	// breaker's own.
	State           string         `json:"state"`
	BreakerState    string         `json:"breaker_state"`
	Since           string         `json:"since,omitempty"`
	Reason          string         `json:"reason,omitempty"`
	OpenUntil       string         `json:"open_until,omitempty"`
	CooldownSeconds int64          `json:"cooldown_seconds,omitempty"`
	Trips           int            `json:"trips"`
	WindowStart     string         `json:"window_start,omitempty"`
	Failures        map[string]int `json:"failures"`
	Held            int            `json:"held"`
	Running         int            `json:"running"`
	Overdue         int            `json:"overdue"`
	BackingOff      []backoffView  `json:"backing_off"`
	Waiting         []string       `json:"waiting"`
	RateWaiting     []string       `json:"rate_waiting"`
	PausedUntil     string         `json:"paused_until,omitempty"`
	Probes          int            `json:"probes"`
	Opened          int            `json:"opened"`
	Forced          *forcedView    `json:"forced,omitempty"`
	UpdatedAt       string         `json:"updated_at,omitempty"`
}

// backoffView is an owner backing off alone at a provider (issue 26).
type backoffView struct {
	Owner    string `json:"owner"`
	Until    string `json:"until"`
	Failures int    `json:"failures"`
}

type providersBody struct {
	Providers []providerView `json:"providers"`
}

func viewProvider(h job.Health) providerView {
	v := providerView{
		Name: h.Provider, State: string(h.Effective()), BreakerState: string(h.Effective()),
		Since: timeView(h.Since), Reason: h.Reason, OpenUntil: timeView(h.OpenUntil), CooldownSeconds: int64(h.Cooldown.Seconds()),
		Trips: h.Trips, WindowStart: timeView(h.WindowStart), Failures: map[string]int{}, Held: len(h.Held),
		Probes: len(h.Probes), Opened: h.Opened, UpdatedAt: timeView(h.UpdatedAt),
	}
	if h.State != "" {
		v.BreakerState = string(h.State)
	}
	v.Running, v.Overdue = len(h.Running), len(h.Overdue)
	v.BackingOff, v.Waiting = []backoffView{}, []string{}
	for _, o := range slices.Sorted(maps.Keys(h.Backoff)) {
		v.BackingOff = append(v.BackingOff, backoffView{Owner: o, Until: timeView(h.Backoff[o]), Failures: h.Owners[o].Failures})
	}
	v.Waiting = append(v.Waiting, slices.Sorted(maps.Keys(h.Waiters))...)
	v.RateWaiting = append([]string{}, slices.Sorted(maps.Keys(h.RateWaiters))...)
	v.PausedUntil = timeView(h.PausedUntil)
	for k, n := range h.Failures {
		v.Failures[string(k)] = n
	}
	if f := h.Forced; f != nil {
		v.Forced = &forcedView{State: string(f.State), By: f.By, Reason: f.Reason, At: timeView(f.At)}
	}
	return v
}

// listProviders lists every provider's health: those the job types name
// and any other the store knows.
func (h *Handler) listProviders(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("reading the providers' health")
	}
	// It takes no parameters, but a query that does not decode is refused
	// as on every other route.
	if _, err := r.query(); err != nil {
		return reply{}, err
	}
	if h.providers == nil {
		return reply{}, fail(CodeNotFound, "this deployment keeps no provider health")
	}
	all, err := h.providers.List(ctx, h.catalog.ProviderNames())
	if err != nil {
		return reply{}, err
	}
	out := providersBody{Providers: make([]providerView, 0, len(all))}
	for _, p := range all {
		out.Providers = append(out.Providers, viewProvider(p))
	}
	return reply{status: http.StatusOK, body: out}, nil
}

// forceProvider sets or lifts an operator's override of a provider's
// breaker, with a required reason; who and when are kept with it.
func (h *Handler) forceProvider(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("forcing a provider open or closed")
	}
	if h.providers == nil {
		return reply{}, fail(CodeNotFound, "this deployment keeps no provider health")
	}
	name := r.params["name"]
	if !job.ValidName(name) || !slices.Contains(h.catalog.ProviderNames(), name) {
		return reply{}, fail(CodeNotFound, "no job type names that provider")
	}
	body, err := h.jsonBody(r)
	if err != nil {
		return reply{}, err
	}
	m, errs := members(body, "state", "reason")
	if m == nil {
		return reply{}, invalid(errs...)
	}
	state, fe := stringMember(m, "state", 16)
	switch {
	case fe != nil:
		errs = append(errs, *fe)
	case state != "open" && state != "closed" && state != "auto":
		errs = append(errs, FieldError{Pointer: "/state", Detail: "must be open, closed or auto (lift the override)"})
	}
	reason, fe := stringMember(m, "reason", maxReasonBytes)
	if fe != nil {
		errs = append(errs, *fe)
	}
	if len(errs) > 0 {
		return reply{}, invalid(errs...)
	}
	forced := job.ProviderState(state)
	if state == "auto" {
		forced = ""
	}
	hl, err := h.providers.Force(ctx, name, forced, r.owner, reason)
	if err != nil {
		return reply{}, err
	}
	h.log.WarnContext(ctx, "provider_forced", "request_id", r.requestID, "provider", name, "state", state, "by", r.owner, "reason", reason)
	return reply{status: http.StatusOK, body: viewProvider(hl)}, nil
}

// bulkAttempt is one attempt a bulk resolution matched, and what became
// of it.
type bulkAttempt struct {
	JobID        string `json:"job_id"`
	Owner        string `json:"owner"`
	Attempt      int    `json:"attempt"`
	UnknownSince string `json:"unknown_since"`
	// Result is would_resolve (a dry run), resolved, or conflict (it ended
	// or was resolved meanwhile: left as it is).
	Result string `json:"result"`
}

type bulkBody struct {
	DryRun     bool          `json:"dry_run"`
	Matched    int           `json:"matched"`
	Resolved   int           `json:"resolved"`
	Conflicts  int           `json:"conflicts"`
	Scanned    int           `json:"scanned"`
	Attempts   []bulkAttempt `json:"attempts"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// bulkQuery is what a bulk resolution selects and does.
type bulkQuery struct {
	provider   string
	from, to   time.Time // unknown since, [from, to); zero: open-ended
	resolution job.Resolution
	dryRun     bool
	cursor     string
}

// resolveAttempts resolves every unknown attempt of one provider that
// became unknown within a time window — an incident's tool. Each attempt
// is its own conditional write (job.DecideResolve: idempotent, one
// resolution applies, audited with who, when and why); a dry run only
// counts. A request reads at most maxBulkScan open jobs; next_cursor
// continues.
func (h *Handler) resolveAttempts(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("resolving attempts")
	}
	q, err := decodeBulk(h, r)
	if err != nil {
		return reply{}, err
	}
	out := bulkBody{DryRun: q.dryRun, Attempts: []bulkAttempt{}}
	cursor := q.cursor
	for out.Scanned < maxBulkScan {
		page, err := h.jobs.ListOpen(ctx, lifecycle.OpenQuery{CreatedBefore: h.now().Add(time.Minute), Limit: lifecycle.MaxPageSize, Cursor: cursor})
		if err != nil {
			return reply{}, err
		}
		for _, j := range page.Jobs {
			out.Scanned++
			for _, a := range j.Attempts {
				if a.State != job.AttemptUnknown || a.Provider != q.provider || !within(a.UnknownSince, q.from, q.to) {
					continue
				}
				out.Matched++
				b := bulkAttempt{JobID: j.ID, Owner: j.Owner, Attempt: a.Number, UnknownSince: timeView(a.UnknownSince), Result: "would_resolve"}
				if !q.dryRun {
					res := q.resolution
					res.By = r.owner
					after, err := h.jobs.ResolveOn(ctx, j, a.Number, res)
					var conflict *job.ResolutionConflictError
					switch {
					case errors.As(err, &conflict):
						out.Conflicts++
						b.Result = "conflict: " + conflict.Error()
					case err != nil:
						return reply{}, err
					default:
						out.Resolved++
						b.Result = "resolved"
						j = after
					}
				}
				if len(out.Attempts) < maxBulkListed {
					out.Attempts = append(out.Attempts, b)
				}
			}
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	out.NextCursor = cursor
	h.log.WarnContext(ctx, "attempts_bulk_resolved", "request_id", r.requestID, "provider", q.provider, "by", r.owner,
		"reason", q.resolution.Reason, "outcome", string(q.resolution.Outcome), "dry_run", q.dryRun, "matched", out.Matched,
		"resolved", out.Resolved, "conflicts", out.Conflicts)
	return reply{status: http.StatusOK, body: out}, nil
}

// within reports whether t lies in [from, to), either end open when zero.
func within(t, from, to time.Time) bool {
	return (from.IsZero() || !t.Before(from)) && (to.IsZero() || t.Before(to))
}

func decodeBulk(h *Handler, r *request) (bulkQuery, error) {
	body, err := h.jsonBody(r)
	if err != nil {
		return bulkQuery{}, err
	}
	m, errs := members(body, "provider", "unknown_since_from", "unknown_since_to", "outcome", "reason", "dry_run", "cursor")
	if m == nil {
		return bulkQuery{}, invalid(errs...)
	}
	var q bulkQuery
	provider, fe := stringMember(m, "provider", 64)
	switch {
	case fe != nil:
		errs = append(errs, *fe)
	case !job.ValidName(provider):
		errs = append(errs, FieldError{Pointer: "/provider", Detail: "must be a provider's name"})
	}
	q.provider = provider
	for _, f := range []struct {
		name string
		into *time.Time
	}{{"unknown_since_from", &q.from}, {"unknown_since_to", &q.to}} {
		if _, given := m[f.name]; !given {
			continue
		}
		s, fe := stringMember(m, f.name, 64)
		if fe != nil {
			errs = append(errs, *fe)
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			errs = append(errs, FieldError{Pointer: "/" + f.name, Detail: "must be an RFC 3339 date-time"})
		}
		*f.into = t
	}
	if !q.from.IsZero() && !q.to.IsZero() && !q.from.Before(q.to) {
		errs = append(errs, FieldError{Pointer: "/unknown_since_to", Detail: "must be after unknown_since_from"})
	}
	outcome, fe := stringMember(m, "outcome", 32)
	switch {
	case fe != nil:
		errs = append(errs, *fe)
	case outcome != string(job.AttemptFailed) && outcome != string(job.AttemptCancelled):
		errs = append(errs, FieldError{Pointer: "/outcome", Detail: "must be failed or cancelled (a succeeded result is one attempt's: resolve it alone)"})
	}
	reason, fe := stringMember(m, "reason", maxReasonBytes)
	if fe != nil {
		errs = append(errs, *fe)
	}
	q.resolution = job.Resolution{Outcome: job.AttemptState(outcome), Reason: reason}
	if raw, given := m["dry_run"]; given {
		switch string(raw) {
		case "true":
			q.dryRun = true
		case "false":
		default:
			errs = append(errs, FieldError{Pointer: "/dry_run", Detail: "must be true or false"})
		}
	}
	if _, given := m["cursor"]; given {
		c, fe := stringMember(m, "cursor", maxCursorBytes)
		if fe != nil {
			errs = append(errs, *fe)
		}
		q.cursor = c
	}
	if len(errs) > 0 {
		return bulkQuery{}, invalid(errs...)
	}
	return q, nil
}

// jsonBody is a request's JSON body, checked: a JSON media type, valid
// JSON without duplicate keys, within the size limit.
func (h *Handler) jsonBody(r *request) ([]byte, error) {
	body, err := rawBody(r.ev)
	if err != nil {
		return nil, err
	}
	if err := requireJSON(r.headers["content-type"]); err != nil {
		return nil, err
	}
	if err := checkJSON(body); err != nil {
		return nil, err
	}
	return body, nil
}

// waitingView says why an open job waits, for polling clients and
// operators: an unknown attempt (the provider is asked again on a
// back-off), or providers that take no attempts now.
type waitingView struct {
	Reason   string `json:"reason"`
	Since    string `json:"since,omitempty"`
	Until    string `json:"until,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Detail is for operators (it may name an operator's override).
	Detail string `json:"detail,omitempty"`
}

// waitingOf is why j waits, or nil.
func (v viewer) waitingOf(j job.Job) *waitingView {
	if j.Status.Terminal() {
		return nil
	}
	if b, ok := j.Blocker(); ok && b.State == job.AttemptUnknown {
		return &waitingView{Reason: "attempt_unknown", Since: timeView(b.UnknownSince), Attempt: b.Number, Provider: b.Provider}
	}
	if w := j.Waiting; w != nil {
		out := &waitingView{Reason: string(w.Reason), Since: timeView(w.Since), Until: timeView(w.Until)}
		if v.admin {
			out.Detail = w.Detail
		}
		return out
	}
	return nil
}

// waitingRetryAfter is how long a client should wait before asking about
// a job that waits for providers: until they may take it, at least a
// second; false for any other job.
func waitingRetryAfter(j job.Job, now time.Time) (int, bool) {
	if j.Status.Terminal() || j.Waiting == nil || len(j.Open()) > 0 {
		return 0, false
	}
	s := int(j.Waiting.Until.Sub(now).Seconds() + 0.999)
	return max(1, s), true
}
