// Package lifecycle holds onejob's use cases: creating a job and moving it
// through its attempts (Engine), the state machine's task functions
// (Tasks), and the sweep that restarts stranded jobs (Sweeper).
//
// Every use case reads, lets package job decide, and has the Store execute
// the decided transition as one conditional write. When another writer got
// there first, it decides again on the state the store handed back — a lost
// race is an outcome, never an error. The Store and every other dependency
// are small interfaces declared here; their adapters live in their own
// packages (dynamo, stepfn, emf, provider/...).
package lifecycle
