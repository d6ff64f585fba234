package stack

import (
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/job"
)

// ProviderKey is the key attempt n of a job carries to the providers of
// this stack: in its own deployment namespace (deploy.Namespace).
func (s *Stack) ProviderKey(jobID string, n int) string {
	return job.ProviderKeyIn(deploy.Namespace(s.Tables.Jobs), jobID, n)
}
