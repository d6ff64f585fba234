// Package adapters wires every adapter kind into provider.NewRegistry. It
// exists because internal/provider cannot import its own adapters.
package adapters

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/anthropic"
	"github.com/onejob/onejob/internal/provider/bedrock"
	"github.com/onejob/onejob/internal/provider/openai"
	"github.com/onejob/onejob/internal/provider/webhook"
)

// ErrNoAWSCredentials: a bedrock provider is configured but Options has no
// AWS credentials provider.
var ErrNoAWSCredentials = errors.New("bedrock provider needs Options.AWSCredentials")

// Options are the process-wide dependencies shared by all adapters.
type Options struct {
	// HTTPClient is used by every HTTP adapter and the Bedrock client; nil
	// means each adapter's default, a transport of its own (never
	// http.DefaultTransport, whose idle connections anything may close).
	HTTPClient *http.Client
	Logger     *slog.Logger
	Now        func() time.Time
	// AWSCredentials sign Bedrock calls (typically the Lambda role's
	// credentials from the caller's aws.Config).
	AWSCredentials aws.CredentialsProvider
	// AWSAPIOptions are added to every AWS SDK client an adapter makes
	// (the local stack tags the run function's with them).
	AWSAPIOptions []func(*middleware.Stack) error
}

// Factories returns a provider.Factory per kind.
func Factories(opts Options) map[string]provider.Factory {
	return map[string]provider.Factory{
		provider.KindOpenAI: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			return openai.NewProvider(openai.Config{
				Name: pc.Name, BaseURL: pc.BaseURL, Model: pc.Model, APIKey: cred,
				MaxTokensField: pc.MaxTokensField, Reasoning: pc.Reasoning, Lookup: pc.Lookup,
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now,
			})
		},
		provider.KindOpenAIFlex: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			return openai.NewProvider(openai.Config{
				Name: pc.Name, BaseURL: pc.BaseURL, Model: pc.Model, APIKey: cred,
				MaxTokensField: pc.MaxTokensField, Reasoning: pc.Reasoning, Lookup: pc.Lookup, Flex: true,
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now,
			})
		},
		provider.KindOpenAIBackground: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			return openai.NewAsync(openai.Config{
				Name: pc.Name, BaseURL: pc.BaseURL, Model: pc.Model, APIKey: cred, Reasoning: pc.Reasoning,
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now,
			}, pc.WebhookSecret().Reveal())
		},
		provider.KindAnthropic: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			return anthropic.New(anthropic.Config{
				Name: pc.Name, BaseURL: pc.BaseURL, Model: pc.Model, APIKey: cred,
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now,
			})
		},
		provider.KindBedrock: func(_ context.Context, pc provider.ProviderConfig, _ provider.Secret) (provider.Provider, error) {
			if opts.AWSCredentials == nil {
				return nil, ErrNoAWSCredentials
			}
			client, err := bedrock.NewClient(bedrock.ClientConfig{
				Region: pc.Region, BaseEndpoint: pc.BaseURL, Credentials: opts.AWSCredentials, HTTPClient: opts.HTTPClient,
				APIOptions: opts.AWSAPIOptions,
			})
			if err != nil {
				return nil, err
			}
			return bedrock.New(bedrock.Config{Name: pc.Name, ModelID: pc.Model, Client: client, Logger: opts.Logger, Now: opts.Now})
		},
		provider.KindBedrockFlex: func(_ context.Context, pc provider.ProviderConfig, _ provider.Secret) (provider.Provider, error) {
			if opts.AWSCredentials == nil {
				return nil, ErrNoAWSCredentials
			}
			client, err := bedrock.NewClient(bedrock.ClientConfig{
				Region: pc.Region, BaseEndpoint: pc.BaseURL, Credentials: opts.AWSCredentials, HTTPClient: opts.HTTPClient,
				APIOptions: opts.AWSAPIOptions,
			})
			if err != nil {
				return nil, err
			}
			return bedrock.New(bedrock.Config{Name: pc.Name, ModelID: pc.Model, Client: client, Flex: true, Logger: opts.Logger, Now: opts.Now})
		},
		provider.KindWebhook: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			retention, err := pc.KeyRetentionOf()
			if err != nil {
				return nil, err
			}
			return webhook.New(webhook.Config{
				Name: pc.Name, URL: pc.BaseURL, Token: cred,
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now,
				Lookup: pc.Lookup, KeyRetention: retention,
			})
		},
		provider.KindWebhookAsync: func(_ context.Context, pc provider.ProviderConfig, cred provider.Secret) (provider.Provider, error) {
			retention, err := pc.KeyRetentionOf()
			if err != nil {
				return nil, err
			}
			return webhook.NewAsync(webhook.AsyncConfig{
				Name: pc.Name, URL: pc.BaseURL, CallbackURL: pc.CallbackURL, Token: cred, WebhookSecret: pc.WebhookSecret(),
				HTTPClient: opts.HTTPClient, Logger: opts.Logger, Now: opts.Now, KeyRetention: retention,
			})
		},
	}
}

// NewRegistry builds the registry of every configured provider.
func NewRegistry(ctx context.Context, cfg provider.Config, secrets provider.SecretSource, opts Options) (*provider.Registry, error) {
	return provider.NewRegistry(ctx, cfg, secrets, Factories(opts))
}
