// Package job holds onejob's domain rules in plain Go: a job is one durable
// intent, an attempt is one try at it. Nothing here talks to AWS; the store
// executes the transitions decided here, each as one conditional write.
//
// Job statuses:
//
//	pending ──first attempt──▶ running ◀──resolved──┐
//	                            │   │               │
//	                            │   └─timeout──▶ unknown
//	                            ▼                   │
//	          succeeded | failed | cancelled ◀──────┘   (outcome: version+1)
//
// Attempt states:
//
//	starting ─▶ running ─▶ succeeded | failed
//	   │           │
//	   │           └──timeout──▶ unknown ─resolve─▶ succeeded | failed | cancelled
//	   └─▶ failed (timed out before a runner claimed it: never sent)
//	starting | running | unknown ─lost the race─▶ discarded
//
// A job's status is derived from its attempts until an outcome is written:
// any attempt unknown ⇒ unknown; some attempt exists ⇒ running; else pending.
// An outcome (result, final failure, cancellation) is written only by
// compare-and-swap on the job's version, which nothing else moves.
package job
