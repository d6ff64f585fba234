package job

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Policy is what the next-step decision needs beyond the job itself.
type Policy struct {
	MaxAttempts int
	// CertifiedFunc reports whether a provider holds a passing
	// certification for the job type's current contract. It is asked only
	// about the providers NeedsCertification names.
	CertifiedFunc func(provider string) bool
	// Wait is the schedule for waiting on a blocked job.
	Wait WaitSchedule
	// AvailableFunc reports whether a provider takes attempts now (its
	// breaker, Available): an unavailable provider is skipped, not tried,
	// and the job waits for it when no other is left. Nil reads the job's
	// own record (Job.Waiting): the providers it waits for are unavailable
	// until its Until.
	AvailableFunc func(provider string) Admission
	// MaxProviderWait bounds how long a job waits for providers before it
	// fails (ClassUnavailable); 0 means DefaultMaxProviderWait.
	MaxProviderWait time.Duration
}

// DefaultMaxProviderWait is how long a job waits for an unavailable
// provider before it fails: long enough for a breaker's capped cooldown to
// end several times over, short enough that a client is told.
const DefaultMaxProviderWait = 30 * time.Minute

func (p Policy) available(j Job, provider string, now time.Time) Admission {
	if p.AvailableFunc != nil {
		return p.AvailableFunc(provider)
	}
	if w := j.Waiting; w != nil && now.Before(w.Until) {
		return Admission{Reason: w.Detail, RetryAt: w.Until}
	}
	return Admission{Allowed: true}
}

func (p Policy) maxProviderWait() time.Duration {
	if p.MaxProviderWait > 0 {
		return p.MaxProviderWait
	}
	return DefaultMaxProviderWait
}

// NeedsCertification reports whether running the job on provider needs a
// passing certification: every fallback and hedge does; the primary is the
// job type's own choice. The primary is the type's (j.Primary), never the
// request's first provider: a client that names a fallback first, or alone,
// does not make it the primary.
func NeedsCertification(j Job, provider string) bool {
	return j.Primary == "" || provider != j.Primary
}

// CertificationsNeeded lists the job's providers that need a certification
// before the job may run on them.
func CertificationsNeeded(j Job) []string {
	var out []string
	for _, p := range j.Providers {
		if NeedsCertification(j, p) {
			out = append(out, p)
		}
	}
	return out
}

func (p Policy) allows(j Job, provider string) bool {
	return !NeedsCertification(j, provider) || (p.CertifiedFunc != nil && p.CertifiedFunc(provider))
}

// Action is the next step of a job's execution.
type Action string

// Actions the state machine routes on.
const (
	ActionRun      Action = "run"
	ActionWait     Action = "wait"
	ActionFinalize Action = "finalize"
	ActionDone     Action = "done"
	// ActionNone: a hedge is not needed.
	ActionNone Action = "none"
)

// Actions lists what Next can decide.
func Actions() []Action { return []Action{ActionRun, ActionWait, ActionFinalize, ActionDone} }

// Plan is the decided next step.
type Plan struct {
	Action   Action
	Provider string        // for run
	Attempt  int           // for run: an existing starting attempt to (re)issue; 0 = start a new one
	Wait     time.Duration // for wait
	Failure  *Failure      // for finalize
	Blocker  int           // the attempt waited on, for wait
	// Waiting is set for a wait on unavailable providers (Blocker 0): what
	// the job records (DecideWait) while it waits.
	Waiting *Waiting
}

