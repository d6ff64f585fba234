package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/dev/doctest"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// TestDocsCiteBenchRows: every `bench:TABLE/ROW` a page cites for a figure
// names a table of the bench's report and a row the bench makes (names
// from benchRows, the bench's own lists); a page that cites a row that is
// gone, or renamed, fails.
func TestDocsCiteBenchRows(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := benchRows(root)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := doctest.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, p := range pages {
		for _, err := range doctest.CheckBench(p, rows) {
			t.Error(err)
		}
		for _, c := range p.Citations {
			if c.Kind == "bench" {
				cited++
			}
		}
	}
	if cited == 0 {
		t.Fatal("no page cites a make bench row")
	}

	bogus := doctest.Parse("bogus.md", []byte("It costs $1 (`bench:per_job/happy path, renamed`), or\n"+
		"`bench:no_such_table/x`, or `bench:per_job` (which row?); `bench:per_job/happy path` is one.\n"))
	errs := doctest.CheckBench(bogus, rows)
	if len(errs) != 3 {
		t.Fatalf("a page citing rows that do not exist: %v", errs)
	}
	for i, want := range []string{`bogus.md:1: `, `bogus.md:2: `, `name the row`} {
		if !strings.Contains(errs[i].Error(), want) {
			t.Errorf("error %q does not say %q", errs[i], want)
		}
	}
}

// TestBenchRowsAreTheReportsTables: the tables a page may cite are the
// report's, by their JSON keys, both ways.
func TestBenchRowsAreTheReportsTables(t *testing.T) {
	t.Parallel()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := benchRows(root)
	if err != nil {
		t.Fatal(err)
	}
	// What the report says about the run, not what it measured.
	notTables := []string{"generated_at", "host", "seconds", "notes", "prices_checked_on", "failures"}
	var tables []string
	for f := range reflect.TypeFor[report]().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); !slices.Contains(notTables, name) {
			tables = append(tables, name)
		}
	}
	slices.Sort(tables)
	if got := sortedKeys(rows); !slices.Equal(got, tables) {
		t.Fatalf("benchRows has tables %v, the report %v", got, tables)
	}
	for _, table := range []string{"per_job", "cost_per_million_jobs_usd", "wait_vs_poll", "worst_case_bodies", "functions"} {
		if len(rows[table]) < 2 {
			t.Errorf("%s: rows %v", table, rows[table])
		}
	}
	if !slices.Contains(rows["cost_per_million_jobs_usd"], "unknown then resolved (deployed)") {
		t.Errorf("the cost rows lack the deployed unknown: %v", rows["cost_per_million_jobs_usd"])
	}
}
