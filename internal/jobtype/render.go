package jobtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/onejob/onejob/internal/provider"
)

// ErrRender is wrapped when an input cannot be rendered into a prompt.
var ErrRender = errors.New("render prompt")

// Render renders the system prompt and the prompt template over a (valid)
// input.
func (t *Type) Render(input json.RawMessage) (system, prompt string, err error) {
	data, err := decodeInstance(input)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s: input: %w", ErrRender, t.Name(), err)
	}
	var b strings.Builder
	if err := t.prompt.execute(&b, data); err != nil {
		return "", "", fmt.Errorf("%w: %s: %w", ErrRender, t.Name(), err)
	}
	return t.spec.SystemPrompt, b.String(), nil
}

// Request renders input into the provider request of the type; the caller
// adds the attempt's identity (JobID, Attempt, IdempotencyKey).
func (t *Type) Request(input json.RawMessage) (provider.Request, error) {
	system, prompt, err := t.Render(input)
	if err != nil {
		return provider.Request{}, err
	}
	return provider.Request{
		JobType:         t.Name(),
		System:          system,
		Prompt:          prompt,
		Input:           input,
		OutputSchema:    t.OutputSchema(),
		Temperature:     t.spec.Temperature,
		MaxOutputTokens: t.spec.MaxOutputTokens,
	}, nil
}
