// Command infra is the onejob CDK app: `cdk synth` (see cdk.json and the
// Makefile's synth/deploy targets) runs it to produce one stack,
// onejob-<env>, for the environment chosen by `-c env=…` or $ONEJOB_ENV.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/onejob/onejob/infra/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	// Close stops the jsii node process; os.Exit in main would skip a
	// deferred Close, hence run.
	defer jsii.Close()

	app := awscdk.NewApp(nil)
	cfg, err := stack.LoadConfig(func(key string) any {
		return app.Node().TryGetContext(jsii.String(key))
	}, os.Getenv)
	if err != nil {
		return err
	}
	if _, err := stack.New(app, cfg); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}
