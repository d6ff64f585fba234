package job

// Signal is the name under which a run of a job's attempts tells the state
// machine what to do next when the job is not done: the state machine's
// Catch matches exactly these names (statemachine/onejob.asl.json), and a
// test checks the two agree. A run that ends the job (an outcome written)
// returns normally and the execution ends.
type Signal string

// Signals of a job that is not done.
const (
	// SignalRunNext: an attempt ended and the next one is to run — in a new
	// run, so each attempt gets its own timeout.
	SignalRunNext Signal = "RunNext"
	// SignalWaitOpen: an attempt is open (unknown, or its runner is not
	// this one): wait, then decide again.
	SignalWaitOpen Signal = "WaitOpen"
)

// Signals lists every signal.
func Signals() []Signal { return []Signal{SignalRunNext, SignalWaitOpen} }

// Signal is how a run reports plan when it does not carry it out itself: ok
// is false for done and finalize, which a run completes on its own.
//
// Any other end of a run — its timeout, a crash, an error it did not name —
// is caught by the state machine and leads to the hold step, where the
// run's attempts are decided unknown (DecideUnknown): their provider may
// have been called, so their outcome is unknown, never failed.
func (p Plan) Signal() (Signal, bool) {
	switch p.Action {
	case ActionRun:
		return SignalRunNext, true
	case ActionWait:
		return SignalWaitOpen, true
	}
	return "", false
}