// Next decides the next step of a job, in order of precedence:
//  1. done once it has an outcome;
//  2. run an attempt that started but no runner claimed (a lost reply, a
//     redelivery, a hedge whose runner was lost): its provider was not
//     called yet, and claiming it lets exactly one runner call it;
//  3. wait while an attempt is open (on the blocking one if any);
//  4. finalize after a non-retryable failure, or once MaxAttempts is used;
//  5. run the next untried provider it is allowed to (NeedsCertification)
//     and that takes attempts now (AvailableFunc);
//  6. wait while the providers left are unavailable, up to MaxProviderWait
//     since the job began waiting, then finalize (ClassUnavailable);
//  7. finalize with the last error, naming the uncertified providers skipped.
func Next(j Job, p Policy, now time.Time) Plan {
	if j.Status.Terminal() {
		return settleTerminal(j, p, now)
	}
	open := j.Open()
	for _, a := range open {
		if a.State == AttemptStarting {
			return Plan{Action: ActionRun, Provider: a.Provider, Attempt: a.Number}
		}
	}
	if a, wait, ok := remoteWait(open, now); ok {
		// Work at a provider: wait for its webhook, asking by its id when
		// the poll schedule says (Remote.NextPollAt).
		return Plan{Action: ActionWait, Blocker: a.Number, Wait: wait}
	}
	if len(open) > 0 {
		waitOn, since := open[0], open[0].UpdatedAt
		if b, ok := j.Blocker(); ok {
			waitOn = b
			if !b.UnknownSince.IsZero() {
				since = b.UnknownSince
			}
		}
		return Plan{Action: ActionWait, Blocker: waitOn.Number, Wait: p.Wait.Next(now.Sub(since))}
	}
	last := lastFailure(j)
	if a, ok := j.Last(); ok && a.Error != nil && a.Error.Class == ClassNonRetryable {
		return Plan{Action: ActionFinalize, Failure: &last}
	}
	if p.MaxAttempts > 0 && j.Counted() >= p.MaxAttempts {
		return Plan{Action: ActionFinalize, Failure: &last}
	}
	provider, skipped, unavailable := nextProvider(j, p, now)
	if provider != "" {
		return Plan{Action: ActionRun, Provider: provider}
	}
	if len(unavailable) > 0 {
		return waitForProviders(j, p, unavailable, now)
	}
	if len(skipped) > 0 {
		f := Failure{Class: ClassUncertified, Message: "no certified provider left; uncertified for this contract: " +
			strings.Join(skipped, ", ") + "; last error: " + last.Message}
		return Plan{Action: ActionFinalize, Failure: &f}
	}
	return Plan{Action: ActionFinalize, Failure: &last}
}

// lastFailure is the newest attempt's failure, the job's failure when it
// runs out of providers.
func lastFailure(j Job) Failure {
	if last, ok := j.Last(); ok && last.Error != nil {
		return *last.Error
	}
	return Failure{Class: ClassNonRetryable, Message: "no attempt could be made"}
}

// HedgePlan is the decided hedge of a running attempt.
type HedgePlan struct {
	Provider string
	// Attempt is an existing hedge that started but was never claimed (a
	// lost reply, a redelivery), to issue again; 0 means start a new one.
	Attempt int
}

// settleTerminal is the plan for a job with an outcome: done, unless an
// attempt of it is unknown. That one is settled by the reconciler as any
// other (a cancelled job's call may still run at its provider, holding
// it), so its hold and its owner's slot end when it does. A running
// attempt of a finished job (a hedge's loser, a call the cancel found
// running) is left to its runner, which records its end.
func settleTerminal(j Job, p Policy, now time.Time) Plan {
	for _, a := range j.Attempts {
		if a.State == AttemptUnknown && a.Remote == nil {
			return Plan{Action: ActionWait, Blocker: a.Number, Wait: p.Wait.Next(now.Sub(a.UnknownSince))}
		}
	}
	// Work a finished job left at a provider is cancelled there and waited
	// for (by the scheduled pass, up to its deadline), so what it cost is
	// recorded and its owner's slot held until then.
	var remote []Attempt
	for _, a := range j.Attempts {
		if a.Remote != nil && a.State.InFlight() {
			remote = append(remote, a)
		}
	}
	if a, wait, ok := remoteWait(remote, now); ok {
		if a.Remote.CancelAt.IsZero() {
			wait = 0
		}
		return Plan{Action: ActionWait, Blocker: a.Number, Wait: wait}
	}
	return Plan{Action: ActionDone}
}

// NextHedge decides whether to hedge attempt n: only while it is still
// running silently, the job has no outcome, no later attempt exists, and a
// certified provider is left. A hedge of n that started but was never
// claimed is issued again: its provider was not called yet.
func NextHedge(j Job, n int, p Policy) (HedgePlan, bool) {
	if h, ok := j.Attempt(n + 1); ok && h.Hedge && h.State == AttemptStarting {
		return HedgePlan{Provider: h.Provider, Attempt: h.Number}, true
	}
	a, ok := j.Attempt(n)
	if !ok || j.Status.Terminal() || a.State != AttemptRunning || j.AttemptCount != n {
		return HedgePlan{}, false
	}
	if p.MaxAttempts > 0 && j.AttemptCount >= p.MaxAttempts {
		return HedgePlan{}, false
	}
	// A hedge only speeds a job up: it never waits for a provider.
	provider, _, _ := nextProvider(j, p, time.Time{})
	return HedgePlan{Provider: provider}, provider != ""
}

// unavailable is a provider skipped because it takes no attempts now.
type unavailable struct {
	provider string
	why      Admission
}

