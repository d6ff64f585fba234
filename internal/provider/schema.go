package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A provider that enforces an output schema natively (constrained decoding:
// OpenAI's Structured Outputs with strict: true, Claude's strict tool use)
// accepts only a subset of JSON Schema and refuses a request whose schema
// leaves it with a 400. An adapter therefore sends the job type's output
// schema transformed into its provider's subset: objects closed
// (additionalProperties false), required as the provider demands, and every
// keyword outside the subset dropped. Dropping only widens the schema, so
// what the provider enforces is never stricter than the contract; the rest
// of the contract (lengths, bounds, semantic checks) stays enforced by
// onejob's own output check (jobtype.CheckOutput), as for any answer. A
// schema the subset cannot express at all is sent without strict mode.

// SchemaSubset is the part of JSON Schema a provider enforces natively,
// as its documentation lists it.
type SchemaSubset struct {
	// Name names the subset in notes and errors.
	Name string
	// Keywords kept on any schema, and per instance type (a schema without
	// "type" keeps only Common).
	Common, Object, Array, String, Number []string
	// Formats are the "format" values kept; another is dropped.
	Formats []string
	// AllRequired: every property must be required. An optional property is
	// made required and nullable, and a null the model gives for it is
	// removed from the answer again (StrictSchema.Restore).
	AllRequired bool
	// MaxMinItems is the largest minItems kept (Claude: 0 or 1); -1: any.
	MaxMinItems int
	// UnsafePattern, when set, matches the patterns the subset cannot
	// compile (they are dropped).
	UnsafePattern *regexp.Regexp
	// MaxOptional is the most optional properties a schema may have; 0: no
	// limit.
	MaxOptional int
	// MaxDepth is the deepest nesting of objects; 0: no limit.
	MaxDepth int
	// RootNotAnyOf: the root must be an object schema, not an anyOf.
	RootNotAnyOf bool
}

// OpenAIStrict is the subset OpenAI's Structured Outputs guide documents for
// strict: true ("Supported schemas", developers.openai.com/api/docs/guides/
// structured-outputs, as copied on 2025-11-30): types string, number,
// boolean, integer, object, array, enum, anyOf; for strings pattern and
// format (date-time, time, date, duration, email, hostname, ipv4, ipv6,
// uuid); for numbers multipleOf, maximum, exclusiveMaximum, minimum,
// exclusiveMinimum; for arrays minItems and maxItems; definitions ($defs)
// and $ref; "all fields must be required"; "additionalProperties: false
// must always be set in objects"; the root must be an object, not anyOf;
// at most 10 levels of nesting. Not supported: allOf, not,
// dependentRequired, dependentSchemas, if, then, else (and, in the guide's
// earlier version, minLength, maxLength, which the current list of supported
// keywords still omits).
var OpenAIStrict = SchemaSubset{
	Name:         "OpenAI Structured Outputs (strict)",
	Common:       []string{"type", "description", "title", "enum", "const", "anyOf", "$ref", "$defs", "definitions"},
	Object:       []string{"properties", "required", "additionalProperties"},
	Array:        []string{"items", "minItems", "maxItems"},
	String:       []string{"pattern", "format"},
	Number:       []string{"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
	Formats:      []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"},
	AllRequired:  true,
	MaxMinItems:  -1,
	MaxDepth:     10,
	RootNotAnyOf: true,
}

// ClaudeStrict is the subset Anthropic documents for structured outputs and
// strict tool use ("JSON Schema limitations",
// platform.claude.com/docs/en/build-with-claude/structured-outputs), which
// Amazon Bedrock applies to the same Claude models: all basic types, enum,
// const, anyOf, $ref and $defs/definitions, required, additionalProperties
// (only false, and required on every object), items, minItems of 0 or 1,
// string formats (date-time, time, date, duration, email, hostname, uri,
// ipv4, ipv6, uuid) and patterns without backreferences, lookaround or \b.
// Not supported: minimum, maximum, multipleOf, minLength, maxLength,
// maxItems, minItems above 1, recursive schemas; at most 24 optional
// properties across a request's strict schemas.
var ClaudeStrict = SchemaSubset{
	Name:          "Claude structured outputs (strict tool use)",
	Common:        []string{"type", "description", "title", "enum", "const", "anyOf", "$ref", "$defs", "definitions"},
	Object:        []string{"properties", "required", "additionalProperties"},
	Array:         []string{"items", "minItems"},
	String:        []string{"pattern", "format"},
	Formats:       []string{"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"},
	MaxMinItems:   1,
	UnsafePattern: regexp.MustCompile(`\(\?[=!<]|\\[bB1-9]`),
	MaxOptional:   24,
}

// ErrNotStrict: the schema cannot be expressed in the subset (a subschema
// left with no type, enum, const, anyOf or $ref once unsupported keywords
// are dropped; a root that is no object; limits passed).
var ErrNotStrict = errors.New("schema outside the provider's strict subset")

// StrictSchema is a schema transformed into a subset.
type StrictSchema struct {
	// Schema is what the adapter sends.
	Schema json.RawMessage
	// Dropped lists what was left out, "minLength at /properties/summary",
	// in schema order: onejob's output check still enforces it.
	Dropped []string
	restore *restoreNode
}

// restoreNode marks, along an answer's objects and arrays, the properties
// made nullable only to be required.
type restoreNode struct {
	nullable map[string]bool
	props    map[string]*restoreNode
	items    *restoreNode
}

func (n *restoreNode) empty() bool {
	if n == nil {
		return true
	}
	if len(n.nullable) > 0 || !n.items.empty() {
		return false
	}
	for _, p := range n.props {
		if !p.empty() {
			return false
		}
	}
	return true
}

// Strict transforms schema into the subset.
func (sub SchemaSubset) Strict(schema json.RawMessage) (StrictSchema, error) {
	doc, err := decodeOrdered(schema)
	if err != nil {
		return StrictSchema{}, fmt.Errorf("%w: %w", ErrNotStrict, err)
	}
	root, ok := doc.(*object)
	if !ok || !root.hasType("object") {
		return StrictSchema{}, fmt.Errorf("%w: the root must be an object schema", ErrNotStrict)
	}
	if sub.RootNotAnyOf && root.has("anyOf") {
		return StrictSchema{}, fmt.Errorf("%w: the root must not be anyOf", ErrNotStrict)
	}
	w := &walk{sub: sub}
	r := w.schema(root, "", 1)
	if w.err != nil {
		return StrictSchema{}, w.err
	}
	if sub.MaxOptional > 0 && w.optional > sub.MaxOptional {
		return StrictSchema{}, fmt.Errorf("%w: %d optional properties, at most %d", ErrNotStrict, w.optional, sub.MaxOptional)
	}
	out, err := json.Marshal(root)
	if err != nil {
		return StrictSchema{}, fmt.Errorf("%w: %w", ErrNotStrict, err)
	}
	s := StrictSchema{Schema: out, Dropped: w.dropped}
	if !r.empty() {
		s.restore = r
	}
	return s, nil
}

// Restore removes from an answer the nulls the model gave for properties
// the transform made nullable; other answers are returned as they are.
func (s StrictSchema) Restore(output json.RawMessage) json.RawMessage {
	if s.restore == nil {
		return output
	}
	doc, err := decodeOrdered(output)
	if err != nil {
		return output
	}
	s.restore.apply(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		return output
	}
	return out
}

func (n *restoreNode) apply(v any) {
	if n == nil {
		return
	}
	switch x := v.(type) {
	case *object:
		for k := range n.nullable {
			if val, ok := x.get(k); ok && val == nil {
				x.del(k)
			}
		}
		for k, child := range n.props {
			if val, ok := x.get(k); ok {
				child.apply(val)
			}
		}
	case []any:
		for _, item := range x {
			n.items.apply(item)
		}
	}
}

// walk is one transformation.
type walk struct {
	sub      SchemaSubset
	dropped  []string
	optional int
	err      error
}

func (w *walk) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%w: %s", ErrNotStrict, fmt.Sprintf(format, args...))
	}
}

