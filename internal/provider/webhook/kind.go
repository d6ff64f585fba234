package webhook

import "github.com/onejob/onejob/internal/provider"

// Kind is webhook: a receiver answers in the request.
func (a *Adapter) Kind() string { return provider.KindWebhook }

// Kind is webhook-async: a receiver runs each tier as work of its own, in
// the tier's completion window (provider.RunTier).
func (a *Async) Kind() string { return provider.KindWebhookAsync }
