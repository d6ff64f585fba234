package job

// Signal is the name under which a task function reports how an attempt
// ended. The state machine's Retry and Catch match exactly these names
// (statemachine/onejob.asl.json); a test checks the two agree.
type Signal string

// Signals of an attempt's end.
const (
	SignalProviderRetryable   Signal = "ProviderRetryable"
	SignalProviderRejected    Signal = "ProviderRejected"
	SignalContractViolation   Signal = "ContractViolation"
	SignalProviderAmbiguous   Signal = "ProviderAmbiguous"
	SignalProviderUncertified Signal = "ProviderUncertified"
)

// classSignals is the one table between failure classes and signals; both
// directions read it.
var classSignals = []struct {
	class  Class
	signal Signal
}{
	{ClassRetryable, SignalProviderRetryable},
	{ClassNonRetryable, SignalProviderRejected},
	{ClassContractViolation, SignalContractViolation},
	{ClassUncertified, SignalProviderUncertified},
	{ClassAmbiguous, SignalProviderAmbiguous},
}

// Signals lists every signal.
func Signals() []Signal {
	out := make([]Signal, 0, len(classSignals))
	for _, cs := range classSignals {
		out = append(out, cs.signal)
	}
	return out
}

// Signal is the signal a failure of this class is reported under. A class
// with no signal of its own (resolved) is reported as retryable: the next
// step is for Next to decide.
func (c Class) Signal() Signal {
	for _, cs := range classSignals {
		if cs.class == c {
			return cs.signal
		}
	}
	return SignalProviderRetryable
}

// EndSignal is how a task reports an attempt that already ended, as the
// invocation that ran it did: a redelivered invocation repeats the first
// one's report. ok is false while the attempt is still open (starting or
// running); a signal of "" means it ended without error (succeeded,
// discarded or cancelled).
//
// Any other end of a runner — a timeout, a crash, an error with no signal
// — is caught by the state machine and leads to DecideUnknown: the
// provider may have been called, so the attempt's outcome is unknown.
func EndSignal(a Attempt) (s Signal, ok bool) {
	switch a.State {
	case AttemptStarting, AttemptRunning:
		return "", false
	case AttemptUnknown:
		return SignalProviderAmbiguous, true
	case AttemptFailed:
		if a.Error == nil {
			return SignalProviderRetryable, true
		}
		return a.Error.Class.Signal(), true
	}
	return "", true
}
