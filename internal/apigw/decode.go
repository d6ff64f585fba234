package apigw

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// MaxBodyBytes bounds a request body (after base64 decoding): 256 KiB.
const MaxBodyBytes = 256 << 10

// maxDepth bounds JSON nesting. Bodies are walked recursively here and
// again when fingerprinted; no job input needs more.
const maxDepth = 64

// rawBody returns the request body, base64-decoded when API Gateway flagged
// it so, refusing bodies over MaxBodyBytes.
func rawBody(ev *events.APIGatewayV2HTTPRequest) ([]byte, error) {
	if !ev.IsBase64Encoded {
		if len(ev.Body) > MaxBodyBytes {
			return nil, tooLarge()
		}
		return []byte(ev.Body), nil
	}
	if base64.StdEncoding.DecodedLen(len(ev.Body)) > MaxBodyBytes+3 {
		return nil, tooLarge()
	}
	b, err := base64.StdEncoding.DecodeString(ev.Body)
	if err != nil {
		return nil, fail(CodeMalformedJSON, "the body is flagged as base64 but does not decode")
	}
	if len(b) > MaxBodyBytes {
		return nil, tooLarge()
	}
	return b, nil
}

func tooLarge() *Error {
	return fail(CodePayloadTooLarge, fmt.Sprintf("the body exceeds %d bytes", MaxBodyBytes))
}

// requireJSON accepts application/json, in UTF-8 if a charset is named.
func requireJSON(contentType string) error {
	const want = "the Content-Type must be application/json"
	if contentType == "" {
		return fail(CodeUnsupportedMediaType, want)
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return fail(CodeUnsupportedMediaType, want)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return fail(CodeUnsupportedMediaType, "the body must be UTF-8 encoded")
	}
	return nil
}

// checkJSON accepts exactly one JSON value in UTF-8, with no object naming
// a key twice and nothing but whitespace after it. Duplicate keys are
// refused as malformed: parsers disagree on which value wins, so such a body
// has no single meaning (RFC 8259 §4, I-JSON RFC 7493 §2.3) and cannot be
// fingerprinted.
func checkJSON(b []byte) error {
	if !utf8.Valid(b) {
		return fail(CodeMalformedJSON, "the body is not valid UTF-8")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fail(CodeMalformedJSON, "the body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := walk(dec, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail(CodeMalformedJSON, fmt.Sprintf("unexpected data after the JSON value (byte %d)", dec.InputOffset()))
	}
	return nil
}

func walk(dec *json.Decoder, ptr string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(dec)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= maxDepth {
		return invalid(FieldError{Pointer: ptr, Detail: fmt.Sprintf("nested deeper than %d levels", maxDepth)})
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return syntaxError(dec)
			}
			key, _ := kt.(string)
			p := ptr + "/" + escapePointer(key)
			if seen[key] {
				return fail(CodeMalformedJSON, "duplicate object key at "+p)
			}
			seen[key] = true
			if err := walk(dec, p, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walk(dec, ptr+"/"+strconv.Itoa(i), depth+1); err != nil {
				return err
			}
		}
	default:
		return syntaxError(dec)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return syntaxError(dec)
	}
	return nil
}

func syntaxError(dec *json.Decoder) error {
	return fail(CodeMalformedJSON, fmt.Sprintf("the body is not valid JSON (near byte %d)", dec.InputOffset()))
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// members splits a checked JSON document into its top-level members,
// refusing anything but an object and any member not in allowed.
func members(b []byte, allowed ...string) (map[string]json.RawMessage, []FieldError) {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return nil, []FieldError{{Pointer: "", Detail: "the body must be a JSON object"}}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, []FieldError{{Pointer: "", Detail: "the body must be a JSON object"}}
	}
	var unknown []string
	for k := range m {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	var errs []FieldError
	for _, k := range unknown {
		errs = append(errs, FieldError{Pointer: "/" + escapePointer(k), Detail: "unknown member"})
	}
	return m, errs
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// stringMember reads a required, non-empty string member.
func stringMember(m map[string]json.RawMessage, name string, maxLen int) (string, *FieldError) {
	raw, ok := m[name]
	if !ok {
		return "", &FieldError{Pointer: "/" + name, Detail: "is required"}
	}
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", &FieldError{Pointer: "/" + name, Detail: "must be a string"}
	}
	if strings.TrimSpace(s) == "" {
		return "", &FieldError{Pointer: "/" + name, Detail: "must not be empty"}
	}
	if len(s) > maxLen {
		return "", &FieldError{Pointer: "/" + name, Detail: fmt.Sprintf("must be at most %d bytes", maxLen)}
	}
	return s, nil
}

// compact removes insignificant whitespace from checked JSON.
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}
