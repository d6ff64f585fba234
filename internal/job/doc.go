// Package job holds onejob's domain rules in plain Go: a job is one durable
// intent, an attempt is one try at it. Nothing here talks to AWS; the store
// executes the transitions decided here, each as one conditional write.
//
// Every rule has one home here:
//   - identity: NewID (the job ID derives from owner and idempotency key, so
//     uniqueness is one conditional write), ValidID, AttemptKey;
//   - requests: New, ValidKey, ChooseProviders, PrimaryOf, SameRequest (replay or
//     conflict), ShouldStart (only a pending job's execution is started);
//   - attempts: the transition table (AttemptEdges) that every Decide
//     function moves attempts through, DecideStart/DecideHedge (no new
//     attempt while one is starting or unknown), DecideRunning (one runner
//     claims), DecideUnknown (a timeout is unknown, never failed),
//     DecideComplete (compare-and-swap; a loser is discarded, never merged),
//     DecideResolve, DecideFail, DecideCancel;
//   - the next step: Next, NextHedge, NeedsCertification (only the job
//     type's primary runs uncertified), the wait schedule, Overdue;
//   - how a task reports an attempt's end to the state machine: Signal,
//     EndSignal.
//
// A job's status is derived from its attempts until an outcome is written:
// any attempt unknown ⇒ unknown; some attempt exists ⇒ running; else
// pending. An outcome (result, final failure, cancellation) is written only
// by compare-and-swap on the job's version, which nothing else moves.
// docs/state-machines.md draws both machines from AttemptEdges and
// StatusEdges (a test keeps the pictures true).
package job
