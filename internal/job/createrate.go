package job

import (
	"errors"
	"time"
)

// CreateRate is an owner's create rate: a token bucket of Burst creates,
// refilled at PerMinute a minute, kept as GCRA's theoretical arrival time
// (OwnerUsage.CreateTAT), one number on the owner's record. Zero PerMinute
// is no rate.
type CreateRate struct {
	PerMinute int
	Burst     int
}

// Enabled reports whether a rate applies.
func (c CreateRate) Enabled() bool { return c.PerMinute > 0 }

// Validate refuses a negative rate, and a rate without a burst.
func (c CreateRate) Validate() error {
	if c.PerMinute < 0 || c.Burst < 0 || (c.PerMinute > 0 && c.Burst < 1) {
		return errors.New("a create rate needs creates per minute and a burst of at least 1 (0 per minute: no rate)")
	}
	return nil
}

// Interval is the time one create's token takes to refill, in whole
// milliseconds (as the store keeps the arrival time; at least one).
func (c CreateRate) Interval() time.Duration {
	return max(time.Millisecond, (time.Minute / time.Duration(max(1, c.PerMinute))).Truncate(time.Millisecond))
}

// Tolerance is how far ahead of now the arrival time may run: the burst
// less the create being decided.
func (c CreateRate) Tolerance() time.Duration { return time.Duration(max(0, c.Burst-1)) * c.Interval() }

// RateSpend is one create's spend of its owner's bucket, as the store's
// conditional write of the owner's record carries it: with the bucket
// full (no arrival time, or one not after Now) the arrival time becomes
// Now plus Interval; otherwise, while it is at most Now plus Tolerance, it
// moves Interval later. Past that the create is refused, nothing written.
type RateSpend struct {
	Now       time.Time
	Interval  time.Duration
	Tolerance time.Duration
}

// Spend is what a create at now spends; nil when no rate applies.
func (c CreateRate) Spend(now time.Time) *RateSpend {
	if !c.Enabled() {
		return nil
	}
	return &RateSpend{Now: now.UTC().Truncate(time.Millisecond), Interval: c.Interval(), Tolerance: c.Tolerance()}
}

// Full reports whether the bucket is full for s: no arrival time ahead.
func (s RateSpend) Full(tat time.Time) bool { return !tat.After(s.Now) }

// Allows reports whether a create may spend at arrival time tat.
func (s RateSpend) Allows(tat time.Time) bool { return !tat.After(s.Now.Add(s.Tolerance)) }

// After is the arrival time once a create spent at tat.
func (s RateSpend) After(tat time.Time) time.Time {
	if s.Full(tat) {
		return s.Now.Add(s.Interval)
	}
	return tat.Add(s.Interval)
}

// RetryAfter is how long a create refused at arrival time tat waits for
// its token (at least a millisecond).
func (s RateSpend) RetryAfter(tat time.Time) time.Duration {
	return max(time.Millisecond, tat.Sub(s.Now.Add(s.Tolerance)))
}

// Remaining is how many creates the bucket holds after arrival time tat.
func (c CreateRate) Remaining(tat, now time.Time) int {
	if !c.Enabled() {
		return 0
	}
	ahead := max(0, tat.Sub(now))
	return max(0, c.Burst-int((ahead+c.Interval()-1)/c.Interval()))
}
