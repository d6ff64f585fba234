package deploy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	// EnvAdminClaim and EnvAdminValue name the verified claim, and the value
	// in it, that make a caller an operator (apigw.AdminRule); unset means
	// the scope claim holding jobs:admin.
	EnvAdminClaim = "ONEJOB_ADMIN_CLAIM"
	EnvAdminValue = "ONEJOB_ADMIN_VALUE"
)

// Env is the functions' configuration.
type Env struct {
	JobsTable, AttemptsTable, CertificationsTable string
	Name                                          string
	StateMachineARN                               string
	ProvidersSecretARN                            string
	Providers                                     string
	AdminClaim, AdminValue                        string
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
		AdminClaim:          getenv(EnvAdminClaim),
		AdminValue:          getenv(EnvAdminValue),
	}
}

// Need names the settings a function needs beyond the tables and the
// environment's name, which every function needs.
type Need int

// What a function may need.
const (
	NeedStateMachine Need = 1 << iota
)

// Validate reports every missing setting at once.
func (e Env) Validate(needs Need) error {
	var missing []error
	for _, v := range []struct{ name, value string }{
		{EnvJobsTable, e.JobsTable}, {EnvAttemptsTable, e.AttemptsTable},
		{EnvCertificationsTable, e.CertificationsTable}, {EnvName, e.Name},
	} {
		if v.value == "" {
			missing = append(missing, fmt.Errorf("%s is not set", v.name))
		}
	}
	if needs&NeedStateMachine != 0 && e.StateMachineARN == "" {
		missing = append(missing, fmt.Errorf("%s is not set", EnvStateMachineARN))
	}
	return errors.Join(missing...)
}

// Logger is the functions' JSON logger on stdout, every line tagged with
// the environment's name.
func Logger(env string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("env", env)
}

// Exit logs a failed init and exits: a misconfigured function fails loudly
// at once rather than on its first invocation.
func Exit(log *slog.Logger, err error) {
	log.Error("init_failed", slog.String("error", err.Error()))
	os.Exit(1)
}
