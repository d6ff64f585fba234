package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// An asynchronous attempt (its provider a provider.Async) lives as: launched
// and claimed as any attempt; submitted (the only call whose answer can be
// lost); the provider's id recorded on the attempt in the next write
// (job.DecideSubmitted, with the work's deadline), before anything else;
// then the run ends its execution with the job parked (job.Parked): nothing
// of onejob runs, and no state transition is spent, until the provider's
// webhook (ProviderEvent) or the scheduled pass (Poller: a poll by id on
// job.PollSchedule) reports the work ended. The result is applied through
// the same compare-and-swap as a live answer, and whoever applied it
// starts the execution the job then needs (wake). A cancelled job's work
// is cancelled at its provider, once; work past its deadline is given up
// (job.DecideAbandon).

// submit hands attempt a to its asynchronous provider and records the
// work's id; work that ended at once is applied at once.
// tier is the one the provider runs the job at (provider.RunTier: the
// longest of its windows the job may wait).
func (w *Tasks) submit(ctx context.Context, j job.Job, jt JobType, a job.Attempt, p provider.Async, req provider.Request, tier job.Tier) (job.Job, error) {
	callCtx, cancel := context.WithTimeout(ctx, min(w.cfg.CallTimeout, w.cfg.SettleTimeout))
	defer cancel()
	start := w.now()
	work, err := p.Submit(callCtx, req, string(tier))
	latency := w.now().Sub(start)
	w.log.InfoContext(ctx, "provider_submitted", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider,
		"latency_ms", latency.Milliseconds(), "ok", err == nil, "provider_work_id", work.ID, "tier", string(tier))
	w.observeCall(ctx, j.Owner, a, err)
	if err != nil {
		// Ambiguous (the answer was lost): the attempt is unknown, and
		// blocks every other until its work is found (ProviderEvent) or
		// settled.
		return w.callFailed(ctx, j, a, err, job.Call{Usage: &job.Usage{Latency: latency}})
	}
	after, err := w.cfg.Engine.SubmittedOn(ctx, j, a.Number, job.Remote{ID: work.ID, Status: work.Status, Tier: tier, SubmittedAt: start}, w.remotePolicy(a.Provider))
	if err != nil || !work.Ended {
		return after, err
	}
	a, _ = after.Attempt(a.Number)
	return w.ended(ctx, after, jt, a, work, req)
}

// ended applies ended work to attempt a: its answer through the job's
// compare-and-swap (checked against the contract as a live answer is), its
// failure, or its cancel; what the provider billed is recorded either way.
func (w *Tasks) ended(ctx context.Context, j job.Job, jt JobType, a job.Attempt, work provider.Work, req provider.Request) (job.Job, error) {
	c := job.Call{ProviderRequestID: work.ID, WorkStatus: work.Status}
	if work.Usage != nil {
		c.Usage = &job.Usage{InputTokens: work.Usage.InputTokens, OutputTokens: work.Usage.OutputTokens}
		if a.Remote != nil {
			// The work's latency: from its submit to when its end was heard.
			c.Usage.Latency = w.now().Sub(a.Remote.SubmittedAt)
		}
	}
	if work.Cancelled {
		return w.cfg.Engine.RemoteCancelledOn(ctx, j, a.Number, c)
	}
	resp, err := work.Outcome(req)
	if errors.Is(err, provider.ErrForeignWork) {
		// Not this attempt's (another key, or none): nothing of it is
		// applied, and it is asked again on its schedule, never sooner
		// (review N-M1); its deadline ends the wait.
		w.log.WarnContext(ctx, "provider_work_foreign", "job_id", j.ID, "attempt", a.Number, "provider_work_id", work.ID, "error", err.Error())
		return w.cfg.Engine.HeardOn(ctx, j, a.Number, a.Remote.Status, w.cfg.Poll)
	}
	if err != nil {
		return w.callFailed(ctx, j, a, err, c)
	}
	if resp.Model != "" && c.Usage != nil {
		c.Usage.Model = resp.Model
	}
	return w.answered(ctx, j, jt, a, resp, c)
}

func (w *Tasks) asyncProvider(name string) (provider.Async, bool) {
	p, ok := w.cfg.Providers.Get(name)
	if !ok {
		return nil, false
	}
	ap, ok := p.(provider.Async)
	return ap, ok
}

// Errors ProviderEvent reports to the edge.
var (
	// ErrNoSuchAsyncProvider: the route names no asynchronous provider.
	ErrNoSuchAsyncProvider = errors.New("no asynchronous provider of that name")
	// ErrEventRefused wraps a delivery that failed its provider's
	// verification (forged, stale, malformed): nothing changed.
	ErrEventRefused = errors.New("provider event refused")
	// ErrEventUnverified also wraps a refused delivery that carries no
	// valid signature of its provider: headers missing, no signature
	// matching its body, or a timestamp out of tolerance (a replay).
	ErrEventUnverified = errors.New("provider event not verified")
)

