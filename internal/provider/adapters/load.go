package adapters

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/awssecrets"
)

// Source says where a function's provider configuration comes from.
type Source struct {
	// JSON is the configuration itself (local runs); it wins over the secret.
	JSON string
	// SecretARN names the Secrets Manager secret holding the configuration
	// (when JSON is empty) and the credentials it refers to.
	SecretARN string
	// Secrets reads SecretARN; required with it.
	Secrets *secretsmanager.Client
	// AWSCredentials sign Bedrock calls (the function's role).
	AWSCredentials aws.CredentialsProvider
	Logger         *slog.Logger
}

// Load builds the provider registry a run function calls. An empty
// configuration ("" or "{}") is an empty registry: a deployment without
// providers yet still starts, and its attempts fail as not configured.
func Load(ctx context.Context, src Source) (*provider.Registry, error) {
	raw := src.JSON
	var secrets provider.SecretSource
	if src.SecretARN != "" {
		if src.Secrets == nil {
			return nil, fmt.Errorf("adapters: a secrets client is required to read %s", src.SecretARN)
		}
		s, err := awssecrets.New(src.Secrets)
		if err != nil {
			return nil, err
		}
		secrets = s
		if raw == "" {
			out, err := src.Secrets.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(src.SecretARN)})
			if err != nil {
				return nil, fmt.Errorf("read provider config: %w", err)
			}
			raw = aws.ToString(out.SecretString)
		}
	}
	if raw == "" || raw == "{}" {
		return provider.RegistryOf()
	}
	cfg, err := provider.ParseConfig([]byte(raw))
	if err != nil {
		return nil, err
	}
	return NewRegistry(ctx, cfg, secrets, Options{Logger: src.Logger, AWSCredentials: src.AWSCredentials})
}
