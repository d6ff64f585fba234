package lifecycle

import "github.com/onejob/onejob/internal/job"

// Error names of the task functions beyond the attempt signals
// (job.Signals): the state machine's Retry and Catch match exactly these
// strings (statemachine/onejob.asl.json).
const (
	// ErrNameStoreUnavailable: the store could not be reached; retried.
	ErrNameStoreUnavailable = "StoreUnavailable"
	// ErrNameStoreRefused: the store refused for good (ErrRefused): the
	// execution ends for an operator, never as unknown.
	ErrNameStoreRefused = "StoreRefused"
	// ErrNameUnknownJobType: this build does not know the job's type.
	ErrNameUnknownJobType = "UnknownJobType"
	// ErrNameJobNotFound: the execution names no job.
	ErrNameJobNotFound = "JobNotFound"
)

// ErrorNames lists every name a task may return.
func ErrorNames() []string {
	var out []string
	for _, s := range job.Signals() {
		out = append(out, string(s))
	}
	return append(out, ErrNameStoreUnavailable, ErrNameStoreRefused, ErrNameUnknownJobType, ErrNameJobNotFound)
}

// TaskError is a task failure with the name the state machine routes on.
type TaskError struct {
	Name    string
	Message string
}

func (e *TaskError) Error() string { return e.Name + ": " + e.Message }

// ErrorName is the ASL error name.
func (e *TaskError) ErrorName() string { return e.Name }
