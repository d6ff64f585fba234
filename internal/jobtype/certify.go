package jobtype

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// DefaultInputLimitChars is the prompt budget a contract run checks when the
// provider's own limit is not given.
const DefaultInputLimitChars = 100_000

// CertificationStore keeps certifications.
type CertificationStore interface {
	PutCertification(ctx context.Context, c job.Certification) error
}

type caseRecord struct {
	Case       string   `json:"case"`
	Passed     bool     `json:"passed"`
	Violations []string `json:"violations,omitempty"`
}

// Certify runs the type's contract cases against a provider and stores the
// outcome as the certification of (type, current contract version,
// provider), passed or not.
func Certify(ctx context.Context, st CertificationStore, t *Type, p provider.Provider, inputLimitChars int, now time.Time) (Report, job.Certification, error) {
	if inputLimitChars <= 0 {
		inputLimitChars = DefaultInputLimitChars
	}
	rep := RunContract(ctx, t, p, t.Cases(), inputLimitChars)
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
		return rep, job.Certification{}, err
	}
	cert := job.Certification{
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