// forgetTimeout bounds giving back a delivery whose taking failed.
const forgetTimeout = 5 * time.Second

// EventOutcome says what an inbound provider event did.
type EventOutcome string

// Event outcomes.
const (
	// EventApplied: the work's end was applied to its attempt (won, lost
	// the race, failed or cancelled), or its status recorded.
	EventApplied EventOutcome = "applied"
	// EventFound: the work of an attempt whose submit's answer was lost
	// was found by the key it carries, and recorded on it.
	EventFound EventOutcome = "found"
	// EventDuplicate: a copy of a delivery taken already (the same
	// webhook-id while its signature verifies), or the attempt had ended
	// already: nothing changed.
	EventDuplicate EventOutcome = "duplicate"
	// EventIgnored: the work is no attempt of this deployment's, or not
	// the work its attempt recorded: nothing changed.
	EventIgnored EventOutcome = "ignored"
)

// ProviderEvent takes a webhook delivery from an asynchronous provider:
// verified with the provider's signing scheme (a refused one is
// ErrEventRefused and changes nothing), it names work, which is read from
// the provider by its id — never taken from the delivery — and matched to
// its attempt by the key the provider keeps with it. Its end is applied
// through the same compare-and-swap as a live answer; a late delivery
// finds its attempt ended and changes nothing. A verified delivery is
// taken first (InboundLog, one conditional write): a copy of one taken
// already is a duplicate at once, without asking the provider, so a
// captured delivery replayed within its signature's life costs no
// provider read and no job read (review N-L1). Verification comes before
// that write, so unsigned requests cannot fill the log.
func (w *Tasks) ProviderEvent(ctx context.Context, providerName string, header http.Header, body []byte) (EventOutcome, error) {
	p, ok := w.asyncProvider(providerName)
	if !ok {
		return "", ErrNoSuchAsyncProvider
	}
	now := w.now()
	d, err := p.Event(header, body, now)
	if err != nil {
		var ee *provider.EventError
		if errors.As(err, &ee) {
			w.log.WarnContext(ctx, "provider_event_refused", "provider", providerName, "fault", ee.Fault)
			switch ee.Fault {
			case provider.FaultIgnored:
				return EventIgnored, nil
			case provider.FaultForged, provider.FaultStale:
				return "", fmt.Errorf("%w: %w: %w", ErrEventRefused, ErrEventUnverified, err)
			}
		}
		return "", fmt.Errorf("%w: %w", ErrEventRefused, err)
	}
	if w.cfg.Inbound == nil || d.ID == "" {
		return "", fmt.Errorf("lifecycle: cannot take %s's delivery (no inbound log, or no delivery id)", providerName)
	}
	in := InboundDelivery{Provider: providerName, ID: d.ID, Expires: d.Expires, Token: NewInboundToken()}
	taken, err := w.cfg.Inbound.TakeInbound(ctx, in, now)
	if err != nil {
		return "", fmt.Errorf("take delivery %s of %s: %w", d.ID, providerName, err)
	}
	if !taken {
		w.log.InfoContext(ctx, "provider_event", "provider", providerName, "webhook_id", d.ID, "provider_work_id", d.WorkID,
			"outcome", string(EventDuplicate), "taken_before", true)
		return EventDuplicate, nil
	}
	outcome, err := w.takeEvent(ctx, p, providerName, d)
	if err != nil {
		// No 2xx: the provider sends it again, and that copy must be
		// taken, not answered as a duplicate.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
		defer cancel()
		if ferr := w.cfg.Inbound.ForgetInbound(fctx, in); ferr != nil {
			w.log.WarnContext(ctx, "provider_event_not_forgotten", "provider", providerName, "webhook_id", d.ID,
				"expires_at", d.Expires, "error", ferr.Error())
		}
	}
	return outcome, err
}

// takeEvent reads the work a delivery taken names and applies it.
func (w *Tasks) takeEvent(ctx context.Context, p provider.Async, providerName string, d provider.EventDelivery) (EventOutcome, error) {
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.SettleTimeout)
	defer cancel()
	work, err := p.Retrieve(callCtx, d.WorkID)
	if err != nil {
		// The provider redelivers an event it got no 2xx for.
		return "", fmt.Errorf("%w: read work %s from %s: %w", ErrUnavailable, d.WorkID, providerName, err)
	}
	outcome, err := w.applyEvent(ctx, providerName, work)
	w.log.InfoContext(ctx, "provider_event", "provider", providerName, "webhook_id", d.ID, "provider_work_id", work.ID,
		"status", work.Status, "outcome", string(outcome))
	return outcome, err
}

