package checkexpr

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

type tokKind int

const (
	tokIdent tokKind = iota
	tokNumber
	tokString
	tokOp
)

type token struct {
	kind tokKind
	text string // source text; for tokString the source including quotes
	off  int
	str  string // tokString: the unescaped value
	// tokNumber: float (has '.' or an exponent) or hex ("0x…"); the value is
	// parsed with its sign by the parser, as CEL does (-9223372036854775808).
	float, hex bool
}

// ops in longest-first order; "//" starts a comment and is handled before.
var ops = []string{"||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "(", ")", "[", "]", ".", ",", "+", "-", "*", "/", "%"}

// lex splits src into tokens following CEL's lexical grammar; it refuses
// every token CEL has that the subset does not (uint, bytes, triple-quoted
// strings, `?`, `:`, `{`, backquoted names) rather than reading it otherwise.
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '\'' || c == '"':
			t, err := lexString(s, i, false)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += len(t.text)
		case (c == 'r' || c == 'R') && i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '"'):
			t, err := lexString(s, i+1, true)
			if err != nil {
				return nil, err
			}
			t.off, t.text = i, s[i:i+1+len(t.text)]
			toks = append(toks, t)
			i += len(t.text)
		case (c == 'b' || c == 'B') && isBytesPrefix(s[i+1:]):
			return nil, fmt.Errorf("bytes literals are not supported (offset %d)", i)
		case c >= '0' && c <= '9':
			t, err := lexNumber(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += len(t.text)
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, token{kind: tokIdent, text: s[i:j], off: i})
			i = j
		default:
			matched := false
			for _, op := range ops {
				if strings.HasPrefix(s[i:], op) {
					toks = append(toks, token{kind: tokOp, text: op, off: i})
					i += len(op)
					matched = true
					break
				}
			}
			if !matched {
				r, _ := utf8.DecodeRuneInString(s[i:])
				switch r {
				case '?', ':':
					return nil, fmt.Errorf("the conditional operator ?: is not supported (offset %d)", i)
				case '{', '}':
					return nil, fmt.Errorf("map literals are not supported (offset %d)", i)
				}
				return nil, fmt.Errorf("unexpected character %q at offset %d", r, i)
			}
		}
	}
	return toks, nil
}

// isBytesPrefix reports whether s, after a b, starts a bytes literal
// (b'…', br'…').
func isBytesPrefix(s string) bool {
	if len(s) > 0 && (s[0] == 'r' || s[0] == 'R') {
		s = s[1:]
	}
	return len(s) > 0 && (s[0] == '\'' || s[0] == '"')
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// lexNumber reads CEL's NUM_INT (digits, or 0x and hex digits) or NUM_FLOAT
// (digits '.' digits [exponent], or digits exponent). `1.` is not a number
// in CEL, and neither is a number run into a name (1u, 1abc).
func lexNumber(s string, i int) (token, error) {
	t := token{kind: tokNumber, off: i}
	j := i
	if strings.HasPrefix(s[i:], "0x") {
		j += 2
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if j == i+2 {
			return t, fmt.Errorf("bad hex number at offset %d", i)
		}
		t.hex = true
	} else {
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
			t.float = true
			j += 2
			for j < len(s) && isDigit(s[j]) {
				j++
			}
		}
		if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
			k := j + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			if k < len(s) && isDigit(s[k]) {
				for k < len(s) && isDigit(s[k]) {
					k++
				}
				t.float = true
				j = k
			}
		}
	}
	if j < len(s) && (s[j] == 'u' || s[j] == 'U') && !t.float {
		return t, fmt.Errorf("unsigned integers are not supported (offset %d)", i)
	}
	if j < len(s) && (isIdentStart(s[j]) || s[j] == '.' && !(j+1 < len(s) && isIdentStart(s[j+1]))) {
		return t, fmt.Errorf("bad number %q at offset %d", s[i:j+1], i)
	}
	t.text = s[i:j]
	return t, nil
}

// lexString reads a quoted string starting at s[i] (the quote); raw strings
// (after an r prefix) keep backslashes as they are.
func lexString(s string, i int, raw bool) (token, error) {
	q := s[i]
	if strings.HasPrefix(s[i:], strings.Repeat(string(q), 3)) {
		return token{}, fmt.Errorf("triple-quoted strings are not supported (offset %d)", i)
	}
	var b strings.Builder
	j := i + 1
	for ; j < len(s) && s[j] != q; j++ {
		switch c := s[j]; {
		case c == '\n' || c == '\r':
			return token{}, fmt.Errorf("newline in string at offset %d (write \\n)", j)
		case c == '\\' && !raw:
			r, n, err := unescape(s[j:])
			if err != nil {
				return token{}, fmt.Errorf("%v at offset %d", err, j)
			}
			b.WriteRune(r)
			j += n - 1
		default:
			b.WriteByte(c)
		}
	}
	if j >= len(s) {
		return token{}, fmt.Errorf("unterminated string at offset %d", i)
	}
	return token{kind: tokString, text: s[i : j+1], off: i, str: b.String()}, nil
}

// unescape decodes the escape sequence at the start of s (which begins with
// a backslash) as CEL does for strings: \x and octal escapes name code
// points (so '\xff' is 'ÿ'), and every code point must be valid Unicode.
func unescape(s string) (r rune, n int, err error) {
	if len(s) < 2 {
		return 0, 0, fmt.Errorf("unterminated escape sequence")
	}
	// pairs of escape letter and the character it stands for
	const simple = "a\ab\bf\fn\nr\rt\tv\v\\\\''\"\"``??"
	c := s[1]
	for i := 0; i < len(simple); i += 2 {
		if simple[i] == c {
			return rune(simple[i+1]), 2, nil
		}
	}
	switch c {
	case 'x', 'X', 'u', 'U':
		digits := 2
		switch c {
		case 'u':
			digits = 4
		case 'U':
			digits = 8
		}
		if len(s) < 2+digits {
			return 0, 0, fmt.Errorf("escape \\%c needs %d hex digits", c, digits)
		}
		var v rune
		for _, h := range []byte(s[2 : 2+digits]) {
			if !isHex(h) {
				return 0, 0, fmt.Errorf("escape \\%c needs %d hex digits", c, digits)
			}
			v = v<<4 | rune(hexVal(h))
		}
		if !utf8.ValidRune(v) {
			return 0, 0, fmt.Errorf("escape %s is not a valid code point", s[:2+digits])
		}
		return v, 2 + digits, nil
	case '0', '1', '2', '3':
		if len(s) < 4 || s[2] < '0' || s[2] > '7' || s[3] < '0' || s[3] > '7' {
			return 0, 0, fmt.Errorf("octal escape needs three digits \\[0-3][0-7][0-7]")
		}
		return rune(c-'0')<<6 | rune(s[2]-'0')<<3 | rune(s[3]-'0'), 4, nil
	}
	r, _ = utf8.DecodeRuneInString(s[1:])
	return 0, 0, fmt.Errorf("invalid escape sequence \\%c (for a backslash write \\\\, or use a raw string r'...')", r)
}

func hexVal(h byte) byte {
	switch {
	case h >= 'a':
		return h - 'a' + 10
	case h >= 'A':
		return h - 'A' + 10
	}
	return h - '0'
}
