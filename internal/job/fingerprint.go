package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// ErrDuplicateKey reports a JSON object that names the same key twice. Such
// input has no single meaning (parsers disagree on which value wins), so it is
// refused rather than fingerprinted.
var ErrDuplicateKey = errors.New("duplicate key in JSON object")

// NewID derives a job's ID from its owner and idempotency key. Because the ID
// is a function of (owner, key), the uniqueness of (owner, key) is enforced by
// one conditional PutItem on the job's own key — no second item, no
// transaction, no read before the write. The hash hides both inputs.
func NewID(owner, key string) string {
	h := sha256.New()
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	fmt.Fprintf(h, "%d:%s|%d:%s", len(owner), owner, len(key), key)
	sum := h.Sum(nil)
	return "job_" + idEncoding.EncodeToString(sum[:16])
}

const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var idEncoding = base32.NewEncoding(idAlphabet).WithPadding(base32.NoPadding)

// IncarnationID is the ID of the n-th job an (owner, key) names: base
// (NewID) for the first, base + "u" + n after (the base's alphabet has no
// "u"). A key reused after its job expired names a new job, with an ID —
// and so an execution name and provider Idempotency-Keys — of its own.
func IncarnationID(base string, n int) string {
	if n == 0 {
		return base
	}
	return base + "u" + strconv.Itoa(n)
}

// ItemKey splits a job ID into its (owner, key)'s base ID, which keys the
// stored job, and its incarnation.
func ItemKey(id string) (base string, incarnation int) {
	if i := strings.IndexByte(id, 'u'); i > 0 {
		if n, err := strconv.Atoi(id[i+1:]); err == nil && n > 0 && strconv.Itoa(n) == id[i+1:] {
			return id[:i], n
		}
	}
	return id, 0
}

// ValidID reports whether id could name a job at all ("job_" and 1–64
// lowercase letters or digits; every NewID passes), so that garbage from a
// URL never reaches the store, whose key limits would make it a fault.
func ValidID(id string) bool {
	rest, ok := strings.CutPrefix(id, "job_")
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for _, c := range rest {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// Fingerprint is a hash of the request that created a job, over its
// canonical form: object key order, whitespace and number spelling
// (1, 1.0, 1e0) do not change it.
func Fingerprint(jobType string, input json.RawMessage, providers []string) (string, error) {
	canon, err := Canonical(input)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "type=%q\ninput=%s\nproviders=", jobType, canon)
	for _, p := range providers {
		fmt.Fprintf(h, "%q,", p)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fingerprintTier is fp of a request that also names tier.
func fingerprintTier(fp string, tier Tier) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\ntier=%q", fp, tier)
	return hex.EncodeToString(h.Sum(nil))
}

// Canonical returns the canonical encoding of a JSON value: objects with keys
// sorted, no insignificant whitespace, numbers as exact reduced fractions.
func Canonical(raw json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonValue(dec, &buf); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return buf.Bytes(), nil
}

func canonValue(dec *json.Decoder, buf *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, buf)
		case '[':
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonValue(dec, buf); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ']'
			buf.WriteByte(']')
			return err
		}
		return fmt.Errorf("unexpected %v", t)
	case json.Number:
		// Bounded before math/big sees it: an exponent of a million takes
		// a megabyte and tens of milliseconds to expand.
		if err := checkNumber(t.String(), ""); err != nil {
			return err
		}
		r, ok := new(big.Rat).SetString(t.String())
		if !ok {
			return fmt.Errorf("bad number %q", t)
		}
		buf.WriteString(r.RatString())
	case string:
		b, _ := json.Marshal(t)
		buf.Write(b)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, buf *bytes.Buffer) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("%w: %q", ErrDuplicateKey, key)
		}
		seen[key] = true
		var vb bytes.Buffer
		if err := canonValue(dec, &vb); err != nil {
			return err
		}
		members = append(members, member{key, vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(m.key)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(m.val)
	}
	buf.WriteByte('}')
	return nil
}
