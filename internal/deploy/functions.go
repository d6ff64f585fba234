package deploy

import (
	"log/slog"
	"slices"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// Function names: one folder under functions/ each (a test keeps the two
// equal), one Lambda per environment.
const (
	FnAPI     = "api"
	FnRun     = "run"
	FnHold    = "hold"
	FnSweeper = "sweeper"
	FnNotify  = "notify"
	// FnEvents takes asynchronous providers' webhooks (apigw.FnEvents).
	FnEvents = "events"
	// FnStream serves jobs' streams on its own function URL (StreamTimeout).
	FnStream = "stream"
)

// Function is one deployed Lambda function.
type Function struct {
	Name string
	// LogicalID is its CloudFormation logical ID: stable, so
	// `sam local invoke <LogicalID>` keeps working.
	LogicalID   string
	MemoryMB    int
	Timeout     time.Duration
	Description string
	// Placeholder names the function's ARN in the state machine definition
	// (${Placeholder}); empty for functions the state machine never invokes.
	Placeholder string
	// Needs lists the settings it needs beyond the tables.
	Needs Need
}

// Functions lists every function, in deployment order. Go binaries are small
// and mostly wait on DynamoDB or a provider, so memory is modest everywhere.
func Functions() []Function {
	return []Function{
		// API Gateway gives up after 30 s; returning before that lets the
		// function report its own error.
		{FnAPI, "ApiFunction", 256, 25 * time.Second, "HTTP API handler", "", NeedStateMachine},
		{FnRun, "RunFunction", 256, runTimeout, "Runs a job's attempts against its providers", "RunFunctionArn", 0},
		{FnHold, "HoldFunction", 256, 30 * time.Second, "Settles a run that ended without an answer; decides the wait", "HoldFunctionArn", 0},
		// Done before the next sweep is due.
		{FnSweeper, "SweeperFunction", 256, SweepEvery - 10*time.Second, "Starts stranded jobs and reports unknown attempts", "", NeedStateMachine},
		// Drains pending notifications until idle or NotifyBudget, done
		// before the next tick is due.
		{FnNotify, "NotifyFunction", 256, NotifyEvery - 5*time.Second, "Delivers webhook notifications (signed, at least once)", "", 0},
		// Behind API Gateway as the API is: returns within its 30 s. Its
		// schedule (PollEvery) runs the pass over the work at providers.
		{FnEvents, "EventsFunction", 256, 25 * time.Second, "Takes asynchronous providers' signed webhooks; polls their due work", "", NeedStateMachine},
		// Holds a connection open while it waits: the smallest memory,
		// as a held stream is billed by GB-s (StreamTimeout).
		{FnStream, "StreamFunction", 128, StreamTimeout, "Serves a job's stream (SSE and long-poll) on its function URL", "", NeedIssuer},
	}
}

// StreamTimeout bounds one invocation of the stream function (a Lambda
// function URL in RESPONSE_STREAM mode; Lambda would allow 15 minutes).
// A job may run longer than any one connection: the stream handler ends
// its response at an event boundary after its own bound (105 s, 5 s
// before this) or StreamEndBefore the deadline, whichever comes first,
// and the client resumes where it left off with Last-Event-ID, as after
// any dropped connection (the SSE way; EventSource does it by itself).
// The bound is the counters' rule, not Lambda's: an open stream holds
// one of its owner's held requests (AcquireHold), and the sweeper's
// recount takes a held request still counted job.RecountQuiet after its
// minute for a leak (job.DecideCounts), so an invocation must end within
// it, as the api function's held GETs do. Each reconnection costs an
// invocation, a count and an uncount of the hold, and one read of the
// job and of its log after the cursor.
const StreamTimeout = job.RecountQuiet - 10*time.Second

// StreamEndBefore is how long before the function's deadline the stream
// handler ends its response (EndBeforeDeadline): room to finish the
// event being written and return, so Lambda never cuts a stream mid-event
// nor counts a timeout.
const StreamEndBefore = 5 * time.Second

// NotifyEvery is the notify function's schedule; each run passes over the
// pending work until none is left or NotifyBudget is spent, so an event is
// delivered within about a minute of its job's end, and a retry due
// sooner than the next tick is made in the same run.
const NotifyEvery = time.Minute

// NotifyBudget bounds one run of the notify function: the sender's 15-s
// timeout fits before the function's.
const NotifyBudget = NotifyEvery - 25*time.Second

// PollEvery is the schedule of the pass over the work parked jobs left at
// their providers (lifecycle.Poller), in the events function: it holds
// the providers' configuration and secrets and takes their webhooks
// already. A poll is due no sooner than the job.PollSchedule says, and
// made by the first pass after.
const PollEvery = time.Minute

// PollBudget bounds one pass, within the events function's timeout: what
// is left stays due for the next.
const PollBudget = 20 * time.Second

// SweepEvery is the sweeper's schedule: a job whose start was throttled past
// the API's retries starts within about a minute.
const SweepEvery = time.Minute

// SweepGrace leaves jobs younger than this to the API's own start, which
// ends within seconds (stepfn.APIStartTimeout).
const SweepGrace = 30 * time.Second

// runTimeout bounds the function that calls providers. It exceeds every job
// type's run timeout, so the state machine's States.Timeout (→ unknown)
// fires first, and it leaves CallTimeout room to write.
const runTimeout = 5 * time.Minute

// CallTimeout caps one provider call, well beyond any job type's timeout: a
// late answer must still reach the database after the state machine gave up
// on it, within the run function's own timeout (a minute is left to write).
const CallTimeout = runTimeout - time.Minute

// Names lists the function names in deployment order.
func Names() []string {
	var out []string
	for _, f := range Functions() {
		out = append(out, f.Name)
	}
	return out
}

// Lookup returns the named function.
func Lookup(name string) (Function, bool) {
	fns := Functions()
	i := slices.IndexFunc(fns, func(f Function) bool { return f.Name == name })
	if i < 0 {
		return Function{}, false
	}
	return fns[i], true
}

// TaskNames lists the functions the state machine invokes, in deployment
// order.
func TaskNames() []string {
	var out []string
	for _, f := range Functions() {
		if f.Placeholder != "" {
			out = append(out, f.Name)
		}
	}
	return out
}

// Tasks lists the functions the state machine invokes, by placeholder.
func Tasks() map[string]string {
	out := map[string]string{}
	for _, f := range Functions() {
		if f.Placeholder != "" {
			out[f.Placeholder] = f.Name
		}
	}
	return out
}

// Check ends a function's init on an error: a misconfigured function fails
// loudly at once, not on its first invocation.
func Check(log *slog.Logger, err error) {
	if err != nil {
		Exit(log, err)
	}
}
