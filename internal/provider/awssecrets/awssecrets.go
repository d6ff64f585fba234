// Package awssecrets is a provider.SecretSource backed by AWS Secrets Manager.
package awssecrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/onejob/onejob/internal/provider"
)

// ErrInvalidConfig is wrapped by construction errors.
var ErrInvalidConfig = errors.New("invalid secrets manager config")

// GetSecretValueAPI is the part of *secretsmanager.Client the source uses.
type GetSecretValueAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// ClientConfig builds a client without config.LoadDefaultConfig, so a custom
// HTTP client works where AWS_CA_BUNDLE is set.
type ClientConfig struct {
	Region       string
	BaseEndpoint string
	Credentials  aws.CredentialsProvider
	HTTPClient   *http.Client
}

// NewClient returns a Secrets Manager client.
func NewClient(cfg ClientConfig) (*secretsmanager.Client, error) {
	if cfg.Region == "" || cfg.Credentials == nil {
		return nil, fmt.Errorf("%w: region and credentials are required", ErrInvalidConfig)
	}
	opts := secretsmanager.Options{Region: cfg.Region, Credentials: cfg.Credentials}
	if cfg.BaseEndpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.BaseEndpoint)
	}
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	return secretsmanager.New(opts), nil
}

// Source resolves refs of the form "secret-id" (the whole SecretString) or
// "secret-id#key" (one string field of a JSON SecretString, the usual way to
// keep several API keys in one secret). Secrets are read once at registry
// construction, so there is no cache.
type Source struct {
	client GetSecretValueAPI
}

// New returns a Source using client.
func New(client GetSecretValueAPI) (*Source, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is required", ErrInvalidConfig)
	}
	return &Source{client: client}, nil
}

// Secret implements provider.SecretSource. Errors name the ref, never a value.
func (s *Source) Secret(ctx context.Context, ref string) (provider.Secret, error) {
	id, key, hasKey := strings.Cut(ref, "#")
	out, err := s.client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return "", fmt.Errorf("secrets manager %s: %w", id, provider.ErrSecretNotFound)
		}
		return "", fmt.Errorf("secrets manager %s: %w", id, err)
	}
	value := aws.ToString(out.SecretString)
	if hasKey {
		var fields map[string]any
		if err := json.Unmarshal([]byte(value), &fields); err != nil {
			return "", fmt.Errorf("secrets manager %s: secret is not a JSON object", id)
		}
		v, ok := fields[key].(string)
		if !ok {
			return "", fmt.Errorf("secrets manager %s: key %q: %w", id, key, provider.ErrSecretNotFound)
		}
		value = v
	}
	if strings.TrimSpace(value) == "" {
		return "", fmt.Errorf("secrets manager %s: empty value: %w", ref, provider.ErrSecretNotFound)
	}
	return provider.Secret(value), nil
}
