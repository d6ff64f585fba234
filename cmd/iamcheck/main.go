// Command iamcheck checks every AWS call the functions' code made in the
// end-to-end suites against each function's IAM statements in the
// synthesized templates (internal/verify/iamcheck). `make test` runs it
// after the suites:
//
//	iamcheck -calls DIR -templates DIR
//
// It exits 1 when a recorded call is not granted (naming the function, the
// action and the resource), when a function has no recorded call, or when
// there is nothing to check; statements no call exercised are printed.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/onejob/onejob/internal/dev/awscalls"
	"github.com/onejob/onejob/internal/verify/iamcheck"
)

func main() {
	calls := flag.String("calls", os.Getenv(awscalls.EnvDir), "the recordings' folder ($"+awscalls.EnvDir+")")
	templates := flag.String("templates", os.Getenv(iamcheck.EnvTemplatesDir), "the synthesized templates' folder ($"+iamcheck.EnvTemplatesDir+")")
	flag.Parse()
	if err := run(*calls, *templates); err != nil {
		fmt.Fprintln(os.Stderr, "iamcheck:", err)
		os.Exit(1)
	}
}

func run(callsDir, templatesDir string) error {
	if callsDir == "" || templatesDir == "" {
		return fmt.Errorf("-calls and -templates are required")
	}
	ts, err := iamcheck.LoadTemplates(templatesDir)
	if err != nil {
		return err
	}
	calls, files, err := awscalls.ReadDir(callsDir)
	if err != nil {
		return err
	}
	rep, err := iamcheck.Check(ts, calls, files)
	if err != nil {
		return err
	}
	rep.Write(os.Stdout)
	if rep.Failed() {
		return fmt.Errorf("%d calls not granted, %d functions without a recorded call", len(rep.Denied), len(rep.Silent))
	}
	return nil
}
