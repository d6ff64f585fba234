package main

import (
	"os"
	"path/filepath"

	"github.com/onejob/onejob/internal/dev/sfnlocal"
)

// benchRows names what a page may cite as a `make bench` row
// (`bench:TABLE/ROW`, internal/dev/doctest): each table by its key in the
// JSON report (bench/results/latest.json), each row by the name the bench
// gives it, from the very lists the bench runs. A table without names (one
// row, rows by a parameter such as clients or latency) is cited whole.
// TestDocsCiteBenchRows holds the pages to it, and
// TestBenchRowsAreTheReportsTables holds its tables to the report's.
func benchRows(root string) (map[string][]string, error) {
	var perJobs []perJob
	var scenarioNames []string
	for _, s := range scenarios() {
		scenarioNames = append(scenarioNames, s.Name)
		perJobs = append(perJobs, perJob{Scenario: s.Name})
	}
	var costNames []string
	for _, c := range costs(perJobs, prices()) {
		costNames = append(costNames, c.Scenario)
	}
	var waitNames []string
	for _, m := range waitModes() {
		waitNames = append(waitNames, m.name)
	}
	var bodyNames []string
	for _, b := range worstBodies() {
		bodyNames = append(bodyNames, b.name)
	}
	var tracingNames []string
	for _, m := range tracingModes() {
		tracingNames = append(tracingNames, m.name)
	}
	functions, err := functionNames(root)
	if err != nil {
		return nil, err
	}
	definition, err := os.ReadFile(filepath.Join(root, sfnlocal.DefaultDefinitionPath))
	if err != nil {
		return nil, err
	}
	longNames, err := longJobRowNames(definition)
	if err != nil {
		return nil, err
	}
	return map[string][]string{
		"throughput":                nil,
		"idempotency_storm":         nil,
		"worst_case_bodies":         bodyNames,
		"per_job":                   scenarioNames,
		"baseline":                  nil,
		"throttling_drill":          nil,
		"prices_us_east_1":          sortedKeys(prices()),
		"cost_per_million_jobs_usd": costNames,
		"long_jobs":                 longNames,
		"wait_vs_poll":              waitNames,
		"tracing":                   tracingNames,
		"functions":                 append([]string{baselineFunction}, functions...),
		// Issue 39: the latency rows cited whole, the cost rows by name.
		"streams": streamRows(),
	}, nil
}
