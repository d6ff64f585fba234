package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A strict schema (OpenAI's Structured Outputs with strict: true, Claude's
// strict tool use on the Claude API and on Bedrock) is compiled into a
// grammar, and the APIs refuse a schema outside the subset they document
// with a 400. These tables are the simulators' own reading of that
// documentation, kept apart from the adapters' transform
// (provider.SchemaSubset) so that each checks the other:
//
//   - OpenAI, Structured Outputs guide, "Supported schemas": string pattern
//     and format (date-time, time, date, duration, email, hostname, ipv4,
//     ipv6, uuid); number multipleOf, maximum, exclusiveMaximum, minimum,
//     exclusiveMinimum; array minItems, maxItems; anyOf, $defs, $ref; every
//     property required; additionalProperties false on every object; an
//     object root that is not anyOf; at most 10 levels of nesting.
//   - Claude, "JSON Schema limitations" of structured outputs: basic types,
//     enum, const, anyOf, allOf, $ref, $defs/definitions, default,
//     required, additionalProperties false on every object, items, minItems
//     0 or 1, string format (date-time, time, date, duration, email,
//     hostname, uri, ipv4, ipv6, uuid) and pattern; no numeric or length
//     bounds, no maxItems.
type strictDialect struct {
	common, object, array, str, num []string
	formats                         []string
	allRequired                     bool
	maxMinItems                     int // -1: any
	rootObject                      bool
	maxDepth                        int
}

var openAIStrictDialect = strictDialect{
	common:      []string{"type", "description", "title", "enum", "const", "anyOf", "$ref", "$defs", "definitions"},
	object:      []string{"properties", "required", "additionalProperties"},
	array:       []string{"items", "minItems", "maxItems"},
	str:         []string{"pattern", "format"},
	num:         []string{"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
	formats:     []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"},
	allRequired: true,
	maxMinItems: -1,
	rootObject:  true,
	maxDepth:    10,
}

var claudeStrictDialect = strictDialect{
	common:      []string{"type", "description", "title", "enum", "const", "anyOf", "allOf", "$ref", "$defs", "definitions", "default"},
	object:      []string{"properties", "required", "additionalProperties"},
	array:       []string{"items", "minItems"},
	str:         []string{"pattern", "format"},
	formats:     []string{"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"},
	maxMinItems: 1,
}

// strictProblem is where and why a strict schema is refused.
type strictProblem struct {
	path    []string
	kind    string // keyword, format, min_items, additional_properties, required, root, depth
	typ     string // the schema's type, for keyword
	keyword string // the keyword, format value, or missing property
}

// context renders the path as OpenAI's messages do: (), ('properties',
// 'x',), ('properties', 'x', 'items').
func (p strictProblem) context() string {
	switch len(p.path) {
	case 0:
		return "()"
	case 1:
		return "('" + p.path[0] + "',)"
	}
	return "('" + strings.Join(p.path, "', '") + "')"
}

// openAI renders the problem as OpenAI's 400 message does after "In
// context=…, ".
func (p strictProblem) openAI() string {
	switch p.kind {
	case "keyword":
		return fmt.Sprintf("'%s' is not permitted.", p.keyword)
	case "format":
		return fmt.Sprintf("'%s' is not a supported format.", p.keyword)
	case "additional_properties":
		return "'additionalProperties' is required to be supplied and to be false."
	case "required":
		return fmt.Sprintf("'required' is required to be supplied and to be an array including every key in properties. Missing '%s'.", p.keyword)
	case "root":
		return "schema must be a JSON Schema of 'type: \"object\"' and not use 'anyOf'."
	case "depth":
		return "the schema has more than 10 levels of nesting."
	}
	return p.kind
}

// claude renders the problem as the Claude API's 400 message does after
// the schema's location.
func (p strictProblem) claude() string {
	at := "/" + strings.Join(p.path, "/")
	switch p.kind {
	case "keyword":
		return fmt.Sprintf("For '%s' type, property '%s' is not supported (at %s)", p.typ, p.keyword, at)
	case "format":
		return fmt.Sprintf("For 'string' type, format '%s' is not supported (at %s)", p.keyword, at)
	case "min_items":
		return fmt.Sprintf("For 'array' type, 'minItems' values other than 0 or 1 are not supported (at %s)", at)
	case "additional_properties":
		return fmt.Sprintf("For 'object' type, 'additionalProperties' must be explicitly set to false (at %s)", at)
	}
	return p.kind
}

// strictSchemaProblem checks schema against the dialect; nil when it is
// inside it.
func strictSchemaProblem(schema json.RawMessage, d strictDialect) *strictProblem {
	var v any
	if json.Unmarshal(schema, &v) != nil {
		return &strictProblem{kind: "root"}
	}
	m, ok := v.(map[string]any)
	if d.rootObject && (!ok || m["type"] != "object" || m["anyOf"] != nil) {
		return &strictProblem{kind: "root"}
	}
	return d.walk(v, nil, 1)
}

func schemaTypes(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (d strictDialect) walk(v any, path []string, depth int) *strictProblem {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	if d.maxDepth > 0 && depth > d.maxDepth {
		return &strictProblem{path: path, kind: "depth"}
	}
	types := schemaTypes(m)
	allowed := slices.Clone(d.common)
	_, hasProps := m["properties"]
	if slices.Contains(types, "object") || hasProps {
		allowed = append(allowed, d.object...)
	}
	if slices.Contains(types, "array") {
		allowed = append(allowed, d.array...)
	}
	if slices.Contains(types, "string") {
		allowed = append(allowed, d.str...)
	}
	if slices.Contains(types, "number") || slices.Contains(types, "integer") {
		allowed = append(allowed, d.num...)
	}
	typ := strings.Join(types, "|")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return &strictProblem{path: path, kind: "keyword", typ: typ, keyword: k}
		}
	}
	if f, ok := m["format"].(string); ok && !slices.Contains(d.formats, f) {
		return &strictProblem{path: path, kind: "format", keyword: f}
	}
	if n, ok := m["minItems"].(float64); ok && d.maxMinItems >= 0 && n > float64(d.maxMinItems) {
		return &strictProblem{path: path, kind: "min_items"}
	}
	if slices.Contains(types, "object") || hasProps {
		if ap, ok := m["additionalProperties"].(bool); !ok || ap {
			return &strictProblem{path: path, kind: "additional_properties"}
		}
		props, _ := m["properties"].(map[string]any)
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names)
		if d.allRequired {
			required := map[string]bool{}
			list, _ := m["required"].([]any)
			for _, r := range list {
				if s, ok := r.(string); ok {
					required[s] = true
				}
			}
			for _, k := range names {
				if !required[k] {
					return &strictProblem{path: path, kind: "required", keyword: k}
				}
			}
		}
		for _, k := range names {
			if p := d.walk(props[k], append(slices.Clone(path), "properties", k), depth+1); p != nil {
				return p
			}
		}
	}
	if items, ok := m["items"]; ok {
		if p := d.walk(items, append(slices.Clone(path), "items"), depth); p != nil {
			return p
		}
	}
	for _, k := range []string{"anyOf", "allOf"} {
		list, _ := m[k].([]any)
		for i, b := range list {
			if p := d.walk(b, append(slices.Clone(path), k, fmt.Sprint(i)), depth); p != nil {
				return p
			}
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		defs, _ := m[k].(map[string]any)
		names := make([]string, 0, len(defs))
		for n := range defs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if p := d.walk(defs[n], append(slices.Clone(path), k, n), depth); p != nil {
				return p
			}
		}
	}
	return nil
}
