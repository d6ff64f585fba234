// Package sealbox seals webhook signing secrets on this machine (make run,
// tests), as KMS does deployed: HPKE (RFC 9180: X25519, HKDF-SHA256,
// AES-256-GCM) to a key pair whose private half only the notify side
// holds. The API side gets the public key: what it seals it cannot open.
package sealbox

import (
	"context"
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/onejob/onejob/internal/lifecycle"
)

// Prefix starts every value this package seals.
const Prefix = "hpke1:"

var (
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES256GCM()
)

// info binds a sealed secret to its endpoint: opened for another, it fails.
func info(s lifecycle.SealScope) []byte {
	return []byte("onejob webhook secret\x00" + s.Owner + "\x00" + s.EndpointID)
}

// Sealer seals to a public key.
type Sealer struct{ pub hpke.PublicKey }

// NewSealer seals to pub.
func NewSealer(pub *ecdh.PublicKey) (*Sealer, error) {
	k, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return &Sealer{pub: k}, nil
}

// Seal implements lifecycle.Sealer.
func (s *Sealer) Seal(_ context.Context, scope lifecycle.SealScope, secret string) (string, error) {
	ct, err := hpke.Seal(s.pub, kdf, aead, info(scope), []byte(secret))
	if err != nil {
		return "", err
	}
	return Prefix + base64.RawStdEncoding.EncodeToString(ct), nil
}

// Opener opens with the private key.
type Opener struct{ priv hpke.PrivateKey }

// NewOpener opens with priv.
func NewOpener(priv *ecdh.PrivateKey) (*Opener, error) {
	k, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return &Opener{priv: k}, nil
}

// Open implements lifecycle.Opener.
func (o *Opener) Open(_ context.Context, scope lifecycle.SealScope, sealed string) (string, error) {
	raw, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return "", fmt.Errorf("%w: not sealed by this machine's key", lifecycle.ErrSealed)
	}
	ct, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %w", lifecycle.ErrSealed, err)
	}
	pt, err := hpke.Open(o.priv, kdf, aead, info(scope), ct)
	if err != nil {
		return "", fmt.Errorf("%w: %w", lifecycle.ErrSealed, err)
	}
	return string(pt), nil
}

// NewPair is a new key's sealing and opening sides (a stack, a test).
func NewPair() (*Sealer, *Opener, error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	s, err := NewSealer(key.PublicKey())
	if err != nil {
		return nil, nil, err
	}
	o, err := NewOpener(key)
	if err != nil {
		return nil, nil, err
	}
	return s, o, nil
}

// NewKey is a new private key (held in memory: a stack whose data goes
// with it).
func NewKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

// LoadOrCreate reads the private key at path, or makes one there (mode
// 0600) when there is none; created says which. Runs started together
// agree on one key: it is written whole to a temporary file first and
// linked into place only if path is still free.
func LoadOrCreate(path string) (key *ecdh.PrivateKey, created bool, err error) {
	if key, err := load(path); !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	if key, err = NewKey(); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(base64.StdEncoding.EncodeToString(key.Bytes()) + "\n"); err != nil {
		tmp.Close()
		return nil, false, err
	}
	if err := tmp.Close(); err != nil { // CreateTemp made it 0600
		return nil, false, err
	}
	switch err := os.Link(tmp.Name(), path); {
	case errors.Is(err, fs.ErrExist):
		key, err := load(path) // another run's, complete
		return key, false, err
	case err != nil:
		return nil, false, err
	}
	return key, true, nil
}

func load(path string) (*ecdh.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s is not a secrets key (base64 of an X25519 private key): %w", path, err)
	}
	key, err := ecdh.X25519().NewPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is not a secrets key: %w", path, err)
	}
	return key, nil
}
