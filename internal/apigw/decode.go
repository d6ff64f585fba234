package apigw

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"sort"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/job"
)

// MaxBodyBytes bounds a request body (after base64 decoding): 256 KiB.
const MaxBodyBytes = 256 << 10

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

// checkJSON holds a body to job.CheckJSON's bounds (one UTF-8 JSON value,
// no duplicate keys, interoperable numbers, bounded nesting and members)
// before anything else reads it: a refused body is malformed-json, and
// costs no more than reading it once.
func checkJSON(b []byte) error {
	var je *job.JSONError
	if err := job.CheckJSON(b); errors.As(err, &je) {
		detail := "the body is refused: " + je.Reason
		if je.Pointer != "" {
			detail += " at " + je.Pointer
		}
		return fail(CodeMalformedJSON, detail)
	} else if err != nil {
		return err
	}
	return nil
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
		errs = append(errs, FieldError{Pointer: job.Pointer(k), Detail: "unknown member"})
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
