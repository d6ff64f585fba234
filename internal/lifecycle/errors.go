package lifecycle

// Error names returned by the task functions. The state machine's Retry and
// Catch match exactly these strings (statemachine/onejob.asl.json).
const (
	ErrNameProviderRetryable   = "ProviderRetryable"
	ErrNameProviderRejected    = "ProviderRejected"
	ErrNameContractViolation   = "ContractViolation"
	ErrNameProviderAmbiguous   = "ProviderAmbiguous"
	ErrNameProviderUncertified = "ProviderUncertified"
	ErrNameStoreUnavailable    = "StoreUnavailable"
	ErrNameUnknownJobType      = "UnknownJobType"
	ErrNameJobNotFound         = "JobNotFound"
)

// ErrorNames lists every name a task may return.
func ErrorNames() []string {
	return []string{ErrNameProviderRetryable, ErrNameProviderRejected, ErrNameContractViolation,
		ErrNameProviderAmbiguous, ErrNameProviderUncertified, ErrNameStoreUnavailable,
		ErrNameUnknownJobType, ErrNameJobNotFound}
}

// TaskError is a task failure with the name the state machine routes on.
type TaskError struct {
	Name    string
	Message string
}

func (e *TaskError) Error() string { return e.Name + ": " + e.Message }

// ErrorName is the ASL error name.
func (e *TaskError) ErrorName() string { return e.Name }