func (w *Tasks) applyEvent(ctx context.Context, providerName string, work provider.Work) (EventOutcome, error) {
	key, ok := strings.CutPrefix(work.Key, w.cfg.Namespace+":")
	if w.cfg.Namespace == "" {
		key, ok = work.Key, true
	}
	jobID, n, valid := job.ParseAttemptKey(key)
	if !ok || !valid {
		return EventIgnored, nil
	}
	j, jt, err := w.load(ctx, jobID)
	if errors.Is(err, job.ErrNotFound) {
		return EventIgnored, nil
	}
	if err != nil {
		return "", err
	}
	a, ok := j.Attempt(n)
	if !ok || a.Provider != providerName || a.SentKey() != work.Key {
		return EventIgnored, nil
	}
	if !a.State.Open() {
		// Its end was applied before: the run it may need is started
		// again (one name, one execution), in case its applier could not.
		return EventDuplicate, w.wake(ctx, j)
	}
	outcome := EventApplied
	if a.Remote == nil {
		// The submit's answer was lost: the work carrying the attempt's
		// key is its, found again.
		if j, err = w.cfg.Engine.SubmittedOn(ctx, j, n, job.Remote{ID: work.ID, Status: work.Status, Tier: j.Tier.OrNow(), Found: true}, w.remotePolicy(a.Provider)); err != nil {
			return "", err
		}
		a, _ = j.Attempt(n)
		outcome = EventFound
	}
	if a.Remote == nil || a.Remote.ID != work.ID {
		return EventIgnored, nil
	}
	req, err := attemptRequest(j, jt, a)
	if err != nil {
		return "", err
	}
	if !work.Ended {
		_, err = w.cfg.Engine.HeardOn(ctx, j, n, work.Status, w.cfg.Poll)
		return outcome, err
	}
	if j, err = w.ended(ctx, j, jt, a, work, req); err != nil {
		return "", err
	}
	return outcome, w.wake(ctx, j)
}

// SubmittedOn records the work attempt n's provider accepted
// (job.DecideSubmitted).
func (e *Engine) SubmittedOn(ctx context.Context, j job.Job, n int, r job.Remote, p job.RemotePolicy) (job.Job, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideSubmitted(j, n, r, p, e.now()) })
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		e.log.InfoContext(ctx, "attempt_submitted", "job_id", j.ID, "attempt", n, "provider", a.Provider,
			"provider_work_id", r.ID, "found", r.Found, "next_poll_at", a.Remote.NextPollAt, "deadline", a.Remote.Deadline)
	}
	return j, err
}

// HeardOn records what was heard of attempt n's open work and when to ask
// next (job.DecideHeard).
func (e *Engine) HeardOn(ctx context.Context, j job.Job, n int, status string, s job.PollSchedule) (job.Job, error) {
	_, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideHeard(j, n, status, s, e.now()) })
	return j, err
}

// CancelRemoteOn records that attempt n's work is being cancelled at its
// provider (job.DecideCancelRemote); recorded reports that this call
// wrote it, so that its caller alone asks the provider (once).
func (e *Engine) CancelRemoteOn(ctx context.Context, j job.Job, n int, p job.RemotePolicy) (_ job.Job, recorded bool, _ error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideCancelRemote(j, n, p, e.now()) })
	return j, err == nil && !t.Noop(), err
}

// AbandonOn ends attempt n, whose work outlived its deadline
// (job.DecideAbandon); its job goes on, or settles, as after any failure.
func (e *Engine) AbandonOn(ctx context.Context, j job.Job, n int) (job.Job, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideAbandon(j, n, e.now()) })
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		e.events.AttemptAbandoned(ctx, j, a)
		e.log.WarnContext(ctx, "attempt_abandoned", "job_id", j.ID, "owner", j.Owner, "attempt", n, "provider", a.Provider,
			"provider_work_id", a.Remote.ID, "deadline", a.Remote.Deadline, "job_status", string(j.Status), "reason", a.Error.Message)
	}
	return j, err
}

// RemoteCancelledOn ends attempt n, whose provider confirmed the cancel
// (job.DecideRemoteCancelled).
func (e *Engine) RemoteCancelledOn(ctx context.Context, j job.Job, n int, c job.Call) (job.Job, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideRemoteCancelled(j, n, c, e.now()) })
	if err == nil && !t.Noop() {
		a, _ := j.Attempt(n)
		e.log.InfoContext(ctx, "attempt_cancelled_at_provider", "job_id", j.ID, "attempt", n, "provider", a.Provider)
	}
	return j, err
}
