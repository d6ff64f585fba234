package sim

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// apiError is a request refused by a simulator, in the terms of its API;
// each format writes it in its own documented error body.
type apiError struct {
	status int
	typ    string // the error type (OpenAI type, Anthropic type, AWS error code)
	code   string // OpenAI's code; "" is null
	param  string // OpenAI's param; "" is null
	msg    string
}

func (e *apiError) Error() string { return e.typ + ": " + e.msg }

// object is a decoded JSON object whose members are validated one by one.
type object map[string]json.RawMessage

// parseObject decodes raw as a JSON object.
func parseObject(raw []byte) (object, bool) {
	var o object
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) || json.Unmarshal(raw, &o) != nil {
		return nil, false
	}
	return o, true
}

// unknown returns the members of o not in allowed, sorted.
func (o object) unknown(allowed ...string) []string {
	var out []string
	for k := range o {
		if !slices.Contains(allowed, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// has reports whether member k is present and not null.
func (o object) has(k string) bool {
	v, ok := o[k]
	return ok && jsonKind(v) != "null"
}

// jsonKind names a JSON value's type as the APIs' messages do.
func jsonKind(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "null"
	}
	switch s[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// str decodes a string member.
func (o object) str(k string) (string, bool) {
	var s string
	if json.Unmarshal(o[k], &s) != nil {
		return "", false
	}
	return s, true
}

// num decodes a number member.
func (o object) num(k string) (float64, bool) {
	if jsonKind(o[k]) != "number" {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(o[k])), 64)
	return f, err == nil
}

// integer decodes an integer member.
func (o object) integer(k string) (int, bool) {
	f, ok := o.num(k)
	if !ok || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

// array decodes an array member.
func (o object) array(k string) ([]json.RawMessage, bool) {
	var a []json.RawMessage
	if jsonKind(o[k]) != "array" || json.Unmarshal(o[k], &a) != nil {
		return nil, false
	}
	return a, true
}

// child decodes an object member.
func (o object) child(k string) (object, bool) { return parseObject(o[k]) }

// number renders a JSON number as the APIs echo it (3, 0.5).
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// quoteList renders values as 'a', 'b', and 'c'.
func quoteList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	case 2:
		return q[0] + " and " + q[1]
	}
	return strings.Join(q[:len(q)-1], ", ") + ", and " + q[len(q)-1]
}

// orList renders values as 'a', 'b' or 'c' (Anthropic's enum messages).
func orList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = "'" + v + "'"
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
