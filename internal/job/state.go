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

// AttemptStates lists every attempt state.
func AttemptStates() []AttemptState {
	return []AttemptState{AttemptStarting, AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptUnknown,
		AttemptCancelled, AttemptDiscarded}
}

// Edge is one allowed attempt transition and the decisions that make it.
type Edge struct {
	From, To AttemptState
	By       []string // the Decide functions (and why), for docs and tests
}

// attemptEdges is the one table of allowed attempt transitions: every
// decision moves an attempt through it (moveAttempt), and the state
// diagram in docs/ is generated from it.
var attemptEdges = []Edge{
	{AttemptStarting, AttemptRunning, []string{"DecideRunning (a runner claimed it)", "DecideLaunch (started and claimed by its runner in one write)"}},
	{AttemptStarting, AttemptFailed, []string{"DecideUnknown (timed out before any runner claimed it: the provider was never called)"}},
	{AttemptStarting, AttemptDiscarded, []string{"DecideRunning (its job finished before a runner claimed it)"}},
	{AttemptRunning, AttemptSucceeded, []string{"DecideComplete (its result won)"}},
	{AttemptRunning, AttemptFailed, []string{"DecideAttemptFailed", "DecideAbandon (its work at a provider outlived its deadline)",
		"DecideBatched (its job ended before its batch line was sent)"}},
	{AttemptRunning, AttemptUnknown, []string{"DecideUnknown (timed out)", "DecideAttemptFailed (ambiguous)"}},
	{AttemptRunning, AttemptDiscarded, []string{"DecideComplete (its result lost the race)"}},
	{AttemptRunning, AttemptCancelled, []string{"DecideRemoteCancelled (its job was cancelled and its provider confirmed it cancelled the work)",
		"DecideCallCancelled (its job was cancelled while its call streamed: the run closed the stream)"}},
	{AttemptUnknown, AttemptSucceeded, []string{"DecideComplete (a late result won)", "DecideResolve",
		"DecideSettle (the provider's answer, asked again)"}},
	{AttemptUnknown, AttemptFailed, []string{"DecideAttemptFailed (a late failure)", "DecideResolve",
		"DecideSettle (refused, no trace past the provider's processing time, or the type's deadline)",
		"DecideAbandon (its work at a provider outlived its deadline)"}},
	{AttemptUnknown, AttemptCancelled, []string{"DecideResolve",
		"DecideCallCancelled (timed out while its call streamed, then its job was cancelled: the run closed the stream)"}},
	{AttemptUnknown, AttemptDiscarded, []string{"DecideComplete (a late result lost the race)", "DecideResolve",
		"DecideSettle (its answer lost the race)"}},
}

// AttemptEdges returns the table of allowed attempt transitions.
func AttemptEdges() []Edge {
	out := make([]Edge, len(attemptEdges))
	for i, e := range attemptEdges {
		out[i] = Edge{From: e.From, To: e.To, By: append([]string(nil), e.By...)}
	}
	return out
}

// CanTransition reports whether an attempt may move from one state to another.
func CanTransition(from, to AttemptState) bool {
	for _, e := range attemptEdges {
		if e.From == from && e.To == to {
			return true
		}
	}
	return false
}

// Blocking reports whether an attempt in this state forbids starting another:
// a starting attempt may be about to call the provider, an unknown one may
// still be producing side effects.
func (s AttemptState) Blocking() bool { return s == AttemptStarting || s == AttemptUnknown }

// InFlight reports whether an attempt in this state may still be at work
// at its provider: running, or unknown. (A starting attempt never called
// it.)
func (s AttemptState) InFlight() bool { return s == AttemptRunning || s == AttemptUnknown }

// Open reports whether the attempt may still produce a result.
func (s AttemptState) Open() bool {
	return s == AttemptStarting || s == AttemptRunning || s == AttemptUnknown
}

// Terminal reports whether no transition leaves this state.
func (s AttemptState) Terminal() bool {
	for _, e := range attemptEdges {
		if e.From == s {
			return false
		}
	}
	return true
}

// StatusEdge is one way a job's status changes.
type StatusEdge struct {
	From, To Status
	By       string
}

// StatusEdges describes how a job's status moves. While no outcome is
// written the status is derived from the attempts (derivedStatus); an
// outcome is written only by compare-and-swap on the job's version.
func StatusEdges() []StatusEdge {
	return []StatusEdge{
		{StatusPending, StatusRunning, "DecideStart (first attempt)"},
		{StatusRunning, StatusUnknown, "an attempt became unknown"},
		{StatusUnknown, StatusRunning, "the unknown attempt ended, was settled or resolved"},
		{StatusPending, StatusCancelled, "DecideCancel"},
		{StatusRunning, StatusSucceeded, "DecideComplete"},
		{StatusRunning, StatusFailed, "DecideFail (no provider left)"},
		{StatusPending, StatusFailed, "DecideFail (no provider took attempts within the wait bound)"},
		{StatusRunning, StatusCancelled, "DecideCancel"},
		{StatusUnknown, StatusSucceeded, "DecideComplete (a late result), DecideSettle or DecideResolve"},
		{StatusUnknown, StatusCancelled, "DecideCancel"},
	}
}
