package lifecycle

import (
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// AttemptRequestForTest is attemptRequest, for the loopback settlement tests.
func AttemptRequestForTest(j job.Job, jt JobType, a job.Attempt) (provider.Request, error) {
	return attemptRequest(j, jt, a)
}

// RequestDigestForTest is requestDigest.
func RequestDigestForTest(j job.Job, jt JobType, a job.Attempt) string {
	return requestDigest(j, jt, a)
}
