// Package sealtest is the conformance suite of lifecycle.Sealer and
// lifecycle.Opener: every implementation (sealbox on this machine, kmsseal
// on moto's KMS) runs it.
package sealtest

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Pair is one key's sealing and opening sides.
type Pair struct {
	Sealer lifecycle.Sealer
	Opener lifecycle.Opener
}

// Run runs the suite; newPair gives a pair over a new key at each call.
func Run(t *testing.T, newPair func(t *testing.T) Pair) {
	t.Helper()
	scope := lifecycle.SealScope{Owner: "owner-a", EndpointID: "ep_00000000000000000000000000000001"}
	secret, err := lifecycle.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(secret, job.SecretPrefix)
	rawKey, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ASealedSecretOpensOnlyForItsEndpoint", func(t *testing.T) {
		t.Parallel()
		p := newPair(t)
		sealed, err := p.Sealer.Seal(t.Context(), scope, secret)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Opener.Open(t.Context(), scope, sealed)
		if err != nil || got != secret {
			t.Fatalf("Open = %q, %v; want the secret back", got, err)
		}
		others := []lifecycle.SealScope{
			{Owner: scope.Owner, EndpointID: "ep_00000000000000000000000000000002"},
			{Owner: "owner-b", EndpointID: scope.EndpointID},
		}
		for _, other := range others {
			if got, err := p.Opener.Open(t.Context(), other, sealed); !errors.Is(err, lifecycle.ErrSealed) {
				t.Errorf("Open for %+v = %q, %v; want ErrSealed", other, got, err)
			}
		}
	})

	t.Run("TheSealedFormHoldsNoPlaintext", func(t *testing.T) {
		t.Parallel()
		p := newPair(t)
		a, err := p.Sealer.Seal(t.Context(), scope, secret)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Sealer.Seal(t.Context(), scope, secret)
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Error("two seals of one secret are equal: the seal is not randomized")
		}
		for _, sealed := range []string{a, b} {
			if strings.Contains(sealed, body) || strings.Contains(sealed, job.SecretPrefix) {
				t.Errorf("sealed %q shows the secret", sealed)
			}
			// Nor the key bytes in any base64 alignment of the sealed value.
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
				_, rest, _ := strings.Cut(sealed, ":")
				if dec, err := enc.DecodeString(rest); err == nil && strings.Contains(string(dec), string(rawKey)) {
					t.Errorf("sealed %q holds the secret's bytes", sealed)
				}
			}
		}
	})

	t.Run("AnotherKeyOrATamperedValueDoesNotOpen", func(t *testing.T) {
		t.Parallel()
		p, q := newPair(t), newPair(t)
		sealed, err := p.Sealer.Seal(t.Context(), scope, secret)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := q.Opener.Open(t.Context(), scope, sealed); err == nil {
			t.Errorf("another key opened it: %q", got)
		}
		// A character in the middle: all six of its bits are content (the
		// last one's low bits may be padding a lenient decoder ignores,
		// which made this case pass or fail by chance).
		mid := len(sealed) / 2
		flip := byte('A')
		if sealed[mid] == 'A' {
			flip = 'B'
		}
		cases := map[string]string{
			"tampered":  sealed[:mid] + string(flip) + sealed[mid+1:],
			"truncated": sealed[:len(sealed)/2],
			"empty":     "",
			"clear":     secret,
		}
		for name, v := range cases {
			if got, err := p.Opener.Open(t.Context(), scope, v); err == nil {
				t.Errorf("%s value opened: %q", name, got)
			}
		}
	})
}
