package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/dev/rie"
)

// invokeCommand runs one function's real bootstrap under the Lambda Runtime
// Interface Emulator with one event, like `sam local invoke`, against
// dynalite seeded for the event:
//
//	onejob invoke --event events/api-create-job.json [--fn api] [--quiet]
func invokeCommand(ctx context.Context, args []string) error {
	return invokeMain(ctx, args, os.Stdout, os.Stderr)
}

func invokeMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	eventPath := fs.String("event", "", "the event file, e.g. events/api-get-job.json (required)")
	fn := fs.String("fn", "", "the function (functions/<fn>); default: from the event's file name")
	quiet := fs.Bool("quiet", false, "do not print the function's logs (unless it fails to init)")
	empty := fs.Bool("empty", false, "seed nothing: invoke against empty tables")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: onejob invoke --event FILE [--fn FUNCTION] [--quiet] [--empty]\n\n"+
			"Builds functions/FUNCTION for this machine, seeds dynalite with the state the event\n"+
			"needs, runs the bootstrap under aws-lambda-rie (built once into .local/) and prints\n"+
			"the function's response on stdout; logs, timings and the AWS calls it made go to stderr.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("invoke: unexpected arguments %q", fs.Args())
	}
	if *eventPath == "" {
		fs.Usage()
		return errors.New("invoke: --event is required")
	}
	event, err := os.ReadFile(*eventPath)
	if err != nil {
		return err
	}
	if *fn == "" {
		*fn = rie.FunctionForEvent(*eventPath)
	}

	var logs io.Writer = stderr
	if *quiet {
		logs = nil
	}
	started := time.Now()
	l, err := rie.Start(ctx, rie.Config{Output: logs, Progress: stderr})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Build(ctx, *fn); err != nil {
		return err
	}
	ready := time.Since(started)
	var res *rie.Result
	if *empty {
		res, err = l.InvokeIn(ctx, *fn, event, rie.ScenarioEmpty, "")
	} else {
		res, err = l.Invoke(ctx, *fn, event)
	}
	if err != nil {
		return err
	}
	if *quiet && res.Response.Status != 200 {
		fmt.Fprint(stderr, res.Logs)
	}

	fmt.Fprintf(stderr, "\n%s ← %s (seeded: %s)\n", res.Function, *eventPath, res.Scenario)
	// A cold start every time: RIE's Duration includes the bootstrap's init;
	// wall adds starting RIE and the process.
	fmt.Fprintf(stderr, "  RIE status %d, duration %v (cold, init included), wall %v; setup and build %v\n",
		res.Response.Status, res.Report.Duration.Round(time.Millisecond/10),
		res.Wall.Round(time.Millisecond), ready.Round(time.Millisecond))
	var denied []rie.Call
	for _, c := range res.Calls {
		mark := ""
		if !permissions.Allows(res.Function, c.Action, c.Resource, c.AttributeList()...) {
			mark = "   <- NOT GRANTED by infra/permissions"
			denied = append(denied, c)
		}
		fmt.Fprintf(stderr, "  call %s%s\n", c, mark)
	}
	if res.Response.FunctionError != "" {
		// As with `sam local invoke`, a function error is a response, not
		// a failure of the rie.
		fmt.Fprintf(stderr, "  function error: %s\n", res.Response.FunctionError)
	}
	if u, err := rie.ParseURLResponse(res.Response.Body); err == nil {
		// A function URL's streamed answer (the stream function): its
		// prelude (status, headers), then the body, without the NUL bytes
		// Lambda puts between them.
		prelude, _ := json.Marshal(map[string]any{"statusCode": u.StatusCode, "headers": u.Headers})
		fmt.Fprintf(stdout, "%s\n%s\n", prelude, u.Body)
	} else {
		fmt.Fprintln(stdout, string(res.Response.Body))
	}
	switch {
	case res.Response.Status != 200:
		return fmt.Errorf("invoke: RIE answered %d (did the function fail to init? see the logs above)", res.Response.Status)
	case len(denied) > 0:
		return fmt.Errorf("invoke: %s made %d call(s) its IAM role would refuse", res.Function, len(denied))
	}
	return nil
}
