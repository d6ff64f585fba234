// Package app wires the Lambda functions from their environment: one place
// that reads configuration, validates it at init and builds the store, the
// engine, the worker and the execution starter the function mains hand to
// lambda.Start.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/engine"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/metrics"
	"github.com/onejob/onejob/internal/orchestrator"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
	"github.com/onejob/onejob/internal/provider/awssecrets"
	"github.com/onejob/onejob/internal/store"
	"github.com/onejob/onejob/internal/worker"
)

// Environment variables the functions read; infra/ sets exactly these.
const (
	EnvJobsTable           = "ONEJOB_JOBS_TABLE"
	EnvAttemptsTable       = "ONEJOB_ATTEMPTS_TABLE"
	EnvCertificationsTable = "ONEJOB_CERTIFICATIONS_TABLE"
	EnvName                = "ONEJOB_ENV"
	EnvStateMachineARN     = "ONEJOB_STATE_MACHINE_ARN"
	EnvProvidersSecretARN  = "ONEJOB_PROVIDERS_SECRET_ARN"
	// EnvProviders holds the provider config JSON directly (local runs).
	EnvProviders = "ONEJOB_PROVIDERS"
)

// Env is the functions' configuration.
type Env struct {
	JobsTable, AttemptsTable, CertificationsTable string
	Name                                          string
	StateMachineARN                               string
	ProvidersSecretARN                            string
	Providers                                     string
}

// LoadEnv reads the configuration through getenv (os.Getenv in mains).
func LoadEnv(getenv func(string) string) Env {
	return Env{
		JobsTable:           getenv(EnvJobsTable),
		AttemptsTable:       getenv(EnvAttemptsTable),
		CertificationsTable: getenv(EnvCertificationsTable),
		Name:                getenv(EnvName),
		StateMachineARN:     getenv(EnvStateMachineARN),
		ProvidersSecretARN:  getenv(EnvProvidersSecretARN),
		Providers:           getenv(EnvProviders),
	}
}

// Validate reports every missing setting at once.
func (e Env) Validate(needStateMachine bool) error {
	var missing []error
	for name, v := range map[string]string{EnvJobsTable: e.JobsTable, EnvAttemptsTable: e.AttemptsTable,
		EnvCertificationsTable: e.CertificationsTable, EnvName: e.Name} {
		if v == "" {
			missing = append(missing, fmt.Errorf("%s is not set", name))
		}
	}
	if needStateMachine && e.StateMachineARN == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvStateMachineARN))
	}
	return errors.Join(missing...)
}

// Runtime is what every function shares.
type Runtime struct {
	Env     Env
	AWS     aws.Config
	Logger  *slog.Logger
	Metrics *metrics.Recorder
	Store   *store.Store
	Engine  *engine.Engine
}

// Logger is the functions' JSON logger on stdout.
func Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(os.Stdout, nil)) }

// New validates env and builds the shared runtime. The AWS configuration
// comes from the Lambda environment (role credentials, region, and any
// AWS_ENDPOINT_URL_* overrides).
func New(ctx context.Context, env Env, needStateMachine bool) (*Runtime, error) {
	if err := env.Validate(needStateMachine); err != nil {
		return nil, err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	log := Logger().With("env", env.Name)
	rec := metrics.New(os.Stdout, env.Name, nil)
	st, err := store.New(store.Config{Client: dynamodb.NewFromConfig(cfg), JobsTable: env.JobsTable,
		AttemptsTable: env.AttemptsTable, CertificationsTable: env.CertificationsTable, Logger: log})
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Config{Store: st, Logger: log, Counters: rec.Counters()})
	if err != nil {
		return nil, err
	}
	return &Runtime{Env: env, AWS: cfg, Logger: log, Metrics: rec, Store: st, Engine: eng}, nil
}

// Starter starts executions on the environment's state machine.
func (r *Runtime) Starter() (*orchestrator.Starter, error) {
	return orchestrator.NewStarter(sfn.NewFromConfig(r.AWS), r.Env.StateMachineARN, r.Logger)
}

// Worker builds the task logic. Only the run function calls providers, so
// only it loads their configuration (and may read the secret).
func (r *Runtime) Worker(ctx context.Context, withProviders bool) (*worker.Worker, error) {
	cat, err := jobtype.Load()
	if err != nil {
		return nil, err
	}
	reg, err := provider.RegistryOf()
	if err != nil {
		return nil, err
	}
	if withProviders {
		if reg, err = r.providers(ctx); err != nil {
			return nil, err
		}
	}
	return worker.New(worker.Config{
		Engine: r.Engine, Catalog: worker.JobTypes{Catalog: cat}, Providers: reg, Certifications: r.Store,
		// The run function's timeout is 5 minutes; leave it time to write.
		CallTimeout: 4 * time.Minute, Logger: r.Logger,
	})
}

// providerSecret is the secret's shape: the provider config, whose
// credential_ref entries name keys of the same secret ("<arn>#<key>").
func (r *Runtime) providers(ctx context.Context) (*provider.Registry, error) {
	raw := r.Env.Providers
	var secrets provider.SecretSource
	if r.Env.ProvidersSecretARN != "" {
		client := secretsmanager.NewFromConfig(r.AWS)
		src, err := awssecrets.New(client)
		if err != nil {
			return nil, err
		}
		secrets = src
		if raw == "" {
			out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(r.Env.ProvidersSecretARN)})
			if err != nil {
				return nil, fmt.Errorf("read provider config: %w", err)
			}
			raw = aws.ToString(out.SecretString)
		}
	}
	if raw == "" || raw == "{}" {
		return provider.RegistryOf()
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &probe); err != nil {
		return nil, fmt.Errorf("provider config is not JSON")
	}
	cfg, err := provider.ParseConfig([]byte(raw))
	if err != nil {
		return nil, err
	}
	return adapters.NewRegistry(ctx, cfg, secrets, adapters.Options{Logger: r.Logger, AWSCredentials: r.AWS.Credentials})
}

// ServeTask is the whole main of a task function: build the runtime and
// the worker from the environment (exiting loudly if that fails), then
// serve the handler pick chooses. Only the run function loads providers.
func ServeTask(withProviders bool, pick func(w *worker.Worker) any) {
	ctx := context.Background()
	rt, err := New(ctx, LoadEnv(os.Getenv), false)
	if err != nil {
		Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	w, err := rt.Worker(ctx, withProviders)
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(pick(w))
}
