package job

import (
	"encoding/json"
	"time"
)

// Certification records a contract run of one provider against one version
// of a job type's contract. Only a passing run for the type's current
// contract version lets a job fail over, or hedge, to the provider.
type Certification struct {
	JobType         string          `json:"job_type"`
	ContractVersion string          `json:"contract_version"`
	Provider        string          `json:"provider"`
	Model           string          `json:"model"`
	Passed          bool            `json:"passed"`
	Cases           json.RawMessage `json:"cases"` // per-case results, with their counts
	CertifiedAt     time.Time       `json:"certified_at"`
	// Window is the limit the cases were checked against: the model's
	// context window in tokens, or a webhook's declared request bytes
	// (WindowUnit says which); 0 when none was declared.
	Window     int    `json:"window,omitempty"`
	WindowUnit string `json:"window_unit,omitempty"`
}
