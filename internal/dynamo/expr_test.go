package dynamo

import (
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/job"
)

// merged renders the names and values a piece uses.
func merged(t *testing.T, uses []refs) (map[string]string, map[string]string) {
	t.Helper()
	ns, vs, err := attributeMaps(uses)
	if err != nil {
		t.Fatal(err)
	}
	return ns, renderValues(vs)
}

func TestConditionClauses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		clause clause
		text   string
		names  map[string]string
		values map[string]string
	}{
		{"jobAbsent", jobAbsent(), "attribute_not_exists(#id)", map[string]string{"#id": "id"}, nil},
		{"revisionIs", revisionIs(4), "#revision = :rev", map[string]string{"#revision": "revision"}, map[string]string{":rev": "4"}},
		{"versionIs", versionIs(2), "#version = :read", map[string]string{"#version": "version"}, map[string]string{":read": "2"}},
		{"noWinnerYet", noWinnerYet(), "attribute_not_exists(#completed)", map[string]string{"#completed": "completed_by"}, nil},
		{"attemptStateIn", attemptStateIn(3, []job.AttemptState{job.AttemptRunning, job.AttemptUnknown}),
			"#attempts.#n.#state IN (:allowed0, :allowed1)",
			map[string]string{"#attempts": "attempts", "#n": "3", "#state": "state"},
			map[string]string{":allowed0": `"running"`, ":allowed1": `"unknown"`}},
		{"attemptStateInNoStates", attemptStateIn(3, nil), "", nil, nil},
		{"ledgerAbsent", ledgerAbsent(), "attribute_not_exists(#job)", map[string]string{"#job": "job_id"}, nil},
		{"ledgerOlderThan", ledgerOlderThan(9), "#revision < :rev", map[string]string{"#revision": "revision"}, map[string]string{":rev": "9"}},
		{"allOfSkipsZeroClauses", allOf(versionIs(1), clause{}, noWinnerYet()),
			"#version = :read AND attribute_not_exists(#completed)",
			map[string]string{"#version": "version", "#completed": "completed_by"}, map[string]string{":read": "1"}},
		{"anyOfAlone", anyOf(ledgerAbsent(), ledgerOlderThan(9)), "attribute_not_exists(#job) OR #revision < :rev",
			map[string]string{"#job": "job_id", "#revision": "revision"}, map[string]string{":rev": "9"}},
		{"anyOfInsideAllOf", allOf(jobAbsent(), anyOf(ledgerAbsent(), ledgerOlderThan(9))),
			"attribute_not_exists(#id) AND (attribute_not_exists(#job) OR #revision < :rev)",
			map[string]string{"#id": "id", "#job": "job_id", "#revision": "revision"}, map[string]string{":rev": "9"}},
		{"anyOfOfOneNeedsNoParentheses", allOf(jobAbsent(), anyOf(ledgerAbsent())),
			"attribute_not_exists(#id) AND attribute_not_exists(#job)",
			map[string]string{"#id": "id", "#job": "job_id"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.clause.text != c.text {
				t.Errorf("text = %q, want %q", c.clause.text, c.text)
			}
			ns, vs := merged(t, c.clause.uses)
			equalMaps(t, "names", ns, c.names)
			equalMaps(t, "values", vs, c.values)
		})
	}
}

func TestUpdateParts(t *testing.T) {
	t.Parallel()
	failed := job.Job{Status: job.StatusFailed, Error: &job.Failure{Class: job.ClassNonRetryable, Message: "no"}}
	won := job.Job{Status: job.StatusSucceeded, CompletedBy: 2, Result: []byte(`{"r":1}`)}
	for _, c := range []struct {
		name   string
		part   part
		update string
		names  map[string]string
		values map[string]string
	}{
		{"setAttemptCount", setAttemptCount(3), "SET #count = :count", map[string]string{"#count": "attempt_count"}, map[string]string{":count": "3"}},
		{"setVersion", setVersion(5), "SET #version = :version", map[string]string{"#version": "version"}, map[string]string{":version": "5"}},
		{"leaveOpenIndex", leaveOpenIndex(), "REMOVE #open", map[string]string{"#open": "open_shard"}, nil},
		{"outcomeFieldsWinner", outcomeFields(job.Job{}, won), "SET #completed = :completed, #result = :result",
			map[string]string{"#completed": "completed_by", "#result": "result"},
			map[string]string{":completed": "2", ":result": `"{\"r\":1}"`}},
		{"outcomeFieldsFailure", outcomeFields(job.Job{}, failed), "SET #error = :error",
			map[string]string{"#error": "error"}, map[string]string{":error": `{class: "non_retryable", message: "no"}`}},
		// No decision reaches this today (a failed job is finished), but an
		// outcome without a failure must not keep an old one.
		{"outcomeFieldsClearsOldFailure", outcomeFields(failed, won),
			"SET #completed = :completed, #result = :result REMOVE #error",
			map[string]string{"#completed": "completed_by", "#result": "result", "#error": "error"},
			map[string]string{":completed": "2", ":result": `"{\"r\":1}"`}},
		{"outcomeFieldsNone", outcomeFields(job.Job{}, job.Job{Status: job.StatusCancelled}), "", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			update, uses := updateOf(c.part)
			if update != c.update {
				t.Errorf("update = %q, want %q", update, c.update)
			}
			ns, vs := merged(t, uses)
			equalMaps(t, "names", ns, c.names)
			equalMaps(t, "values", vs, c.values)
		})
	}
}

func TestAttributeMapsRefusesClashingPlaceholders(t *testing.T) {
	t.Parallel()
	// Shared names with one meaning are fine: stamp and revisionIs both use #revision.
	if _, _, err := attributeMaps(stamp(job.Job{}, "tok").uses, revisionIs(1).uses); err != nil {
		t.Errorf("stamp with revisionIs: %v", err)
	}
	// One name for two attributes, or one value set twice, is a bug.
	clash := []refs{{names: nameMap("#revision", "version")}}
	if _, _, err := attributeMaps(revisionIs(1).uses, clash); err == nil || !strings.Contains(err.Error(), "#revision") {
		t.Errorf("a name with two meanings: err = %v", err)
	}
	if _, _, err := attributeMaps(revisionIs(1).uses, ledgerOlderThan(2).uses); err == nil || !strings.Contains(err.Error(), ":rev") {
		t.Errorf("a value set twice: err = %v", err)
	}
	if ns, vs, err := attributeMaps(nil); ns != nil || vs != nil || err != nil {
		t.Errorf("no pieces: %v %v %v; want nil maps (DynamoDB refuses empty ones)", ns, vs, err)
	}
}

func TestWriteForRefusesWhatItCannotCompose(t *testing.T) {
	t.Parallel()
	f := newFixtures(t)
	for _, tr := range []job.Transition{f.start, f.running, f.attemptFailed, f.complete, f.fail, f.cancel} {
		if _, err := writeFor(tr, "tok"); err != nil {
			t.Errorf("%s: %v", tr.Kind(), err)
		}
	}
	if _, err := writeFor(job.Transition{}, "tok"); err == nil {
		t.Error("a transition of no kind was composed")
	}
}
