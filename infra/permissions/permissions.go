// Package permissions is the one list of what each Lambda function may do to
// the stack's resources, and the one way of naming those resources. infra/stack
// turns it into IAM statements; every AWS call a function's code makes in the
// end-to-end suites is recorded under these names (internal/dev/awscalls) and
// checked against the statements of the synthesized template
// (internal/verify/iamcheck, `make test`). It imports nothing from the CDK so
// the local tools stay cheap to compile.
package permissions

import (
	"slices"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
)

// Kind is the kind of resource a grant applies to.
type Kind string

// Resource kinds. A new kind of resource (a queue, a topic) is a kind here,
// its ARN in infra/stack, how a call names it in internal/dev/awscalls and how
// a template names it in internal/verify/iamcheck.
const (
	KindTable           Kind = "table"
	KindStateMachine    Kind = "statemachine"
	KindProvidersSecret Kind = "secret"
	// KindSecretsKey is the KMS key the webhook signing secrets are sealed
	// with (kmsseal).
	KindSecretsKey Kind = "secretskey"
	// KindFunction is one of deploy.Functions, by name (lambda:InvokeFunction).
	KindFunction Kind = "function"
	// KindModel is a Bedrock model, by model ID (a bedrock provider's calls).
	KindModel Kind = "model"
	// KindTraces is the account's X-Ray traces: sending spans to X-Ray's
	// OTLP endpoint takes no resource ARN ("*").
	KindTraces Kind = "traces"
	// KindUnknown is what a call named that is none of the stack's
	// resources; Name holds what it named. No grant covers it.
	KindUnknown Kind = "unknown"
)

// Resource names one of the stack's resources symbolically, the same in every
// environment and locally.
type Resource struct {
	Kind Kind
	// Name is the table's logical name (dynamo.TableDef.Logical), the
	// function's name (deploy.Functions), the model's ID; empty for the
	// stack's one state machine and one providers secret.
	Name string
	// Index is a global secondary index of table Name; empty means the table.
	Index string
}

// String is how tests and reports print a resource: table:jobs,
// table:jobs/index/by_open, statemachine, secret, function:run.
func (r Resource) String() string {
	switch {
	case r.Index != "":
		return string(r.Kind) + ":" + r.Name + "/index/" + r.Index
	case r.Name != "":
		return string(r.Kind) + ":" + r.Name
	}
	return string(r.Kind)
}

// Grant allows Actions on Resource.
type Grant struct {
	Actions  []string
	Resource Resource
	// Attributes, when set, are the only item attributes the actions may
	// name (IAM's dynamodb:Attributes, ForAllValues:StringEquals): a
	// write of any other is refused (review L5).
	Attributes []string
}

func table(def dynamo.TableDef) Resource { return Resource{Kind: KindTable, Name: def.Logical} }

func index(def dynamo.TableDef, name string) Resource {
	return Resource{Kind: KindTable, Name: def.Logical, Index: name}
}

var (
	stateMachine = Resource{Kind: KindStateMachine}
	secretsKey   = Resource{Kind: KindSecretsKey}
)

