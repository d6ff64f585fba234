package lifecycle_test

import (
	"context"
	"slices"
	"sync"

	"github.com/onejob/onejob/internal/job"
)

// execStarter is Step Functions' start as the appliers see it: one
// execution per name (job.ExecutionName), a name started twice is no new
// execution. It records the names in the order they were first started.
type execStarter struct {
	mu      sync.Mutex
	started []string
	jobs    map[string]string // name → job ID
}

func newExecStarter() *execStarter { return &execStarter{jobs: map[string]string{}} }

func (s *execStarter) Start(_ context.Context, j job.Job) (bool, error) {
	name := job.ExecutionName(j)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.jobs[name]; ok {
		return false, nil
	}
	s.jobs[name] = j.ID
	s.started = append(s.started, name)
	return true, nil
}

// names are the executions started, oldest first.
func (s *execStarter) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.started)
}
