package openai

import "github.com/onejob/onejob/internal/provider"

// Kind is openai-background: the Responses API in background mode runs
// each tier in its completion window (provider.RunTier).
func (b *Background) Kind() string { return provider.KindOpenAIBackground }
