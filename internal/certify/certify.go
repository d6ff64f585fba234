// Package certify runs a job type's contract cases against a provider and
// records the outcome as a certification. Failover and hedging go only to
// providers whose latest run passed for the type's current contract version.
package certify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/store"
)

// DefaultInputLimitChars is the prompt budget checked when a provider
// declares none: well inside every supported model's context window.
const DefaultInputLimitChars = 100_000

// caseRecord is what the certification stores per case.
type caseRecord struct {
	Case       string   `json:"case"`
	Passed     bool     `json:"passed"`
	Violations []string `json:"violations,omitempty"`
}

// Run executes the contract cases of jobType on p and stores the resulting
// certification, passed or not: a failed run replaces an earlier pass.
func Run(ctx context.Context, st *store.Store, t *jobtype.Type, p provider.Provider, inputLimitChars int, now time.Time) (jobtype.Report, store.Certification, error) {
	if inputLimitChars <= 0 {
		inputLimitChars = DefaultInputLimitChars
	}
	rep := jobtype.RunContract(ctx, t, p, t.Cases(), inputLimitChars)
	var cases []caseRecord
	model := ""
	for _, c := range rep.Cases {
		rec := caseRecord{Case: c.Case, Passed: c.Passed}
		for _, v := range c.Violations {
			rec.Violations = append(rec.Violations, fmt.Sprintf("%s %s: %s", v.Pointer, v.Rule, v.Message))
		}
		cases = append(cases, rec)
		if c.Model != "" {
			model = c.Model
		}
	}
	raw, err := json.Marshal(cases)
	if err != nil {
		return rep, store.Certification{}, err
	}
	cert := store.Certification{
		JobType:         t.Name(),
		ContractVersion: t.ContractVersion(),
		Provider:        p.Name(),
		Model:           model,
		Passed:          rep.Passed(),
		Cases:           raw,
		CertifiedAt:     now.UTC(),
	}
	if err := st.PutCertification(ctx, cert); err != nil {
		return rep, cert, err
	}
	return rep, cert, nil
}
