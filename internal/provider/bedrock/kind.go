package bedrock

import "github.com/onejob/onejob/internal/provider"

// Kind is bedrock: Converse answers in the request, whatever the tier.
func (a *Adapter) Kind() string { return provider.KindBedrock }
