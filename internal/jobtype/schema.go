package jobtype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/onejob/onejob/internal/job"
)

// FieldError is one input problem, shaped for a 422 body.
type FieldError struct {
	// Pointer is the RFC 6901 JSON pointer of the offending value ("" = root).
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

func (e FieldError) String() string {
	p := e.Pointer
	if p == "" {
		p = "/"
	}
	return p + ": " + e.Message
}

// compileSchema compiles one schema document with Draft 2020-12 as the
// default and format assertions on (a contract should reject a bad "email").
// Remote $refs are not resolved: schemas must be self-contained.
func compileSchema(typeName, which string, raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("is required")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	obj, ok := doc.(map[string]any)
	if !ok || obj["type"] != "object" {
		return nil, errors.New(`root must be {"type": "object", ...}`)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	url := fmt.Sprintf("mem://jobtype/%s/%s.json", typeName, which)
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// topLevelKeys returns the output schema's declared top-level properties and
// whether the schema itself already rejects other keys.
func topLevelKeys(raw json.RawMessage) (map[string]bool, bool, error) {
	var s struct {
		Properties            map[string]json.RawMessage `json:"properties"`
		PatternProperties     map[string]json.RawMessage `json:"patternProperties"`
		AdditionalProperties  json.RawMessage            `json:"additionalProperties"`
		UnevaluatedProperties json.RawMessage            `json:"unevaluatedProperties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, false, err
	}
	if len(s.Properties) == 0 {
		return nil, false, errors.New("root must declare properties")
	}
	if len(s.PatternProperties) > 0 {
		// Unknown-key rejection needs a closed set of names.
		return nil, false, errors.New("patternProperties are not supported at the root of an output schema")
	}
	keys := make(map[string]bool, len(s.Properties))
	for k := range s.Properties {
		keys[k] = true
	}
	closed := string(s.AdditionalProperties) == "false" || string(s.UnevaluatedProperties) == "false"
	return keys, closed, nil
}

// decodeInstance decodes JSON the way the validator expects (json.Number).
func decodeInstance(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("empty document")
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}

// schemaError is a leaf of a validation error tree.
type schemaError struct {
	FieldError
	unknownKey bool // from additionalProperties: the shape is otherwise intact
}

// schemaErrors flattens a validation error tree into leaf messages; an
// additionalProperties failure becomes one error per unknown key, pointing
// at the key.
func schemaErrors(err error) []schemaError {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []schemaError{{FieldError: FieldError{Message: err.Error()}}}
	}
	p := message.NewPrinter(language.English)
	var out []schemaError
	add := func(se schemaError) {
		if !slices.Contains(out, se) {
			out = append(out, se)
		}
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
			for _, k := range ap.Properties {
				loc := append(slices.Clone(e.InstanceLocation), k)
				add(schemaError{FieldError{Pointer: job.Pointer(loc...), Message: fmt.Sprintf("unknown key %q is not allowed", k)}, true})
			}
			return
		}
		add(schemaError{FieldError: FieldError{Pointer: job.Pointer(e.InstanceLocation...), Message: e.ErrorKind.LocalizedString(p)}})
	}
	walk(ve)
	// The validator walks maps in random order; reports must be stable.
	slices.SortStableFunc(out, func(a, b schemaError) int {
		return strings.Compare(a.Pointer+"\x00"+a.Message, b.Pointer+"\x00"+b.Message)
	})
	return out
}

// ValidateInput validates a job input against the input schema. It returns
// nil when the input is valid, otherwise one FieldError per problem.
func (t *Type) ValidateInput(input json.RawMessage) []FieldError {
	v, err := decodeInstance(input)
	if err != nil {
		return []FieldError{{Message: "input is not valid JSON: " + err.Error()}}
	}
	if err := t.inputSchema.Validate(v); err != nil {
		ses := schemaErrors(err)
		out := make([]FieldError, len(ses))
		for i, se := range ses {
			out[i] = se.FieldError
		}
		return out
	}
	return nil
}

// stringProperty checks that an output schema declares name as a
// top-level property of type string: the only value job.FieldText reads.
func stringProperty(raw json.RawMessage, name string) error {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	p, ok := s.Properties[name]
	if !ok {
		return errors.New("is not a top-level property of the output schema")
	}
	var typ string
	if json.Unmarshal(p.Type, &typ) != nil || typ != "string" {
		return errors.New(`must be a property of "type": "string"`)
	}
	return nil
}
