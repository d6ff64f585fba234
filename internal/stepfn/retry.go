package stepfn

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// How a start survives throttling. StartExecution has a per-account quota
// (a bucket that refills a few hundred per second); past it, or on a
// transient fault, the call fails. The API therefore tries again at once,
// a few times; a start still refused is handed to the sweeper function
// (lifecycle.HandoffStarter), which tries it again at once for a few
// seconds more (Sweeper.Prompt); the scheduled sweep catches up on what is
// left, slowing down while it is throttled.

// APIStartAttempts is how many times the API tries one start.
const APIStartAttempts = 6

// APIStartTimeout bounds the API's whole start, retries included: the create
// answers within it however throttled Step Functions is.
const APIStartTimeout = 2 * time.Second

// APIRetryer is the API's retry of StartExecution: full jitter under a small
// cap (at most 250 ms between tries), on throttling and transient faults
// only, as the SDK classifies them.
func APIRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = APIStartAttempts
		o.MaxBackoff = 250 * time.Millisecond
		// Lambda gives each instance one request at a time, so a client's
		// retry quota would only be spent by the request at hand: the
		// bound is MaxAttempts and APIStartTimeout.
		o.RateLimiter = ratelimit.None
	})
}

// HandoffAttempts and HandoffMaxBackoff are the sweeper's tries of one
// handed-off start: full jitter under a 500 ms cap between tries (4.5 s at
// most in all; a quarter of a second, on average, while half the calls
// are throttled); HandoffStartTimeout bounds them.
const (
	HandoffAttempts     = 10
	HandoffMaxBackoff   = 500 * time.Millisecond
	HandoffStartTimeout = 15 * time.Second
)

// HandoffRetryer is the sweeper's retry of a start the API handed off: as
// the API's, with more tries and longer pauses. Not adaptive: it starts one
// job, and a client slowed down by an earlier throttle would hold that job
// for seconds before its first try.
func HandoffRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = HandoffAttempts
		o.MaxBackoff = HandoffMaxBackoff
		o.RateLimiter = ratelimit.None
	})
}

// SweepRetryer is the sweeper's: the SDK's adaptive mode, which on
// throttling also slows the rate the client sends at, so a sweep that
// catches up on many jobs backs off instead of pressing on.
func SweepRetryer() aws.Retryer {
	return retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
		o.StandardOptions = append(o.StandardOptions, func(so *retry.StandardOptions) {
			so.MaxAttempts = 10
			so.MaxBackoff = 5 * time.Second
		})
	})
}
