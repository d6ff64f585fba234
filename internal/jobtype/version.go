package jobtype

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// contractVersion hashes what a provider certification depends on. Schemas
// are re-encoded (sorted keys, no whitespace) so reformatting a file does
// not invalidate certifications; check messages are wording and excluded.
func contractVersion(s spec) (string, error) {
	canon := func(raw json.RawMessage) (any, error) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	in, err := canon(s.InputSchema)
	if err != nil {
		return "", err
	}
	out, err := canon(s.OutputSchema)
	if err != nil {
		return "", err
	}
	checks := make([][2]string, 0, len(s.Checks))
	for _, c := range s.Checks {
		checks = append(checks, [2]string{c.Name, c.Expr})
	}
	doc, err := json.Marshal(map[string]any{
		"input_schema":    in,
		"output_schema":   out,
		"checks":          checks,
		"prompt_template": s.PromptTemplate,
		"system_prompt":   s.SystemPrompt,
	})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append([]byte("onejob-contract-v1\n"), doc...))
	// 64 bits is plenty to tell versions of one type apart and keeps keys short.
	return hex.EncodeToString(sum[:8]), nil
}