func (w *walk) drop(keyword, at string) {
	if at == "" {
		at = "/"
	}
	w.dropped = append(w.dropped, keyword+" at "+at)
}

// schema transforms s in place; depth counts nested objects.
func (w *walk) schema(s *object, at string, depth int) *restoreNode {
	if w.sub.MaxDepth > 0 && depth > w.sub.MaxDepth {
		w.fail("more than %d levels of nesting at %s", w.sub.MaxDepth, at)
		return nil
	}
	allowed := slices.Clone(w.sub.Common)
	isObject := s.hasType("object") || s.has("properties")
	for _, t := range s.types() {
		switch t {
		case "object":
			allowed = append(allowed, w.sub.Object...)
		case "array":
			allowed = append(allowed, w.sub.Array...)
		case "string":
			allowed = append(allowed, w.sub.String...)
		case "number", "integer":
			allowed = append(allowed, w.sub.Number...)
		}
	}
	if isObject {
		allowed = append(allowed, w.sub.Object...)
	}
	if s.has("oneOf") && !s.has("anyOf") {
		// Exactly one of is a case of any of: the provider enforces the
		// wider, onejob's check the exact one.
		s.rename("oneOf", "anyOf")
	}
	node := &restoreNode{}
	for _, k := range slices.Clone(s.keys) {
		v, _ := s.get(k)
		if !slices.Contains(allowed, k) {
			s.del(k)
			w.drop(k, at)
			continue
		}
		switch k {
		case "format":
			if f, _ := v.(string); !slices.Contains(w.sub.Formats, f) {
				s.del(k)
				w.drop(fmt.Sprintf("format %q", f), at)
			}
		case "pattern":
			if p, _ := v.(string); w.sub.UnsafePattern != nil && w.sub.UnsafePattern.MatchString(p) {
				s.del(k)
				w.drop(k, at)
			}
		case "minItems":
			if n, ok := v.(json.Number); w.sub.MaxMinItems >= 0 && (!ok || n.String() != "0" && n.String() != "1") {
				s.del(k)
				w.drop(k, at)
			}
		case "items":
			item, ok := v.(*object)
			if !ok {
				s.del(k)
				w.drop(k+" (a tuple)", at)
				continue
			}
			node.items = w.schema(item, at+"/items", depth)
		case "anyOf":
			list, _ := v.([]any)
			for i, b := range list {
				if bo, ok := b.(*object); ok {
					w.schema(bo, fmt.Sprintf("%s/anyOf/%d", at, i), depth)
				} else {
					w.fail("anyOf at %s holds a non-schema", at)
				}
			}
		case "$defs", "definitions":
			defs, _ := v.(*object)
			if defs == nil {
				continue
			}
			for _, name := range defs.keys {
				if d, ok := defs.vals[name].(*object); ok {
					w.schema(d, at+"/"+k+"/"+name, depth)
				}
			}
		}
	}
	if isObject {
		node.props = w.object(s, at, depth, node)
	}
	if !s.has("type") && !s.has("enum") && !s.has("const") && !s.has("anyOf") && !s.has("$ref") {
		w.fail("the schema at %s has no type left", orRoot(at))
	}
	return node
}

