package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// ErrSecretNotFound is returned by a SecretSource that has no such secret.
var ErrSecretNotFound = errors.New("secret not found")

const redacted = "[REDACTED]"

// Secret is a credential. Every printing path (fmt verbs, slog, JSON) yields
// "[REDACTED]"; only Reveal, called where the value goes on the wire, exposes
// it.
type Secret string

// Reveal returns the raw credential. Use it only to build an outgoing header.
func (s Secret) Reveal() string { return string(s) }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s == "" }

func (s Secret) String() string               { return redacted }
func (s Secret) GoString() string             { return redacted }
func (s Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// SecretSource resolves a credential reference (an env var name, a Secrets
// Manager secret id) to its value.
type SecretSource interface {
	Secret(ctx context.Context, ref string) (Secret, error)
}

// EnvSecrets reads secrets from environment variables named by the ref.
type EnvSecrets struct {
	// Lookup defaults to os.LookupEnv; tests inject a map.
	Lookup func(string) (string, bool)
}

// Secret implements SecretSource. An unset or blank variable is "not found"
// so a misconfigured deployment fails at startup rather than sending an empty
// key.
func (e EnvSecrets) Secret(_ context.Context, ref string) (Secret, error) {
	lookup := e.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(ref)
	if !ok || strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("env %s: %w", ref, ErrSecretNotFound)
	}
	return Secret(v), nil
}
