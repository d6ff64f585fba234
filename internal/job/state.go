package job

// Status is a job's status.
type Status string

// Job statuses.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusUnknown   Status = "unknown"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every job status, for validation at the edges.
func Statuses() []Status {
	return []Status{StatusPending, StatusRunning, StatusUnknown, StatusSucceeded, StatusFailed, StatusCancelled}
}

// Terminal reports whether the job's outcome has been written.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range Statuses() {
		if s == v {
			return true
		}
	}
	return false
}

// AttemptState is the state of one attempt.
type AttemptState string

// Attempt states.
const (
	AttemptStarting  AttemptState = "starting"
	AttemptRunning   AttemptState = "running"
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptUnknown   AttemptState = "unknown"
	AttemptCancelled AttemptState = "cancelled"
	AttemptDiscarded AttemptState = "discarded"
)

// attemptTransitions is the one table of allowed attempt transitions.
var attemptTransitions = map[AttemptState][]AttemptState{
	AttemptStarting: {AttemptRunning, AttemptFailed, AttemptUnknown, AttemptSucceeded, AttemptDiscarded},
	AttemptRunning:  {AttemptSucceeded, AttemptFailed, AttemptUnknown, AttemptDiscarded},
	AttemptUnknown:  {AttemptSucceeded, AttemptFailed, AttemptCancelled, AttemptDiscarded},
}

// CanTransition reports whether an attempt may move from one state to another.
func CanTransition(from, to AttemptState) bool {
	for _, s := range attemptTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Blocking reports whether an attempt in this state forbids starting another:
// a starting attempt may be about to call the provider, an unknown one may
// still be producing side effects.
func (s AttemptState) Blocking() bool { return s == AttemptStarting || s == AttemptUnknown }

// Open reports whether the attempt may still produce a result.
func (s AttemptState) Open() bool {
	return s == AttemptStarting || s == AttemptRunning || s == AttemptUnknown
}

// Terminal reports whether no transition leaves this state.
func (s AttemptState) Terminal() bool { return len(attemptTransitions[s]) == 0 }
