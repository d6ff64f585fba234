// Package app wires the Lambda functions from their environment: one place
// that reads configuration, validates it at init and builds the store, the
// engine, the worker and the execution starter the function mains hand to
// lambda.Start.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/onejob/onejob/internal/engine"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/metrics"
	"github.com/onejob/onejob/internal/orchestrator"
	"github.com/onejob/onejob/internal/provider"
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
	cfg, err := LambdaAWSConfig(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	log := Logger().With("env", env.Name)
	rec := metrics.New(os.Stdout, env.Name, nil)
	st, err := store.New(store.Config{Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if ep := ServiceEndpoint(os.Getenv, "DYNAMODB"); ep != nil {
			o.BaseEndpoint = ep
		}
	}), JobsTable: env.JobsTable,
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
	return orchestrator.NewStarter(sfn.NewFromConfig(r.AWS, func(o *sfn.Options) {
		if ep := ServiceEndpoint(os.Getenv, "SFN"); ep != nil {
			o.BaseEndpoint = ep
		}
	}), r.Env.StateMachineARN, r.Logger)
}

// TaskDeps are what a task function needs beyond the runtime: the job
// types (with output checks compiled only where outputs are checked) and
// the providers (only the run function calls them).
type TaskDeps struct {
	Catalog   *jobtype.Catalog
	Providers worker.Providers
}

// SchedulingDeps are the dependencies of the tasks that never call a
// provider: the job types and an empty provider registry.
func SchedulingDeps(context.Context, *Runtime) (TaskDeps, error) {
	cat, err := jobtype.Load()
	if err != nil {
		return TaskDeps{}, err
	}
	reg, err := provider.RegistryOf()
	return TaskDeps{Catalog: cat, Providers: reg}, err
}

// Worker builds the task logic.
func (r *Runtime) Worker(d TaskDeps) (*worker.Worker, error) {
	return worker.New(worker.Config{
		Engine: r.Engine, Catalog: worker.JobTypes{Catalog: d.Catalog}, Providers: d.Providers, Certifications: r.Store,
		// The run function's timeout is 5 minutes; leave it time to write.
		CallTimeout: 4 * time.Minute, Logger: r.Logger,
	})
}

// ServeTask is the whole main of a task function: build the runtime, its
// dependencies and the worker from the environment (exiting loudly if that
// fails), then serve the handler pick chooses.
func ServeTask(deps func(context.Context, *Runtime) (TaskDeps, error), pick func(w *worker.Worker) any) {
	ctx := context.Background()
	rt, err := New(ctx, LoadEnv(os.Getenv), false)
	if err != nil {
		Logger().Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	d, err := deps(ctx, rt)
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	w, err := rt.Worker(d)
	if err != nil {
		rt.Logger.Error("init_failed", slog.String("error", err.Error()))
		os.Exit(1)
	}
	lambda.Start(pick(w))
}
