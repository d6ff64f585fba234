package jobtype

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// CertificationStore keeps certifications.
type CertificationStore interface {
	PutCertification(ctx context.Context, c job.Certification) error
}

// caseRecord is one case as a certification stores it: the verdict, the
// counts it was judged on and why it failed.
type caseRecord struct {
	Case        string   `json:"case"`
	Passed      bool     `json:"passed"`
	Input       int      `json:"input,omitempty"`
	Unit        string   `json:"unit,omitempty"`
	CountedBy   string   `json:"counted_by,omitempty"`
	Estimate    bool     `json:"estimate,omitempty"`
	Headroom    *int     `json:"headroom,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	Violations  []string `json:"violations,omitempty"`
	RequestID   string   `json:"provider_request_id,omitempty"`
	ModelAnswer string   `json:"model,omitempty"`
}

// Certify runs the type's contract cases against a provider, measured by
// budget, and stores the outcome as the certification of (type, current
// contract version, provider), passed or not, with the window it was
// checked against and the counts of every case.
func Certify(ctx context.Context, st CertificationStore, t *Type, p provider.Provider, budget Budget, now time.Time) (Report, job.Certification, error) {
	rep := RunContract(ctx, t, p, t.Cases(), budget)
	var cases []caseRecord
	model := ""
	unit := UnitTokens
	for _, c := range rep.Cases {
		rec := caseRecord{Case: c.Case, Passed: c.Passed, Notes: c.Notes, RequestID: c.ProviderRequestID, ModelAnswer: c.Model}
		if m := c.Measure; m != nil {
			headroom := c.Headroom
			rec.Input, rec.Unit, rec.CountedBy, rec.Estimate, rec.Headroom = m.Input, m.Unit, m.Method, m.Estimate, &headroom
			unit = m.Unit
		}
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
		Window:          rep.Limits.ContextWindow,
		WindowUnit:      unit,
	}
	if unit == UnitBytes {
		cert.Window = rep.Limits.MaxRequestBytes
	}
	if err := st.PutCertification(ctx, cert); err != nil {
		return rep, cert, err
	}
	return rep, cert, nil
}
