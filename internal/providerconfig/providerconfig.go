// Package providerconfig builds what the run function alone needs: the
// provider adapters from their configuration (environment or Secrets
// Manager). It is apart from package app so the other functions do not link
// the adapters.
package providerconfig

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/onejob/onejob/internal/app"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/provider/awssecrets"
)

// RunDeps are the run function's dependencies.
func RunDeps(ctx context.Context, rt *app.Runtime) (app.TaskDeps, error) {
	cat, err := jobtype.Load()
	if err != nil {
		return app.TaskDeps{}, err
	}
	reg, err := Registry(ctx, rt)
	if err != nil {
		return app.TaskDeps{}, err
	}
	return app.TaskDeps{Catalog: cat, Providers: reg}, nil
}

// Registry reads the provider configuration: ONEJOB_PROVIDERS holds it
// directly, or else the secret named by ONEJOB_PROVIDERS_SECRET_ARN does.
// credential_ref entries are "<secret-id>#<json-key>" references resolved
// through Secrets Manager, never logged.
func Registry(ctx context.Context, rt *app.Runtime) (*provider.Registry, error) {
	raw := rt.Env.Providers
	var secrets provider.SecretSource
	if rt.Env.ProvidersSecretARN != "" {
		client := secretsmanager.NewFromConfig(rt.AWS, func(o *secretsmanager.Options) {
			if ep := app.ServiceEndpoint(os.Getenv, "SECRETS_MANAGER"); ep != nil {
				o.BaseEndpoint = ep
			}
		})
		src, err := awssecrets.New(client)
		if err != nil {
			return nil, err
		}
		secrets = src
		if raw == "" {
			out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(rt.Env.ProvidersSecretARN)})
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
	return adapters.NewRegistry(ctx, cfg, secrets, adapters.Options{Logger: rt.Logger, AWSCredentials: rt.AWS.Credentials})
}