// object closes an object schema and sets its required list.
func (w *walk) object(s *object, at string, depth int, node *restoreNode) map[string]*restoreNode {
	props, _ := s.get("properties")
	po, _ := props.(*object)
	if props != nil && po == nil {
		w.fail("properties at %s is not an object", orRoot(at))
		return nil
	}
	if ap, ok := s.get("additionalProperties"); !ok || ap != false {
		if ok {
			w.drop("additionalProperties", at) // a schema or true: the provider allows none
		}
		s.set("additionalProperties", false)
	}
	required := map[string]bool{}
	if r, ok := s.get("required"); ok {
		list, _ := r.([]any)
		for _, v := range list {
			if name, ok := v.(string); ok {
				required[name] = true
			}
		}
	}
	children := map[string]*restoreNode{}
	var names []any
	for _, name := range propertyNames(po) {
		child, ok := po.vals[name].(*object)
		if !ok {
			w.fail("property %s at %s is not a schema", name, orRoot(at))
			continue
		}
		children[name] = w.schema(child, at+"/properties/"+name, depth+1)
		switch {
		case required[name]:
			names = append(names, name)
		case w.sub.AllRequired:
			names = append(names, name)
			if !allowsNull(child) {
				po.set(name, nullable(child))
				if node.nullable == nil {
					node.nullable = map[string]bool{}
				}
				node.nullable[name] = true
			}
		default:
			w.optional++
		}
	}
	if len(names) > 0 || w.sub.AllRequired {
		if names == nil {
			names = []any{}
		}
		s.set("required", names)
	} else {
		s.del("required")
	}
	return children
}

