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
	jobRW  = Grant{[]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, table(dynamo.JobsTable())}
	ledger = Grant{[]string{"dynamodb:PutItem"}, table(dynamo.AttemptsTable())}
	certs  = Grant{[]string{"dynamodb:GetItem"}, table(dynamo.CertificationsTable())}
	// A provider's health: read (consistently, about once a second per
	// container) and replaced by a conditional PutItem when it changes.
	health = Grant{[]string{"dynamodb:GetItem", "dynamodb:PutItem"}, table(dynamo.ProvidersTable())}
	// An owner's counters: a finished job's slot given back (conditional
	// UpdateItem).
	uncount = Grant{[]string{"dynamodb:UpdateItem"}, table(dynamo.OwnersTable())}
	// A write that records a job's events hands the job to the notify
	// function at once (an asynchronous invoke, lambdainvoke).
	handoff = Grant{[]string{"lambda:InvokeFunction"}, Resource{Kind: KindFunction, Name: deploy.FnNotify}}
	// An owner's budget: a fallback's or a hedge's reservation
	// (conditional UpdateItem; GetItem after a refusal) and the settling
	// of an ended attempt's (conditional UpdateItem).
	budget = Grant{[]string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, table(dynamo.OwnersTable())}
)

// All returns every function's grants, by function name.
func All() map[string][]Grant {
	return map[string][]Grant{
		// The API: create (conditional PutItem, GetItem on a replay), get
		// (GetItem), list (Query on by_owner only, never the base table),
		// the operators' listing of open jobs (Query on the sparse by_open,
		// then BatchGetItem of those jobs, dynamo.ListOpen), list attempts
		// (Query on the ledger), cancel and resolve (conditional UpdateItem
		// on the job; resolve then PutItem into the ledger), and start the
		// job's execution.
		deploy.FnAPI: {
			{[]string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, table(dynamo.JobsTable())},
			{[]string{"dynamodb:Query"}, index(dynamo.JobsTable(), dynamo.IndexByOwner)},
			{[]string{"dynamodb:Query"}, index(dynamo.JobsTable(), dynamo.IndexByOpen)},
			{[]string{"dynamodb:Query", "dynamodb:PutItem"}, table(dynamo.AttemptsTable())},
			{[]string{"states:StartExecution"}, stateMachine},
			// Operators list every provider's health (a Scan of a handful
			// of items) and override one.
			{[]string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, table(dynamo.ProvidersTable())},
			// Owners' quotas and budgets: count and uncount, reserve and
			// settle (conditional UpdateItem; GetItem after a refusal
			// where the store does not hand the item back), and the
			// operators' listing of every owner (a paged Scan).
			{[]string{"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:Scan"}, table(dynamo.OwnersTable())},
			// Webhook endpoints (put, read, list an owner's, rotate,
			// delete; the owner's endpoint count above) and a job's
			// deliveries (listed; an operator's redelivery reads one and
			// saves it on its revision).
			{[]string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:DeleteItem"}, table(dynamo.EndpointsTable())},
			{[]string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem"}, table(dynamo.DeliveriesTable())},
			// A cancel records the job's event: handed off (above).
			handoff,
			// A new or rotated signing secret is sealed under a fresh
			// data key; never Decrypt: the API cannot read a secret back.
			{[]string{"kms:GenerateDataKey"}, secretsKey},
		},
		// The notifier finds jobs with events to fan out in the sparse
		// by_notify index, reads each, puts one delivery per endpoint
		// (conditional PutItem), records them dispatched (conditional
		// UpdateItem), finds due deliveries in the sparse by_due index,
		// claims and records each try (conditional PutItem on the
		// revision), and updates the endpoint's health.
		deploy.FnNotify: {
			{[]string{"dynamodb:Query"}, index(dynamo.JobsTable(), dynamo.IndexByNotify)},
			{[]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, table(dynamo.JobsTable())},
			{[]string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"}, table(dynamo.EndpointsTable())},
			// A hand-off lists its job's deliveries (Query by the job).
			{[]string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"}, table(dynamo.DeliveriesTable())},
			{[]string{"dynamodb:Query"}, index(dynamo.DeliveriesTable(), dynamo.IndexByDue)},
			// It alone opens the endpoints' sealed secrets.
			{[]string{"kms:Decrypt"}, secretsKey},
		},
		// The sweeper finds open jobs in the sparse by_open index (keys
		// only: dynamo.ListOpen, no Scan), reads them by key in batches and
		// starts the pending ones' executions.
		deploy.FnSweeper: {
			{[]string{"dynamodb:Query"}, index(dynamo.JobsTable(), dynamo.IndexByOpen)},
			{[]string{"dynamodb:BatchGetItem", "dynamodb:GetItem"}, table(dynamo.JobsTable())},
			// A busy owner's minute whose count looks wrong: its jobs
			// (dynamo.JobsOfMinute, by_owner between two creation times).
			{[]string{"dynamodb:Query"}, index(dynamo.JobsTable(), dynamo.IndexByOwner)},
			{[]string{"states:StartExecution"}, stateMachine},
			// Releases closed attempts a provider's health still holds.
			{[]string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, table(dynamo.ProvidersTable())},
			// Recounts the owners' counters: the busy owners, their
			// counters, and a conditional update to repair them.
			{[]string{"dynamodb:Query"}, index(dynamo.OwnersTable(), dynamo.IndexByBusy)},
			{[]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, table(dynamo.OwnersTable())},
			// ...their webhook endpoints, counted (Query by owner), and the
			// jobs of budget reservations left behind (GetItem, above).
			{[]string{"dynamodb:Query"}, table(dynamo.EndpointsTable())},
		},
		// Runs a job's attempts: reads the job and the fallbacks'
		// certifications, starts, claims, completes or fails attempts
		// (conditional UpdateItem) and records them in the ledger. Only it
		// calls providers, so only it reads their configuration.
		deploy.FnRun: {jobRW, ledger, certs, health, budget, handoff,
			{[]string{"secretsmanager:GetSecretValue"}, Resource{Kind: KindProvidersSecret}}},
		// Marks a silent run's attempts unknown and decides the wait: no
		// certifications, no providers; an attempt it ends (one never
		// claimed) settles its budget reservation.
		deploy.FnHold: {jobRW, ledger, uncount, handoff},
		// Takes asynchronous providers' webhooks: reads the work named
		// from its provider (so it reads their configuration, as run
		// does) and applies its end to the job (conditional UpdateItem,
		// the ledger), settling what the attempt's budget and the owner's
		// slot held, handing the job's events off.
		deploy.FnEvents: {jobRW, ledger, uncount, budget, handoff,
			{[]string{"secretsmanager:GetSecretValue"}, Resource{Kind: KindProvidersSecret}},
			// Takes each verified delivery by its webhook-id (conditional
			// PutItem; GetItem after a refusal where the store does not
			// hand the item back) and gives back one whose taking failed
			// (conditional DeleteItem), review N-L1.
			{[]string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"}, table(dynamo.InboundTable())}},
	}
}

// Allows reports whether fn may do action on r.
func Allows(fn, action string, r Resource) bool {
	for _, g := range All()[fn] {
		if g.Resource == r && slices.Contains(g.Actions, action) {
			return true
		}
	}
	return false
}
