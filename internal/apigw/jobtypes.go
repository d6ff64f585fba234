package apigw

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/lifecycle"
)

// JobTypes adapts the embedded job types to what the API validates.
type JobTypes struct {
	Catalog *jobtype.Catalog
}

// ProviderNames lists every provider a job type names.
func (c JobTypes) ProviderNames() []string { return c.Catalog.ProviderNames() }

// Lookup finds a job type.
func (c JobTypes) Lookup(name string) (JobType, bool) {
	t, ok := c.Catalog.Get(name)
	if !ok {
		return nil, false
	}
	return apiType{t}, true
}

type apiType struct{ t *jobtype.Type }

func (a apiType) ValidateInput(input json.RawMessage) []FieldError {
	var out []FieldError
	for _, fe := range a.t.ValidateInput(input) {
		out = append(out, FieldError{Pointer: fe.Pointer, Detail: fe.Message})
	}
	return out
}

func (a apiType) CheckOutput(output json.RawMessage) []FieldError {
	var cv *jobtype.ContractViolationError
	err := a.t.CheckOutput(output)
	if err == nil {
		return nil
	}
	if !errors.As(err, &cv) {
		return []FieldError{{Detail: "the result could not be checked"}}
	}
	out := make([]FieldError, 0, len(cv.Violations))
	for _, v := range cv.Violations {
		out = append(out, FieldError{Pointer: v.Pointer, Detail: v.Message + " (" + v.Rule + ")"})
	}
	return out
}

func (a apiType) Providers() []string { return a.t.Providers() }

func (a apiType) Timeout() time.Duration { return a.t.Timeout() }

func (a apiType) HedgeAfter() (time.Duration, bool) { return a.t.HedgeAfter() }

func (a apiType) Retention() time.Duration { return a.t.Retention() }

func (a apiType) Tier() job.Tier { return a.t.Tier() }

func (a apiType) MaxTier() job.Tier { return a.t.MaxTier() }

func (a apiType) CostBasis(input json.RawMessage) (job.CostBasis, error) {
	req, err := a.t.Request(input)
	if err != nil {
		return job.CostBasis{}, err
	}
	return lifecycle.CostBasisOf(req), nil
}
