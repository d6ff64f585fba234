package job

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// FieldText reads a structured answer's JSON text as a provider streams it
// and yields, fragment by fragment, the growing value of one top-level
// string member: the job type's stream field (say "text" or "summary").
// A streamed job's deltas carry that text, so a client shows words as they
// form, not JSON fragments. With no field named, the fragments pass as they
// are. It never fails: text that is not the named member (other members,
// nested objects, a second occurrence) yields nothing, and a broken escape
// yields U+FFFD; the final answer is checked against the contract as ever.
type FieldText struct {
	field string

	depth int
	inStr bool
	esc   bool
	// hex gathers a \uXXXX escape's digits; high holds a high surrogate
	// waiting for its pair.
	hex  []byte
	high rune

	role     strRole
	key      strings.Builder
	keyOver  bool // the key is longer than any field name: it matches none
	lastKey  string
	expect   expectation
	finished bool // the field's value was read whole
	// carry holds the start of a UTF-8 sequence a fragment cut: a delta
	// is always whole characters.
	carry []byte
}

type strRole int

const (
	roleOther strRole = iota
	roleKey
	roleField
)

type expectation int

const (
	expectKey expectation = iota
	expectColon
	expectValue
	expectComma
)

// maxFieldName bounds the key text gathered to compare with the field.
const maxFieldName = 64

// NewFieldText reads the member named field ("" passes fragments as they
// are).
func NewFieldText(field string) *FieldText { return &FieldText{field: field} }

// Write takes the answer's next fragment and returns the field's text it
// adds ("" when it adds none).
func (f *FieldText) Write(fragment string) string {
	if f.field == "" {
		return fragment
	}
	var out strings.Builder
	out.Write(f.carry)
	f.carry = nil
	for i := 0; i < len(fragment); i++ {
		c := fragment[i]
		if f.inStr {
			f.inString(c, &out)
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			f.inStr = true
			f.role = roleOther
			if f.depth == 1 && f.expect == expectKey {
				f.role = roleKey
				f.key.Reset()
				f.keyOver = false
			} else if f.depth == 1 && f.expect == expectValue && f.lastKey == f.field && !f.finished {
				f.role = roleField
			}
		case ':':
			if f.depth == 1 && f.expect == expectColon {
				f.expect = expectValue
			}
		case ',':
			if f.depth == 1 {
				f.expect = expectKey
			}
		case '{', '[':
			if f.depth == 1 && f.expect == expectValue {
				f.expect = expectComma
			}
			f.depth++
			if f.depth == 1 {
				f.expect = expectKey
			}
		case '}', ']':
			f.depth--
		default:
			// A number or a literal: a value, not the field's string.
			if f.depth == 1 && f.expect == expectValue {
				f.expect = expectComma
			}
		}
	}
	return f.whole(out.String())
}

// whole returns s up to its last complete character and keeps the rest
// for the next fragment.
func (f *FieldText) whole(s string) string {
	end := len(s)
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				end = i
			}
			break
		}
	}
	f.carry = append(f.carry, s[end:]...)
	return s[:end]
}

// inString reads byte c of a string.
func (f *FieldText) inString(c byte, out *strings.Builder) {
	switch {
	case f.hex != nil:
		f.hex = append(f.hex, c)
		if len(f.hex) == 4 {
			f.unicode(out)
		}
	case f.esc:
		f.esc = false
		switch c {
		case 'u':
			f.hex = make([]byte, 0, 4)
		case 'n':
			f.put(out, "\n")
		case 't':
			f.put(out, "\t")
		case 'r':
			f.put(out, "\r")
		case 'b':
			f.put(out, "\b")
		case 'f':
			f.put(out, "\f")
		case '"', '\\', '/':
			f.put(out, string(c))
		default:
			f.put(out, string(utf8.RuneError))
		}
	case c == '\\':
		f.esc = true
	case c == '"':
		f.flushHigh(out)
		f.inStr = false
		switch f.role {
		case roleKey:
			f.lastKey = ""
			if !f.keyOver {
				f.lastKey = f.key.String()
			}
			f.expect = expectColon
		case roleField:
			f.finished = true
			f.expect = expectComma
		default:
			if f.depth == 1 && f.expect == expectValue {
				f.expect = expectComma
			}
		}
	default:
		f.flushHigh(out)
		// Raw bytes of the string (UTF-8 passes through byte by byte;
		// the builder joins a sequence split across fragments).
		f.putByte(out, c)
	}
}

// unicode ends a \uXXXX escape.
func (f *FieldText) unicode(out *strings.Builder) {
	var r rune
	for _, h := range f.hex {
		r <<= 4
		switch {
		case h >= '0' && h <= '9':
			r |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			r |= rune(h-'a') + 10
		case h >= 'A' && h <= 'F':
			r |= rune(h-'A') + 10
		default:
			r = -1
		}
		if r < 0 {
			break
		}
	}
	f.hex = nil
	switch {
	case r < 0:
		f.flushHigh(out)
		f.put(out, string(utf8.RuneError))
	case utf16.IsSurrogate(r) && r < 0xdc00:
		f.flushHigh(out)
		f.high = r
	case utf16.IsSurrogate(r):
		if f.high != 0 {
			f.put(out, string(utf16.DecodeRune(f.high, r)))
			f.high = 0
		} else {
			f.put(out, string(utf8.RuneError))
		}
	default:
		f.flushHigh(out)
		f.put(out, string(r))
	}
}

// flushHigh writes a high surrogate that no low one followed as U+FFFD.
func (f *FieldText) flushHigh(out *strings.Builder) {
	if f.high != 0 {
		f.high = 0
		f.put(out, string(utf8.RuneError))
	}
}

func (f *FieldText) put(out *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		f.putByte(out, s[i])
	}
}

func (f *FieldText) putByte(out *strings.Builder, c byte) {
	switch f.role {
	case roleField:
		out.WriteByte(c)
	case roleKey:
		if f.key.Len() >= maxFieldName {
			f.keyOver = true
			return
		}
		f.key.WriteByte(c)
	}
}