func orRoot(at string) string {
	if at == "" {
		return "/"
	}
	return at
}

func propertyNames(po *object) []string {
	if po == nil {
		return nil
	}
	return po.keys
}

// allowsNull reports whether s already accepts null.
func allowsNull(s *object) bool {
	if slices.Contains(s.types(), "null") {
		return true
	}
	if e, ok := s.get("enum"); ok {
		if list, _ := e.([]any); slices.Contains(list, nil) {
			return true
		}
	}
	if a, ok := s.get("anyOf"); ok {
		list, _ := a.([]any)
		for _, b := range list {
			if bo, ok := b.(*object); ok && allowsNull(bo) {
				return true
			}
		}
	}
	return false
}

// nullable returns s accepting null too: the way the OpenAI guide emulates
// an optional property ("a union type with null").
func nullable(s *object) *object {
	t, hasType := s.get("type")
	switch {
	case hasType && !s.has("const"):
		switch x := t.(type) {
		case string:
			s.set("type", []any{x, "null"})
		case []any:
			s.set("type", append(x, "null"))
		}
		if e, ok := s.get("enum"); ok {
			list, _ := e.([]any)
			s.set("enum", append(list, nil))
		}
		return s
	case s.has("anyOf") && len(s.keys) == 1:
		a, _ := s.get("anyOf")
		list, _ := a.([]any)
		s.set("anyOf", append(list, newObject("type", "null")))
		return s
	}
	return newObject("anyOf", []any{s, newObject("type", "null")})
}

// object is a JSON object that keeps its members' order: a model produces
// the properties in the order of the schema.
type object struct {
	keys []string
	vals map[string]any
}

func newObject(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		o.set(kv[i].(string), kv[i+1])
	}
	return o
}

func (o *object) get(k string) (any, bool) { v, ok := o.vals[k]; return v, ok }

func (o *object) has(k string) bool { _, ok := o.vals[k]; return ok }

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) del(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	o.keys = slices.DeleteFunc(o.keys, func(x string) bool { return x == k })
}

func (o *object) rename(from, to string) {
	v, ok := o.vals[from]
	if !ok {
		return
	}
	delete(o.vals, from)
	o.vals[to] = v
	o.keys[slices.Index(o.keys, from)] = to
}

// types lists the schema's "type" (a string or a list).
func (o *object) types() []string {
	switch t := o.vals["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (o *object) hasType(t string) bool { return slices.Contains(o.types(), t) }

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered decodes JSON keeping object member order and numbers as
// written.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := newObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := dec.Token()
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// Describe says what was dropped, for a Prepared note; "" when nothing was.
func (s StrictSchema) Describe(sub SchemaSubset) string {
	if len(s.Dropped) == 0 {
		return ""
	}
	return "output schema sent in the subset of " + sub.Name + "; left to onejob's output check: " + strings.Join(s.Dropped, ", ")
}

// claudeModel reads a Claude model name: claude-<family>-<major>[-<minor>],
// then a date or the end (claude-sonnet-4-5-20250929, claude-opus-4-6,
// claude-sonnet-4-20250514 is 4.0).
var claudeModel = regexp.MustCompile(`^claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-|$)`)

// ClaudeStrictTools reports whether a Claude model takes strict tool use
// (structured outputs), which Anthropic documents as generally available
// for Claude Opus 4.6, Sonnet 4.6, Sonnet 4.5, Opus 4.5 and Haiku 4.5, and
// Amazon Bedrock for Sonnet 4.5, Haiku 4.5, Opus 4.5 and Opus 4.6: Claude
// 4.5 and later. modelID may be a Bedrock id (anthropic.…, with a
// cross-region prefix such as us., or an ARN).
func ClaudeStrictTools(modelID string) bool {
	id := modelID
	if i := strings.LastIndex(id, "/"); i >= 0 { // an ARN
		id = id[i+1:]
	}
	for _, geo := range []string{"us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global."} {
		id = strings.TrimPrefix(id, geo)
	}
	id = strings.TrimPrefix(id, "anthropic.")
	m := claudeModel.FindStringSubmatch(id)
	if m == nil {
		return false
	}
	major, minor := atoi(m[1]), atoi(m[2])
	return major > 4 || major == 4 && minor >= 5
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
