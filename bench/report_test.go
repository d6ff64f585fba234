package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// TestSettleGivesUpWithWhatSettled: past its deadline the drill's wait
// says how many jobs settled, so the drill can still report the others.
func TestSettleGivesUpWithWhatSettled(t *testing.T) {
	t.Parallel()
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("job_%03d", i)
	}
	stuck := map[string]bool{ids[7]: true, ids[100]: true, ids[499]: true}
	get := func(_ context.Context, id string) (job.Job, error) {
		if stuck[id] {
			return job.Job{ID: id, Status: job.StatusPending}, nil
		}
		return job.Job{ID: id, Status: job.StatusSucceeded}, nil
	}
	n, err := settle(t.Context(), ids, get, 0, time.Millisecond)
	if n != 497 || err == nil || err.Error() != "497 of 500 jobs settled within 0s" {
		t.Fatalf("settle = %d, %v; want 497 and the count in the error", n, err)
	}
	delete(stuck, ids[7])
	delete(stuck, ids[100])
	delete(stuck, ids[499])
	if n, err := settle(t.Context(), ids, get, 0, time.Millisecond); n != 500 || err != nil {
		t.Fatalf("all settled: settle = %d, %v", n, err)
	}
}

// fakeSections measure nothing: each returns fixed figures, the drill fails
// as the one in issue 43 did, and functions records whether it ran.
func fakeSections(perJobErr error, functionsRan *bool) sectionFuncs {
	return sectionFuncs{
		throughput: func(context.Context) ([]throughputRow, []stormResult, []bodyRow, error) {
			return []throughputRow{{Concurrency: 8, Starter: "off", API: loadResult{PerSecond: 123}}},
				[]stormResult{{Starter: "off", Requests: 10, Created: 1, Replayed: 9, JobIDs: 1}}, nil, nil
		},
		perJob: func(context.Context) (perJobResult, error) {
			if perJobErr != nil {
				return perJobResult{}, perJobErr
			}
			return perJobResult{rows: []perJob{{Scenario: "happy path", Jobs: 10, DynamoRequests: 6, StateTransitions: 1,
				DynamoByOp: map[string]float64{"PutItem": 1}}}}, nil
		},
		throttling: func(context.Context) (throttleDrill, error) {
			d := throttleDrill{Jobs: 500, Concurrency: 32, ThrottleShare: 0.5, Settled: 497, Started: 497, Succeeded: 497,
				ThrottledStarts: 700, P99Millis: 119000, MaxMillis: 211000}
			return d, errors.New("497 of 500 jobs settled within 5m0s")
		},
		functions: func(context.Context, functionEnv) ([]functionRow, error) {
			*functionsRan = true
			return []functionRow{{Name: "api", AMD64Bytes: 1}}, nil
		},
	}
}

// TestAFailedDrillStillPrintsTheReport (issue 43 item 8): a drill that
// fails is marked failed in a report that shows what every section
// measured, its own figures included; the JSON is written; the run fails.
func TestAFailedDrillStillPrintsTheReport(t *testing.T) {
	t.Parallel()
	o := options{out: filepath.Join(t.TempDir(), "latest.json"), logPath: "bench.log", drillJobs: 500}
	rep := report{Prices: prices(), Notes: []string{"a note"}}
	ran := false
	measure(t.Context(), o, fakeSections(nil, &ran), &rep)
	var out strings.Builder
	err := finish(&out, o, rep, nil)
	if err == nil || !strings.Contains(err.Error(), "throttling drill failed: 497 of 500 jobs settled within 5m0s") {
		t.Fatalf("finish = %v, want the drill's failure", err)
	}
	text := out.String()
	for _, want := range []string{
		"FAILED: throttling drill: 497 of 500 jobs settled within 5m0s",
		"== POST /v1/jobs vs dynalite",
		"== Per job (averages)",
		"happy path",
		"— FAILED: 497 of 500 jobs settled within 5m0s",
		"119000.0", // the failed drill's own p99
		"== AWS cost per million jobs",
		"== Functions",
		"== Notes",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if !ran {
		t.Error("the functions section did not run after the failed drill")
	}
	b, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	var written report
	if err := json.Unmarshal(b, &written); err != nil || written.Throttling == nil ||
		written.Throttling.Failed != "497 of 500 jobs settled within 5m0s" || written.Throttling.Settled != 497 {
		t.Fatalf("the JSON's drill: %+v (%v)", written.Throttling, err)
	}
}

// TestAFailedSectionIsReportedAndTheRestRuns: a section that fails is
// listed as failed, the sections after it still run (the functions one,
// which needs the per-job stack, is marked not run), and the run fails.
func TestAFailedSectionIsReportedAndTheRestRuns(t *testing.T) {
	t.Parallel()
	o := options{out: filepath.Join(t.TempDir(), "latest.json"), drillJobs: 500}
	rep := report{Prices: prices()}
	ran := false
	measure(t.Context(), o, fakeSections(errors.New("dynalite went away"), &ran), &rep)
	var out strings.Builder
	err := finish(&out, o, rep, nil)
	if err == nil || !strings.Contains(err.Error(), "perjob: dynalite went away") ||
		!strings.Contains(err.Error(), "functions: not run") {
		t.Fatalf("finish = %v", err)
	}
	if ran || rep.Throttling == nil {
		t.Fatalf("functions ran: %v; drill measured: %v", ran, rep.Throttling != nil)
	}
	text := out.String()
	for _, want := range []string{"FAILED: perjob: dynalite went away", "== POST /v1/jobs vs dynalite", "== Starts under throttling"} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
}

func TestParseOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		list string
		want []string
		err  bool
	}{
		{"", nil, false},
		{"throttling", []string{sectionThrottling}, false},
		{"perjob, functions", []string{sectionPerJob, sectionFunctions}, false},
		{"functions", nil, true},
		{"throttle", nil, true},
	} {
		only, err := parseOnly(tc.list)
		if (err != nil) != tc.err {
			t.Errorf("parseOnly(%q) error = %v, want error %v", tc.list, err, tc.err)
			continue
		}
		o := options{only: only}
		for _, s := range sectionNames {
			if want := len(tc.want) == 0 || strings.Contains(strings.Join(tc.want, ","), s); !tc.err && o.runs(s) != want {
				t.Errorf("parseOnly(%q): runs(%s) = %v", tc.list, s, o.runs(s))
			}
		}
	}
}
