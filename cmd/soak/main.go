// Command soak is `make soak`: the soak drill of internal/verify/soak
// against a built onejob binary, at length. It prints a line per batch,
// then the table, and exits 1 when the drill found a problem.
//
//	go run ./cmd/soak -bin bin/onejob [-jobs 20000] [-batches 10] [-nofile 1024] [-out soak.json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/verify/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var cfg soak.Config
	var out string
	var keep bool
	flag.StringVar(&cfg.Bin, "bin", "bin/onejob", "the onejob binary to soak")
	flag.StringVar(&cfg.Dir, "dir", "", "folder for the stack's data and logs (default: a new temporary folder, removed unless -keep)")
	flag.BoolVar(&keep, "keep", false, "keep the temporary folder")
	flag.IntVar(&cfg.Jobs, "jobs", 20000, "jobs in total")
	flag.IntVar(&cfg.Batches, "batches", 10, "batches the jobs are cut into (at least 3)")
	flag.IntVar(&cfg.Clients, "clients", 16, "concurrent submitters")
	flag.IntVar(&cfg.Window, "window", 32, "most executions running at once (submitters wait beyond)")
	flag.IntVar(&cfg.Cycle, "cycle", 200, "jobs submitted before the drill waits for the stack to drain")
	flag.IntVar(&cfg.NoFile, "nofile", 1024, "open-file limit (ulimit -n) the stack runs under")
	flag.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "onejob run --idle-timeout (0: its default)")
	flag.BoolVar(&cfg.InMemory, "in-memory", false, "dynalite in memory (its RSS then grows with the data)")
	flag.IntVar(&cfg.Limits.MaxFDs, "max-fds", 200, "fail when a process holds this many descriptors after the first batch")
	flag.Float64Var(&cfg.Limits.MaxRSSGrowth, "max-rss-growth", 1.3, "fail when a process's RSS after the last batch exceeds this multiple of its RSS after the second")
	flag.Float64Var(&cfg.Limits.MaxDrainGrowth, "max-drain-growth", 1.3, "fail when the last batch drains slower than this multiple of the second (0: unchecked)")
	flag.IntVar(&cfg.Limits.RestSlack, "rest-slack", 12, "descriptors above its start a process may hold once idle")
	flag.StringVar(&out, "out", "", "also write the report as JSON to this file")
	flag.Parse()

	bin, err := filepath.Abs(cfg.Bin)
	if err != nil {
		return err
	}
	cfg.Bin = bin
	if cfg.Root, err = testenv.Root(); err != nil {
		return err
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "onejob-soak-"); err != nil {
			return err
		}
		if keep {
			fmt.Println("keeping", cfg.Dir)
		} else {
			defer os.RemoveAll(cfg.Dir)
		}
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	cfg.Logf = func(format string, args ...any) {
		fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	started := time.Now()
	rep, err := soak.Run(ctx, cfg)
	if rep != nil {
		fmt.Printf("\n%d jobs in %d batches (cycles of %d), %d clients, window %d, ulimit -n %d, %s:\n\n%s\n",
			cfg.Jobs, cfg.Batches, cfg.Cycle, cfg.Clients, cfg.Window, cfg.NoFile, time.Since(started).Round(time.Second), rep.Table())
		fmt.Printf("provider calls: %v\n", rep.SimCalls)
		if out != "" {
			b, jerr := json.MarshalIndent(rep, "", "  ")
			if jerr == nil {
				jerr = os.WriteFile(out, append(b, '\n'), 0o644)
			}
			if jerr != nil {
				return jerr
			}
		}
	}
	if err != nil {
		return err
	}
	if err := rep.Err(); err != nil {
		return err
	}
	fmt.Println("soak passed")
	return nil
}
