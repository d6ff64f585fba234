package worker

import (
	"encoding/json"

	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
)

// JobTypes adapts the embedded job type catalog to the worker.
type JobTypes struct {
	Catalog *jobtype.Catalog
}

// Lookup finds a job type.
func (c JobTypes) Lookup(name string) (JobType, bool) {
	t, ok := c.Catalog.Get(name)
	if !ok {
		return nil, false
	}
	return typeContract{t}, true
}

type typeContract struct{ *jobtype.Type }

func (t typeContract) Request(input json.RawMessage) (provider.Request, error) {
	// The worker fills in the attempt's identity.
	return t.NewRequest("", 0, input)
}
