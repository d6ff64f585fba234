package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/dynalite"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/jobtype"
	"github.com/onejob/onejob/internal/jobtype/tokencount"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/provider/adapters"
)

// errContractFailed makes a failed contract run exit non-zero after its
// report was printed.
var errContractFailed = errors.New("contract run failed")

// contractCommand certifies providers against job type contracts:
//
//	onejob contract run  --type T --provider P --providers providers.json [store flags]
//	onejob contract list [store flags]
//
// Store flags: --dynamodb-endpoint URL --table-prefix onejob-local for a
// local dynalite; otherwise the AWS environment and ONEJOB_*_TABLE.
func contractCommand(ctx context.Context, args []string) error {
	return contract(ctx, args, os.Getenv, os.Stdout, os.Stderr)
}

func contract(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("contract: want `run` or `list`")
	}
	if args[0] == "lint" {
		return contractLint(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("contract "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("dynamodb-endpoint", "", "a local DynamoDB endpoint (dynalite), e.g. http://127.0.0.1:8000")
	prefix := fs.String("table-prefix", "onejob-local", "table name prefix with --dynamodb-endpoint")
	var typ, prov, providersFile *string
	switch args[0] {
	case "run":
		typ = fs.String("type", "", "job type to certify (required)")
		prov = fs.String("provider", "", "provider name from the providers file (required)")
		providersFile = fs.String("providers", "", "provider config JSON (default: $ONEJOB_PROVIDERS)")
	case "list":
	default:
		return fmt.Errorf("contract: unknown subcommand %q (want run or list)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	st, err := contractStore(ctx, *endpoint, *prefix, getenv)
	if err != nil {
		return err
	}
	if args[0] == "list" {
		return listCertifications(ctx, st, stdout)
	}
	if *typ == "" || *prov == "" {
		return errors.New("contract run: --type and --provider are required")
	}
	cat, err := jobtype.Load()
	if err != nil {
		return err
	}
	t, ok := cat.Get(*typ)
	if !ok {
		return fmt.Errorf("contract run: unknown job type %q (known: %v)", *typ, cat.Names())
	}
	raw := []byte(getenv(deploy.EnvProviders))
	if *providersFile != "" {
		if raw, err = os.ReadFile(*providersFile); err != nil {
			return err
		}
	}
	cfg, err := provider.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("contract run: provider config: %w", err)
	}
	var pc provider.ProviderConfig
	for _, c := range cfg.Providers {
		if c.Name == *prov {
			pc = c
		}
	}
	if pc.Name == "" {
		return fmt.Errorf("contract run: provider %q is not in the config", *prov)
	}
	awsCreds, err := awsCredentials(ctx, cfg, getenv)
	if err != nil {
		return err
	}
	reg, err := adapters.NewRegistry(ctx, provider.Config{Providers: []provider.ProviderConfig{pc}}, provider.EnvSecrets{Lookup: func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	}}, adapters.Options{AWSCredentials: awsCreds})
	if err != nil {
		return err
	}
	p, _ := reg.Get(pc.Name)
	// Token counting runs here, where certification runs, and nowhere a
	// function links.
	budget, err := tokencount.For(pc, p, tokencount.Options{AWSCredentials: awsCreds})
	if err != nil {
		return fmt.Errorf("contract run: %w", err)
	}
	rep, cert, err := jobtype.Certify(ctx, st, t, p, budget, time.Now())
	fmt.Fprintln(stdout, rep.String())
	if err != nil {
		return err
	}
	verdict := "PASSED: certified"
	if !cert.Passed {
		verdict = "FAILED: not certified (failover to it stays off)"
	}
	fmt.Fprintf(stdout, "%s — %s on %s, contract %s\n", verdict, cert.Provider, cert.JobType, cert.ContractVersion)
	if !cert.Passed {
		return errContractFailed
	}
	return nil
}

// awsCredentials are what Bedrock providers are signed with: the
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY pair when set, else the AWS
// environment's default chain; none when no provider is a Bedrock one.
func awsCredentials(ctx context.Context, cfg provider.Config, getenv func(string) string) (aws.CredentialsProvider, error) {
	needed := false
	for _, pc := range cfg.Providers {
		needed = needed || pc.Kind == provider.KindBedrock
	}
	if !needed {
		return nil, nil
	}
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		return credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN")), nil
	}
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	return awsCfg.Credentials, nil
}

func contractStore(ctx context.Context, endpoint, prefix string, getenv func(string) string) (*dynamo.Store, error) {
	if endpoint != "" {
		names := dynamo.NamesWithPrefix(prefix)
		return dynamo.New(dynamo.Config{Client: dynalite.NewClient(endpoint), Tables: names})
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	env := deploy.LoadEnv(getenv, dynamo.Logicals())
	return dynamo.New(dynamo.Config{Client: dynamodb.NewFromConfig(cfg), Tables: dynamo.NamesFrom(env.Table)})
}

func listCertifications(ctx context.Context, st *dynamo.Store, out io.Writer) error {
	certs, err := st.ListCertifications(ctx)
	if err != nil {
		return err
	}
	cat, err := jobtype.Load()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "JOB TYPE\tCONTRACT\tCURRENT\tPROVIDER\tMODEL\tRESULT\tWINDOW\tCERTIFIED AT")
	for _, c := range certs {
		current := "no"
		if t, ok := cat.Get(c.JobType); ok && t.ContractVersion() == c.ContractVersion {
			current = "yes"
		}
		result := "failed"
		if c.Passed {
			result = "passed"
		}
		model := c.Model
		if model == "" {
			model = "-"
		}
		window := "none-declared"
		if c.Window > 0 {
			window = fmt.Sprintf("%d-%s", c.Window, c.WindowUnit)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.JobType, c.ContractVersion, current, c.Provider, model, result,
			window, c.CertifiedAt.Format(time.RFC3339))
	}
	return w.Flush()
}