// The task functions' grants, from what each does through the engine and
// the dynamo. Reading the job (GetItem) and applying a transition to it
// (conditional UpdateItem; GetItem after a lost condition) is common to
// all; the rest differs:
//   - a transition on an attempt also mirrors it into the ledger
//     (conditional PutItem; tasks never read or update the ledger);
//   - choosing the next provider reads the fallbacks' certifications
//     (GetItem).
//
// hold only moves attempts to unknown (no certifications).
var (
	jobRW  = Grant{Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, Resource: table(dynamo.JobsTable())}
	ledger = Grant{Actions: []string{"dynamodb:PutItem"}, Resource: table(dynamo.AttemptsTable())}
	certs  = Grant{Actions: []string{"dynamodb:GetItem"}, Resource: table(dynamo.CertificationsTable())}
	// A provider's health: read (consistently, about once a second per
	// container) and replaced by a conditional PutItem when it changes.
	health = Grant{Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem"}, Resource: table(dynamo.ProvidersTable())}
	// An owner's counters: a finished job's slot given back (conditional
	// UpdateItem).
	uncount = Grant{Actions: []string{"dynamodb:UpdateItem"}, Resource: table(dynamo.OwnersTable())}
	// A write that records a job's events hands the job to the notify
	// function at once (an asynchronous invoke, lambdainvoke).
	handoff = Grant{Actions: []string{"lambda:InvokeFunction"}, Resource: Resource{Kind: KindFunction, Name: deploy.FnNotify}}
	// An owner's budget: a fallback's or a hedge's reservation
	// (conditional UpdateItem; GetItem after a refusal) and the settling
	// of an ended attempt's (conditional UpdateItem).
	budget = Grant{Actions: []string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, Resource: table(dynamo.OwnersTable())}
	// A streamed attempt's text: each chunk one conditional PutItem into
	// its job's log (the job's status is read with jobRW's GetItem, about
	// once a second while the call streams, to stop once it is cancelled).
	streamLog = Grant{Actions: []string{"dynamodb:PutItem"}, Resource: table(dynamo.StreamsTable())}
)

// All returns every function's grants, by function name.
func All() map[string][]Grant {
	return map[string][]Grant{
		// The API: create (conditional UpdateItem: never a PutItem, which
		// could replace a live job; GetItem on a replay), get (GetItem),
		// list (Query on by_owner only, never the base table),
		// the operators' listing of open jobs (Query on the sparse by_open,
		// then BatchGetItem of those jobs, dynamo.ListOpen), list attempts
		// (Query on the ledger), cancel and resolve (conditional UpdateItem
		// on the job; resolve then PutItem into the ledger), and start the
		// job's execution.
		deploy.FnAPI: {
			{Actions: []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem"}, Resource: table(dynamo.JobsTable())},
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByOwner)},
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByOpen)},
			{Actions: []string{"dynamodb:Query", "dynamodb:PutItem"}, Resource: table(dynamo.AttemptsTable())},
			{Actions: []string{"states:StartExecution"}, Resource: stateMachine},
			// Operators list every provider's health (a Scan of a handful
			// of items) and override one.
			{Actions: []string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, Resource: table(dynamo.ProvidersTable())},
			// Owners' quotas and budgets: count and uncount, reserve and
			// settle (conditional UpdateItem; GetItem after a refusal
			// where the store does not hand the item back), and the
			// operators' listing of every owner (a paged Scan).
			{Actions: []string{"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:Scan"}, Resource: table(dynamo.OwnersTable())},
			// Webhook endpoints (put, read, list an owner's, rotate or
			// renew: UpdateItem of what changes, delete; the owner's
			// endpoint count above) and a job's deliveries (listed; an
			// operator's redelivery reads one and saves it on its
			// revision).
			{Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem"},
				Resource: table(dynamo.EndpointsTable())},
			{Actions: []string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem"}, Resource: table(dynamo.DeliveriesTable())},
			// A cancel records the job's event: handed off (above).
			handoff,
			// A start still throttled after its tries is handed to the
			// sweeper, which tries again at once (lifecycle.HandoffStarter).
			{Actions: []string{"lambda:InvokeFunction"}, Resource: Resource{Kind: KindFunction, Name: deploy.FnSweeper}},
			// A new or rotated signing secret is sealed under a fresh
			// data key; never Decrypt: the API cannot read a secret back.
			{Actions: []string{"kms:GenerateDataKey"}, Resource: secretsKey},
		},
		// The notifier finds jobs with events to fan out in the sparse
		// by_notify index, reads each, puts one delivery per endpoint
		// (conditional PutItem), records them dispatched (conditional
		// UpdateItem of the dispatch record only), finds due deliveries in
		// the sparse by_due index, claims and records each try
		// (conditional PutItem on the revision), and updates the
		// endpoint's health (UpdateItem of its health only). Review L5:
		// its writes of jobs and endpoints may name no other attribute,
		// so it can neither change a job's state or result nor an
		// endpoint's URL, secrets or events.
		deploy.FnNotify: {
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByNotify)},
			{Actions: []string{"dynamodb:GetItem"}, Resource: table(dynamo.JobsTable())},
			{Actions: []string{"dynamodb:UpdateItem"}, Resource: table(dynamo.JobsTable()), Attributes: dynamo.DispatchAttributes()},
			{Actions: []string{"dynamodb:GetItem", "dynamodb:Query"}, Resource: table(dynamo.EndpointsTable())},
			{Actions: []string{"dynamodb:UpdateItem"}, Resource: table(dynamo.EndpointsTable()), Attributes: dynamo.EndpointHealthAttributes()},
			// A hand-off lists its job's deliveries (Query by the job).
			{Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"}, Resource: table(dynamo.DeliveriesTable())},
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.DeliveriesTable(), dynamo.IndexByDue)},
			// It alone opens the endpoints' sealed secrets.
			{Actions: []string{"kms:Decrypt"}, Resource: secretsKey},
		},
		// The sweeper finds open jobs in the sparse by_open index (keys
		// only: dynamo.ListOpen, no Scan), reads them by key in batches and
		// starts the pending ones' executions.
		deploy.FnSweeper: {
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByOpen)},
			{Actions: []string{"dynamodb:BatchGetItem", "dynamodb:GetItem"}, Resource: table(dynamo.JobsTable())},
			// A busy owner's minute whose count looks wrong: its jobs
			// (dynamo.JobsOfMinute, by_owner between two creation times).
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByOwner)},
			{Actions: []string{"states:StartExecution"}, Resource: stateMachine},
			// Releases closed attempts a provider's health still holds.
			{Actions: []string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, Resource: table(dynamo.ProvidersTable())},
			// Recounts the owners' counters: the busy owners, their
			// counters, and a conditional update to repair them.
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.OwnersTable(), dynamo.IndexByBusy)},
			{Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, Resource: table(dynamo.OwnersTable())},
			// ...their webhook endpoints, counted (Query by owner), and the
			// jobs of budget reservations left behind (GetItem, above).
			{Actions: []string{"dynamodb:Query"}, Resource: table(dynamo.EndpointsTable())},
		},
		// Runs a job's attempts: reads the job and the fallbacks'
		// certifications, starts, claims, completes or fails attempts
		// (conditional UpdateItem) and records them in the ledger. Only it
		// calls providers, so only it reads their configuration.
		deploy.FnRun: {jobRW, ledger, certs, health, budget, handoff, streamLog,
			{Actions: []string{"secretsmanager:GetSecretValue"}, Resource: Resource{Kind: KindProvidersSecret}}},
		// Marks a silent run's attempts unknown and decides the wait: no
		// certifications, no providers; an attempt it ends (one never
		// claimed) settles its budget reservation.
		deploy.FnHold: {jobRW, ledger, uncount, handoff},
		// Takes asynchronous providers' webhooks: reads the work named
		// from its provider (so it reads their configuration, as run
		// does) and applies its end to the job (conditional UpdateItem,
		// the ledger), settling what the attempt's budget and the owner's
		// slot held, handing the job's events off. On its schedule it
		// passes over the due work (the sparse by_poll index, keys only;
		// each job read by key) and asks its providers the same way. A job
		// whose parked work ended and that needs a run gets its execution
		// started (issue 40).
		deploy.FnEvents: {jobRW, ledger, uncount, budget, handoff,
			{Actions: []string{"secretsmanager:GetSecretValue"}, Resource: Resource{Kind: KindProvidersSecret}},
			{Actions: []string{"dynamodb:Query"}, Resource: index(dynamo.JobsTable(), dynamo.IndexByPoll)},
			{Actions: []string{"states:StartExecution"}, Resource: stateMachine},
			// The same pass stops counting the holds of cancelled jobs'
			// hung calls past their provider's max_processing_time: each
			// provider's health listed (a Scan of one item per provider),
			// read and replaced as run does.
			{Actions: []string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, Resource: table(dynamo.ProvidersTable())},
			// Takes each verified delivery by its webhook-id (conditional
			// PutItem; GetItem after a refusal where the store does not
			// hand the item back) and gives back one whose taking failed
			// (conditional DeleteItem), review N-L1.
			{Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"}, Resource: table(dynamo.InboundTable())},
			// Sends the due batch lines as provider batches and asks
			// about the open ones (issue 40): a batch recorded before it
			// is sent (conditional PutItem; GetItem after a refusal),
			// each change a conditional PutItem, a batch done deleted
			// (conditional DeleteItem), a provider's open batches one
			// Query of its partition.
			{Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:Query"}, Resource: table(dynamo.BatchesTable())}},
		// Serves jobs' streams: reads the job (GetItem, consistent) and
		// its log after the reader's cursor (a Query per attempt), and
		// counts an open stream as one of its owner's held requests
		// (conditional UpdateItem to count and to give back; GetItem
		// after a refusal where the store does not hand the item back).
		// It writes nothing else.
		deploy.FnStream: {
			{Actions: []string{"dynamodb:GetItem"}, Resource: table(dynamo.JobsTable())},
			{Actions: []string{"dynamodb:Query"}, Resource: table(dynamo.StreamsTable())},
			{Actions: []string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, Resource: table(dynamo.OwnersTable())},
		},
	}
}

// Spans is what a function's role needs to export its spans to X-Ray's
// OTLP endpoint (internal/tracing: POST /v1/traces, SigV4-signed for
// tracing.SigningService), granted to the Traced functions of an
// environment that traces (cdk.json traceSampleRatio). The X-Ray service
// authorization reference lists both actions at Write level;
// PutSpansForIndexing is what lets Transaction Search index a span as a
// trace summary. X-Ray's OTLP endpoint page names no action: these are
// the X-Ray service authorization reference's span ingestion actions
// (which of them the endpoint checks is unconfirmed, so both), and the
// roles' active tracing grants PutTraceSegments besides (infra/stack),
// the action AWS's own managed policy for API-key trace ingestion names.
// The export is no AWS SDK call, so make iam-check cannot see it:
// infra/stack's tests hold this grant to the exporter's signing service.
func Spans() Grant {
	return Grant{Actions: []string{"xray:PutSpans", "xray:PutSpansForIndexing"}, Resource: Resource{Kind: KindTraces}}
}

// Traced lists the functions that export spans when their environment
// traces: those whose main sets tracing up (tracing.FromEnv), which
// infra/stack's tests hold to the functions linking internal/tracing.
// Each gets deploy.EnvTraceRatio and Spans.
func Traced() []string {
	return []string{deploy.FnAPI, deploy.FnEvents, deploy.FnHold, deploy.FnNotify, deploy.FnRun, deploy.FnSweeper}
}

// Forbid is a grant no function may hold, whatever All says.
type Forbid struct {
	Function, Action string
	Resource         Resource
	Why              string
}

// Forbidden lists grants that least privilege keeps out (review L5): the
// permissions test refuses them in All, the IAM check in every
// synthesized template (any statement of the function's role that allows
// them, wildcards and conditions included), and infra/stack's tests.
func Forbidden() []Forbid {
	jobs, endpoints := table(dynamo.JobsTable()), table(dynamo.EndpointsTable())
	return []Forbid{
		{deploy.FnAPI, "dynamodb:PutItem", jobs, "no code of the API puts a job item: a create is a conditional UpdateItem, " +
			"and a PutItem could replace a live job whole"},
		{deploy.FnNotify, "dynamodb:PutItem", jobs, "the notifier writes a job's dispatch record only (UpdateItem, narrowed)"},
		{deploy.FnNotify, "dynamodb:PutItem", endpoints, "the notifier writes an endpoint's health only (UpdateItem, narrowed): " +
			"a PutItem could replace its URL and secrets"},
	}
}

// Allows reports whether fn may do action on r naming attributes (a
// DynamoDB item write's, as IAM's dynamodb:Attributes holds them; none
// given, a grant narrowed to some is not held against the call).
func Allows(fn, action string, r Resource, attributes ...string) bool {
	for _, g := range All()[fn] {
		if g.Resource == r && slices.Contains(g.Actions, action) && g.AllowsNaming(attributes) {
			return true
		}
	}
	return false
}

// AllowsNaming reports whether g lets a call name attributes: every one
// of them among g.Attributes, when g has them (ForAllValues).
func (g Grant) AllowsNaming(attributes []string) bool {
	if g.Attributes == nil {
		return true
	}
	for _, a := range attributes {
		if !slices.Contains(g.Attributes, a) {
			return false
		}
	}
	return true
}
