package job

import (
	"strings"
	"time"
)

// An admission to a provider that declares limits is recorded in the
// provider's health before the attempt goes: the declared rate spent, the
// max_concurrent slot taken, the owner waiting for its share. When the
// store cannot read or write that health (it fails, or throttles the hot
// provider item), admission fails closed for such a provider (review
// N-L5): nothing goes past a limit unrecorded; the job waits
// UnrecordedRetry and asks again, like after any refusal (Next). Only a
// provider that declares none may be admitted on an unreadable health,
// and says so (Admission.Unrecorded, which the caller counts): its
// breaker is advice about where to send work, and a store fault must not
// stop all of it.

// UnrecordedRetry is how soon a job refused because its admission could
// not be recorded asks again.
const UnrecordedRetry = 2 * time.Second

// DeclaresLimits reports whether the provider declares a limit its
// admissions spend or hold, which only the record of each admission
// enforces: a rate, or a max_concurrent counted from admission. (A
// max_concurrent of slow calls only, count_running false, records no
// admission even when the store works: it bounds the calls that hang, as
// last read, and an unreadable health lets its attempts through as it
// does a provider's that declares nothing: the drills' BreakersNeverAct
// declares a million such slots to mean no limit.)
func (p HealthPolicy) DeclaresLimits() bool { return p.Rate.Declared() || p.CountAdmitted }

// declared names the provider's declared limits.
func (p HealthPolicy) declared() string {
	var out []string
	if p.Rate.Requests > 0 && p.Rate.Per > 0 {
		out = append(out, "a rate_limit of requests")
	}
	if p.Rate.Tokens > 0 && p.Rate.Per > 0 {
		out = append(out, "a rate_limit of tokens")
	}
	if p.CountAdmitted {
		out = append(out, "max_concurrent")
	}
	return strings.Join(out, " and ")
}

// AdmitUnread is the admission when the provider's health cannot be read.
// last is the last copy this process read, if it read one (known): an
// operator's forced open in it holds whatever its age (a failing table
// never lifts it: review M3). Then a provider that declares limits is
// refused until UnrecordedRetry from now; any other is admitted,
// unrecorded.
func AdmitUnread(last Health, known bool, p HealthPolicy, now time.Time) Admission {
	if known && last.Forced != nil && last.Forced.State == ProviderOpen {
		return Admission{Reason: "forced open (last known; its health cannot be read now)"}
	}
	if p.DeclaresLimits() {
		return Admission{Reason: "its health cannot be read, and it declares " + p.declared() +
			": no attempt goes to it unrecorded (a store fault; asked again shortly)",
			RetryAt: now.UTC().Add(UnrecordedRetry), Unrecorded: true}
	}
	return Admission{Allowed: true, Unrecorded: true}
}

// AdmitUnrecorded is the admission when the write of the provider's
// health that a decided admission a needed failed (or was throttled): a
// refusal stands (the owner's wait goes unrecorded this time); an
// admission (a rate spent, a slot taken, a probe let through) is refused
// until UnrecordedRetry from now, whatever the provider declares.
func AdmitUnrecorded(a Admission, now time.Time) Admission {
	if !a.Allowed {
		return a
	}
	return Admission{Reason: "its admission could not be recorded in its health (the store failed or throttled the write): " +
		"no attempt goes to it unrecorded (asked again shortly)", RetryAt: now.UTC().Add(UnrecordedRetry), Unrecorded: true}
}
