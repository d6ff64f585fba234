package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What the API sends is data, never terminal control: an owner's name, a
// model, a reason, a request ID or a forged answer could carry ESC (colours,
// erasing lines, OSC 8 links, a window title), BEL, C1 controls or bidi
// overrides that reorder what an operator reads. The CLI shows each such
// character escaped: `\x1b` in its text, `\u001b` in JSON it prints.

// unsafeRune reports whether r must not reach a terminal raw: C0 and C1
// controls and DEL (newline and tab included: every field is one line),
// bidi controls, and the Unicode line and paragraph separators.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// termSafe is s with every unsafe rune escaped (\xNN below U+0080, \uNNNN
// above) and every byte that is not UTF-8 as \xNN.
func termSafe(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jsonSafe is JSON text with every unsafe rune written as its \uNNNN
// escape and every byte that is not UTF-8 as \ufffd: the same document
// (inside a string an escape means the character; outside one such a
// character was never valid JSON), safe to print.
func jsonSafe(doc []byte) string {
	s := string(doc)
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteString(`\ufffd`)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// decodeAPI decodes an API body into v and escapes every string in it
// (termSafe), so that whatever the CLI prints of it is safe.
func decodeAPI(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return err
	}
	cleanStrings(reflect.ValueOf(v), termSafe)
	return nil
}

// cleanStrings replaces every string reachable from v (embedded structs
// included) with clean's version of it.
func cleanStrings(v reflect.Value, clean func(string) string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			cleanStrings(v.Elem(), clean)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() || f.Anonymous {
				cleanStrings(v.Field(i), clean)
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw JSON: printed through jsonSafe
		}
		for i := range v.Len() {
			cleanStrings(v.Index(i), clean)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(clean(v.String()))
		}
	}
}

// compactJSON is raw JSON on one line, safe to print.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return oneLine(string(raw))
	}
	return jsonSafe(b.Bytes())
}
