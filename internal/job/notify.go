package job

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Notifications: an owner registers endpoints (webhook endpoints in the
// API); the write that ends a job, or blocks it on an unknown attempt,
// records the event in the job's outbox (Job.Outbox) when the job notifies
// (Job.Notify, decided at create from the owner's endpoint count), so no
// crash between that write and a delivery can lose it. The notifier fans
// each event out into one delivery per endpoint that wants it and tries
// each delivery on the retry schedule until the endpoint answers 2xx.
// Here: the events and the outbox; endpoint.go: the endpoints;
// delivery.go: the deliveries.

// EventType names what happened to a job.
type EventType string

// Event types an endpoint may ask for.
const (
	EventJobSucceeded   EventType = "job.succeeded"
	EventJobFailed      EventType = "job.failed"
	EventJobCancelled   EventType = "job.cancelled"
	EventAttemptUnknown EventType = "attempt.unknown"
)

// EventTypes lists every event type.
func EventTypes() []EventType {
	return []EventType{EventJobSucceeded, EventJobFailed, EventJobCancelled, EventAttemptUnknown}
}

// Valid reports whether t is a known event type.
func (t EventType) Valid() bool { return slices.Contains(EventTypes(), t) }

// Notice is one event recorded in a job's outbox by the write that made it
// happen.
type Notice struct {
	// ID is the event's message ID (the webhook-id header), the same on
	// every try of every delivery of the event: MessageID.
	ID   string
	Type EventType
	At   time.Time
	// Attempt is the attempt that became unknown; 0 for job events.
	Attempt int
	// Recorded is the job as the write that recorded the event left it,
	// in what may change later (AsRecorded); nil for notices recorded
	// before it was kept.
	Recorded *Recorded
}

// Recorded is what a notice keeps of its job, so that its deliveries show
// the job as it was when the event happened, not as the notifier reads it
// later (review: an attempt.unknown event whose data already said
// succeeded). Everything else the owner's view shows either never changes
// once written or is rewound from these: a job's attempts are only ever
// appended, and an ended attempt never moves again, so the attempts that
// were open are the only ones whose state may differ later.
type Recorded struct {
	Status   Status
	Version  int64
	Attempts int
	// Open is the state of each attempt open at the time (at most
	// MaxRecordedOpen of them, the newest: no job has more open at once).
	Open []AttemptMark
}

// AttemptMark is one attempt's state at a moment, and its error's class
// then (an unknown attempt's: ambiguous); the owner's view shows no more
// of an error, and the operators' message is not kept.
type AttemptMark struct {
	Number int
	State  AttemptState
	Class  Class
}

// MaxRecordedOpen bounds a notice's open attempts, so the room the store
// keeps for a full outbox is bounded: the launch rules keep at most a
// running attempt and its hedge open at once.
const MaxRecordedOpen = 4

// record fills in what a notice keeps of after, the job its write leaves.
func record(after Job) *Recorded {
	r := &Recorded{Status: after.Status, Version: after.Version, Attempts: len(after.Attempts)}
	for _, a := range after.Attempts {
		if a.State.Open() {
			m := AttemptMark{Number: a.Number, State: a.State}
			if a.Error != nil {
				m.Class = a.Error.Class
			}
			r.Open = append(r.Open, m)
		}
	}
	if len(r.Open) > MaxRecordedOpen {
		r.Open = r.Open[len(r.Open)-MaxRecordedOpen:]
	}
	return r
}

// recordNotices stamps the notices after's write adds (those beyond
// before's outbox) with the job as that write leaves it. The transition
// constructors call it last, once every field of after is final.
func recordNotices(before, after Job) Job {
	if len(after.Outbox) <= len(before.Outbox) {
		return after
	}
	out := slices.Clone(after.Outbox)
	for i := len(before.Outbox); i < len(out); i++ {
		if out[i].Recorded == nil {
			out[i].Recorded = record(after)
		}
	}
	after.Outbox = out
	return after
}

// AsRecorded is j, read later, as it was when n was recorded: its status
// and version then, only the attempts it had, each open one in the state
// it was in (with what its end recorded taken away), and without an
// outcome it did not have yet. A notice without a record gives j as read.
func (j Job) AsRecorded(n Notice) Job {
	r := n.Recorded
	if r == nil {
		return j
	}
	if j.Status != r.Status {
		j.Waiting = nil
	}
	j.Status, j.Version, j.UpdatedAt = r.Status, r.Version, n.At
	if r.Attempts < len(j.Attempts) {
		j.Attempts = j.Attempts[:r.Attempts]
	}
	j.Attempts = slices.Clone(j.Attempts)
	j.AttemptCount = len(j.Attempts)
	for _, m := range r.Open {
		for i, a := range j.Attempts {
			if a.Number != m.Number || a.State == m.State {
				continue
			}
			a.State, a.UpdatedAt = m.State, n.At
			a.FinishedAt, a.Error, a.Usage, a.Resolution, a.Outcome = time.Time{}, nil, nil, nil, ""
			if m.Class != "" {
				a.Error = &Failure{Class: m.Class}
			}
			if m.State != AttemptUnknown {
				a.UnknownSince = time.Time{}
			}
			j.Attempts[i] = a
		}
	}
	if !r.Status.Terminal() {
		j.CompletedBy, j.Result, j.Error, j.Cancellation, j.ExpiresAt = 0, nil, nil, nil, time.Time{}
	}
	return j
}

// MessageID is the stable ID of a job's event: "msg_" and a hash of the
// job, the type and the attempt, so a decision made twice names the same
// message, and the ID carries no '.' (the signed content joins on it).
func MessageID(jobID string, t EventType, attempt int) string {
	sum := sha256.Sum256([]byte(jobID + "\x00" + string(t) + "\x00" + strconv.Itoa(attempt)))
	return "msg_" + hex.EncodeToString(sum[:16])
}

// Pending reports whether the job holds events not yet fanned out.
func (j Job) Pending() bool { return j.Dispatched < len(j.Outbox) }

// MaxOutbox bounds the events one job records, so that what the store
// keeps room for them is bounded too (review L4): the outcome's always has
// a place; attempts that become unknown past MaxOutbox-1 others are not
// told of (the job's own status and the operators' views still show them).
const MaxOutbox = 16

// notice records the event in after's outbox when the job notifies.
func notice(after Job, t EventType, attempt int, now time.Time) Job {
	if !after.Notify || len(after.Outbox) >= MaxOutbox || t == EventAttemptUnknown && len(after.Outbox) >= MaxOutbox-1 {
		return after
	}
	id := MessageID(after.ID, t, attempt)
	for _, n := range after.Outbox {
		if n.ID == id {
			return after
		}
	}
	after.Outbox = append(slices.Clone(after.Outbox), Notice{ID: id, Type: t, At: now.UTC(), Attempt: attempt})
	return after
}

// outcomeEvent is the event an outcome kind records.
func outcomeEvent(k Kind) EventType {
	switch k {
	case KindComplete:
		return EventJobSucceeded
	case KindFail:
		return EventJobFailed
	}
	return EventJobCancelled
}

// DecideDispatched records that the first n notices of the outbox were
// fanned out into deliveries. Fewer than already recorded is a no-op.
func DecideDispatched(j Job, n int, now time.Time) (Transition, error) {
	if n > len(j.Outbox) {
		return Transition{}, fmt.Errorf("%w: %d notices dispatched of %d", ErrInvalidTransition, n, len(j.Outbox))
	}
	if n <= j.Dispatched {
		return noop(j, KindDispatched, 0), nil
	}
	after := j
	after.Dispatched = n
	return bookkeeping(j, after, KindDispatched, 0, now.UTC()), nil
}

// NotifiesFor reports whether a job its owner creates now notifies: the
// owner has an endpoint (a count the create reads with the quota counter).
func NotifiesFor(u OwnerUsage) bool { return u.Endpoints > 0 }
