// Command onejob is the project's local tool: `onejob <command> [flags]`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var code exitCode
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &code):
		os.Exit(int(code)) // the command has said why
	default:
		fmt.Fprintln(os.Stderr, "onejob:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand. Each lives in its own file; add new ones
// to the map.
func run(ctx context.Context, args []string) error {
	commands := map[string]func(ctx context.Context, args []string) error{
		"token":     tokenCommand,
		"run":       runCommand,
		"invoke":    invokeCommand,
		"contract":  contractCommand,
		"jobs":      jobsCommand,
		"providers": providersCommand,
		"webhooks":  webhooksCommand,
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(os.Stderr, usage(commands))
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return flag.ErrHelp
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown command %q\n%s", args[0], usage(commands))
	}
	return cmd(ctx, args[1:])
}

func usage(commands map[string]func(context.Context, []string) error) string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return "usage: onejob <command> [flags]\ncommands: " + strings.Join(names, ", ") + "\n" +
		"  jobs submit|get|list|attempts|watch|cancel|resolve: the HTTP API ($" + envAPIURL + ", $" + envToken + ")\n" +
		"  providers [list]|force: the providers' health, an operator's override (the same API)\n" +
		"  webhooks listen --forward-to URL: receive your jobs' webhook events here (same variables)\n" +
		"'onejob <command> -h' describes a command's flags"
}

// exitCode ends the process with a status once the command has printed why.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
