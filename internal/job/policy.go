package job

import (
	"fmt"
	"strings"
	"time"
)

// Policy is what the next-step decision needs beyond the job itself.
type Policy struct {
	MaxAttempts int
	// Certified reports whether a provider holds a passing certification for
	// the job type's current contract. Fallbacks and hedges need one; the
	// primary (the job's first provider) is the type's own choice.
	Certified func(provider string) bool
	// Wait is the schedule for waiting on a blocked job.
	Wait WaitSchedule
}

// Action is the next step of a job's execution.
type Action string

// Actions the state machine routes on.
const (
	ActionRun      Action = "run"
	ActionWait     Action = "wait"
	ActionFinalize Action = "finalize"
	ActionDone     Action = "done"
)

// Plan is the decided next step.
type Plan struct {
	Action   Action
	Provider string        // for run
	Attempt  int           // for run: an existing starting attempt to (re)issue; 0 = start a new one
	Wait     time.Duration // for wait
	Failure  *Failure      // for finalize
	Blocker  int           // the attempt waited on, for wait
}

// UncertifiedError names providers that were skipped for lack of a
// certification: onejob never fails over to an unproven provider.
type UncertifiedError struct {
	Providers []string
}

func (e *UncertifiedError) Error() string {
	return fmt.Sprintf("no certified provider left; uncertified for this contract: %s", strings.Join(e.Providers, ", "))
}

// Next decides the next step of a job: done once it has an outcome; wait
// while an attempt is open; otherwise run the next untried provider, or
// finalize with the last error when none is left.
func Next(j Job, p Policy, now time.Time) Plan {
	if j.Status.Terminal() {
		return Plan{Action: ActionDone}
	}
	if last, ok := j.Last(); ok && last.State == AttemptStarting && len(j.Open()) == 1 {
		// Started but never claimed by a runner (a lost reply, a redelivery):
		// the provider was not called yet, so issuing it again is safe.
		return Plan{Action: ActionRun, Provider: last.Provider, Attempt: last.Number}
	}
	if open := j.Open(); len(open) > 0 {
		since := open[0].UpdatedAt
		if b, ok := j.Blocker(); ok {
			open[0] = b
			if !b.UnknownSince.IsZero() {
				since = b.UnknownSince
			}
		}
		return Plan{Action: ActionWait, Blocker: open[0].Number, Wait: p.Wait.Next(now.Sub(since))}
	}
	last, hasLast := j.Last()
	lastErr := func() *Failure {
		if hasLast && last.Error != nil {
			f := *last.Error
			return &f
		}
		return &Failure{Class: ClassNonRetryable, Message: "no attempt could be made"}
	}
	if hasLast && last.Error != nil && last.Error.Class == ClassNonRetryable {
		return Plan{Action: ActionFinalize, Failure: lastErr()}
	}
	if p.MaxAttempts > 0 && j.AttemptCount >= p.MaxAttempts {
		return Plan{Action: ActionFinalize, Failure: lastErr()}
	}
	provider, skipped := nextProvider(j, p)
	if provider != "" {
		return Plan{Action: ActionRun, Provider: provider}
	}
	if len(skipped) > 0 {
		f := lastErr()
		f.Class = ClassUncertified
		f.Message = (&UncertifiedError{Providers: skipped}).Error() + "; last error: " + lastErr().Message
		return Plan{Action: ActionFinalize, Failure: f}
	}
	return Plan{Action: ActionFinalize, Failure: lastErr()}
}

// NextHedge decides whether to hedge attempt n: only while it is still
// running silently, the job has no outcome, no later attempt exists, and a
// certified provider is left.
func NextHedge(j Job, n int, p Policy) (string, bool) {
	a, ok := j.Attempt(n)
	if !ok || j.Status.Terminal() || a.State != AttemptRunning || j.AttemptCount != n {
		return "", false
	}
	if p.MaxAttempts > 0 && j.AttemptCount >= p.MaxAttempts {
		return "", false
	}
	provider, _ := nextProvider(j, p)
	return provider, provider != ""
}

func nextProvider(j Job, p Policy) (string, []string) {
	var skipped []string
	for i, prov := range j.Providers {
		if j.Tried(prov) {
			continue
		}
		if i == 0 || (p.Certified != nil && p.Certified(prov)) {
			return prov, skipped
		}
		skipped = append(skipped, prov)
	}
	return "", skipped
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

// Overdue returns the attempts still running past their deadline: nothing
// watched them time out (their runner or their execution was lost), so by
// the timeout rule their outcome is unknown. A late answer can still
// complete the job from unknown.
func Overdue(j Job, deadline time.Duration, now time.Time) []int {
	var out []int
	for _, a := range j.Attempts {
		if a.State == AttemptRunning && now.Sub(a.UpdatedAt) > deadline {
			out = append(out, a.Number)
		}
	}
	return out
}