// nextProvider is the first untried provider the job may run on
// (certified where it must be) that takes attempts now; else the
// uncertified ones it skipped and the certified ones that are unavailable.
func nextProvider(j Job, p Policy, now time.Time) (string, []string, []unavailable) {
	var skipped []string
	var down []unavailable
	for _, prov := range j.Providers {
		if j.Tried(prov) {
			continue
		}
		if !p.allows(j, prov) {
			skipped = append(skipped, prov)
			continue
		}
		if a := p.available(j, prov, now); !a.Allowed {
			down = append(down, unavailable{prov, a})
			continue
		}
		return prov, skipped, down
	}
	return "", skipped, down
}

// waitForProviders is the wait of a job whose providers left are all
// unavailable: until the first of them takes attempts again (a second if
// none says when), or its failure once it waited MaxProviderWait.
func waitForProviders(j Job, p Policy, down []unavailable, now time.Time) Plan {
	since := now
	if j.Waiting != nil && slices.Contains(WaitReasons(), j.Waiting.Reason) {
		since = j.Waiting.Since
	}
	// When every provider refused this owner alone (the others' attempts
	// go through), the reason says so: its share taken, or its back-off;
	// when each refused for its rate, that.
	reason := WaitOwnerBackoff
	rated, budgeted := true, true
	var until time.Time
	var detail []string
	for _, d := range down {
		rated = rated && d.why.Rate
		budgeted = budgeted && d.why.Budget
		switch {
		case !d.why.Owner && !d.why.Share:
			reason = WaitProviders
		case d.why.Share && reason == WaitOwnerBackoff:
			reason = WaitFairShare
		}
		if !d.why.RetryAt.IsZero() && (until.IsZero() || d.why.RetryAt.Before(until)) {
			until = d.why.RetryAt
		}
		detail = append(detail, d.provider+": "+d.why.Reason)
	}
	if rated {
		reason = WaitRateLimited
	}
	if budgeted {
		reason = WaitBudget
	}
	deadline := since.Add(p.maxProviderWait())
	if !now.Before(deadline) {
		f := Failure{Class: ClassUnavailable, Message: fmt.Sprintf("no provider took attempts within %s: %s",
			p.maxProviderWait(), strings.Join(detail, "; "))}
		return Plan{Action: ActionFinalize, Failure: &f}
	}
	if until.IsZero() || !until.After(now) {
		until = now.Add(time.Second)
	}
	until = minTime(until, deadline)
	w := &Waiting{Reason: reason, Since: since.UTC(), Until: until.UTC(), Detail: strings.Join(detail, "; ")}
	return Plan{Action: ActionWait, Wait: until.Sub(now), Waiting: w}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// WaitSchedule spaces out the checks of a blocked job so that waiting costs a
// bounded number of state transitions per day: waits grow through Steps and
// then repeat the last one.
type WaitSchedule struct {
	Steps []time.Duration
}

// DefaultWait checks after 1 min, 15 min, 2 h, then every 8 h: at most six
// checks (18 state transitions) in any day of waiting.
func DefaultWait() WaitSchedule {
	return WaitSchedule{Steps: []time.Duration{time.Minute, 15 * time.Minute, 2 * time.Hour, 8 * time.Hour}}
}

// Next returns the wait after having been blocked for elapsed.
func (w WaitSchedule) Next(elapsed time.Duration) time.Duration {
	if len(w.Steps) == 0 {
		return time.Second
	}
	var sum time.Duration
	for _, s := range w.Steps {
		sum += s
		if elapsed < sum {
			return s
		}
	}
	return w.Steps[len(w.Steps)-1]
}

// ChecksPerDay counts the checks in the worst day of waiting (the first).
func (w WaitSchedule) ChecksPerDay() int {
	var elapsed time.Duration
	n := 0
	for elapsed < 24*time.Hour {
		elapsed += w.Next(elapsed)
		n++
	}
	return n
}

// DefaultOverdueGrace is how long past its job type's timeout an attempt may
// stay running before it counts as overdue: the longest a provider call may
// last, plus a minute for its runner to write the answer.
func DefaultOverdueGrace(callTimeout time.Duration) time.Duration { return callTimeout + time.Minute }

// Overdue returns the attempts still running past their deadline: nothing
// watched them time out (their runner or their execution was lost), so by
// the timeout rule their outcome is unknown. A late answer can still
// complete the job from unknown.
func Overdue(j Job, deadline time.Duration, now time.Time) []int {
	var out []int
	for _, a := range j.Attempts {
		if a.State == AttemptRunning && a.Remote == nil && now.Sub(a.UpdatedAt) > deadline {
			out = append(out, a.Number)
		}
	}
	return out
}
