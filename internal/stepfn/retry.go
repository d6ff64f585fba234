package stepfn

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// How a start survives throttling. StartExecution has a per-account quota
// (a bucket that refills a few hundred per second); past it, or on a
// transient fault, the call fails and a created job would wait for the
// sweeper. The API therefore tries again at once, a few times, and the
// sweeper catches up on what is left, slowing down while it is throttled.

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
