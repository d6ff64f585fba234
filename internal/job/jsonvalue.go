package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on every JSON value onejob accepts — request inputs, provider
// outputs, resolution results — checked before any schema validation,
// fingerprinting or semantic check, so that the work one value can cause is
// bounded by its size. Numbers are held to the interoperable range of
// I-JSON (RFC 7493 §2.2: IEEE 754 doubles), with enough digits for any
// exact int64 or decimal a client means.
const (
	// MaxJSONDepth bounds nesting (RFC 8259 §9 lets a parser set one).
	MaxJSONDepth = 64
	// MaxNumberLength bounds a number literal's characters.
	MaxNumberLength = 40
	// MaxNumberExponent bounds the decimal exponent of a non-zero number:
	// doubles reach about 1.8e308 and 4.9e-324.
	MaxNumberExponent = 308
	// MaxObjectMembers bounds one object's members.
	MaxObjectMembers = 10_000
)

// ErrJSON is wrapped by every *JSONError.
var ErrJSON = errors.New("JSON value refused")

// JSONError says why a JSON value was refused and where.
type JSONError struct {
	// Pointer is the RFC 6901 pointer to the offending value ("" for the
	// whole document).
	Pointer string
	Reason  string
}

func (e *JSONError) Error() string {
	if e.Pointer == "" {
		return e.Reason
	}
	return e.Reason + " at " + e.Pointer
}

// Unwrap makes errors.Is(err, ErrJSON) hold.
func (e *JSONError) Unwrap() error { return ErrJSON }

// CheckJSON accepts exactly one JSON value in UTF-8 within the bounds above,
// with no object naming a key twice and nothing but whitespace after it.
// Duplicate keys are refused: parsers disagree on which value wins, so such
// a value has no single meaning (RFC 8259 §4, RFC 7493 §2.3). Every refusal
// is a *JSONError.
func CheckJSON(b []byte) error {
	if !utf8.Valid(b) {
		return &JSONError{Reason: "not valid UTF-8"}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return &JSONError{Reason: "empty"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := walkJSON(dec, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &JSONError{Reason: fmt.Sprintf("unexpected data after the JSON value (byte %d)", dec.InputOffset())}
	}
	return nil
}

func walkJSON(dec *json.Decoder, ptr string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(dec)
	}
	switch t := tok.(type) {
	case json.Number:
		return checkNumber(string(t), ptr)
	case json.Delim:
		if depth >= MaxJSONDepth {
			return &JSONError{Pointer: ptr, Reason: fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth)}
		}
		switch t {
		case '{':
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return syntaxError(dec)
				}
				key, _ := kt.(string)
				p := ptr + Pointer(key)
				if seen[key] {
					return &JSONError{Pointer: p, Reason: "duplicate object key"}
				}
				if len(seen) == MaxObjectMembers {
					return &JSONError{Pointer: ptr, Reason: fmt.Sprintf("more than %d members in one object", MaxObjectMembers)}
				}
				seen[key] = true
				if err := walkJSON(dec, p, depth+1); err != nil {
					return err
				}
			}
		case '[':
			for i := 0; dec.More(); i++ {
				if err := walkJSON(dec, ptr+"/"+strconv.Itoa(i), depth+1); err != nil {
					return err
				}
			}
		default:
			return syntaxError(dec)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return syntaxError(dec)
		}
	}
	return nil
}

func syntaxError(dec *json.Decoder) error {
	return &JSONError{Reason: fmt.Sprintf("not valid JSON (near byte %d)", dec.InputOffset())}
}

// Pointer builds an RFC 6901 JSON Pointer from reference tokens.
func Pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// checkNumber holds a number literal (already valid JSON) to the bounds: at
// most MaxNumberLength characters, and a non-zero value's decimal exponent
// (the power of ten of its leading digit) within ±MaxNumberExponent.
func checkNumber(lit, ptr string) error {
	if len(lit) > MaxNumberLength {
		return &JSONError{Pointer: ptr, Reason: fmt.Sprintf("number literal longer than %d characters", MaxNumberLength)}
	}
	mantissa, expPart, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(lit, "-")), "e")
	exp := 0
	if expPart != "" {
		// At most 40 characters, so the exponent fits an int.
		e, err := strconv.Atoi(expPart)
		if err != nil {
			return &JSONError{Pointer: ptr, Reason: "malformed number"}
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mantissa, ".")
	var lead int // the power of ten of the leading significant digit, before exp
	switch {
	case strings.Trim(intPart, "0") != "":
		lead = len(strings.TrimLeft(intPart, "0")) - 1
	case strings.Trim(frac, "0") != "":
		lead = -(len(frac) - len(strings.TrimLeft(frac, "0")) + 1)
	default:
		return nil // zero, whatever its exponent
	}
	if e := lead + exp; e > MaxNumberExponent || e < -MaxNumberExponent {
		return &JSONError{Pointer: ptr, Reason: fmt.Sprintf("number outside the interoperable range (decimal exponent %d, limit ±%d)", e, MaxNumberExponent)}
	}
	return nil
}
