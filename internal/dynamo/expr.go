package dynamo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// The store's writes are composed from the named pieces below: condition
// clauses (what must still hold for a write to apply) and update parts (what
// it changes). Each piece owns the expression attribute names and values its
// text uses, so a request is exactly the sum of its pieces: nothing defined
// in one place and used in another, nothing sent unused (DynamoDB refuses
// unused names and values). write.go composes them per transition kind.

// refs are the expression attribute names and values one piece uses.
type refs struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

// clause is a named condition clause. The zero clause asks for nothing.
type clause struct {
	text string
	// anyOf marks a disjunction, which allOf puts in parentheses.
	anyOf bool
	uses  []refs
}

func nameMap(kv ...string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// ---- condition clauses ------------------------------------------------------

// jobAbsent: no job has this ID yet (Create).
func jobAbsent() clause {
	return clause{text: "attribute_not_exists(#id)", uses: []refs{{names: nameMap("#id", AttrID)}}}
}

// revisionIs: the job item is still at the revision the decision read
// (bookkeeping transitions).
func revisionIs(rev int64) clause {
	return clause{text: "#revision = :rev", uses: []refs{{
		names:  nameMap("#revision", aRevision),
		values: map[string]types.AttributeValue{":rev": avN(rev)},
	}}}
}

// versionIs: the job's outcome version is still the one the decision read
// (outcome transitions; for a completion, the version its attempt read).
func versionIs(v int64) clause {
	return clause{text: "#version = :read", uses: []refs{{
		names:  nameMap("#version", aVersion),
		values: map[string]types.AttributeValue{":read": avN(v)},
	}}}
}

// incarnationIs: the item still holds incarnation n of its key.
func incarnationIs(n int) clause {
	return clause{text: "#incarnation = :incarnation", uses: []refs{{
		names:  nameMap("#incarnation", aIncarnation),
		values: map[string]types.AttributeValue{":incarnation": avN(int64(n))},
	}}}
}

// noWinnerYet: no attempt's result has been written.
func noWinnerYet() clause {
	return clause{text: "attribute_not_exists(#completed)", uses: []refs{{names: nameMap("#completed", aCompletedBy)}}}
}

// attemptStateIn: attempt n is still in one of states. No states asks for
// nothing (the zero clause).
func attemptStateIn(n int, states []job.AttemptState) clause {
	if len(states) == 0 {
		return clause{}
	}
	r := refs{
		names:  nameMap("#attempts", aAttempts, "#n", strconv.Itoa(n), "#state", aState),
		values: map[string]types.AttributeValue{},
	}
	in := make([]string, len(states))
	for i, st := range states {
		in[i] = ":allowed" + strconv.Itoa(i)
		r.values[in[i]] = avS(string(st))
	}
	return clause{text: "#attempts.#n.#state IN (" + strings.Join(in, ", ") + ")", uses: []refs{r}}
}

// stillInFlight: every attempt the decision saw running or unknown, but
// the one the transition itself concerns (its own clause covers it), is
// still in that state. An outcome compares on the version, not the
// revision, so without it an outcome decided before another attempt ended
// would keep a settled job in the open index and its owner's slot taken
// (issue 26); with it, such an outcome is decided again on the job as it
// is. A job with nothing else in flight (the happy path) adds nothing.
func stillInFlight(before job.Job, except int) clause {
	var out []clause
	for _, a := range before.Attempts {
		if a.Number == except || !a.State.InFlight() {
			continue
		}
		n := strconv.Itoa(a.Number)
		out = append(out, clause{text: "#attempts.#inflight" + n + ".#state = :inflight" + n, uses: []refs{{
			names:  nameMap("#attempts", aAttempts, "#inflight"+n, n, "#state", aState),
			values: map[string]types.AttributeValue{":inflight" + n: avS(string(a.State))},
		}}})
	}
	if len(out) == 0 {
		return clause{}
	}
	return allOf(out...)
}

// ledgerAbsent: the ledger holds no copy of this attempt yet.
func ledgerAbsent() clause {
	return clause{text: "attribute_not_exists(#job)", uses: []refs{{names: nameMap("#job", AttrJobID)}}}
}

// ledgerOlderThan: the ledger's copy reflects a job revision before rev.
func ledgerOlderThan(rev int64) clause {
	return clause{text: "#revision < :rev", uses: []refs{{
		names:  nameMap("#revision", aRevision),
		values: map[string]types.AttributeValue{":rev": avN(rev)},
	}}}
}

// allOf holds when every clause holds; zero clauses are left out.
func allOf(cs ...clause) clause {
	var out clause
	var texts []string
	for _, c := range cs {
		if c.text == "" {
			continue
		}
		t := c.text
		if c.anyOf {
			t = "(" + t + ")"
		}
		texts = append(texts, t)
		out.uses = append(out.uses, c.uses...)
	}
	out.text = strings.Join(texts, " AND ")
	return out
}

// anyOf holds when one of the clauses holds; zero clauses are left out.
func anyOf(cs ...clause) clause {
	var out clause
	var texts []string
	for _, c := range cs {
		if c.text == "" {
			continue
		}
		texts = append(texts, c.text)
		out.uses = append(out.uses, c.uses...)
	}
	out.text = strings.Join(texts, " OR ")
	out.anyOf = len(texts) > 1
	return out
}

// ---- update parts -----------------------------------------------------------

// part is a named piece of an update: the SET and REMOVE actions it adds.
type part struct {
	set, remove []string
	uses        []refs
}

// stamp is in every write of the job item: the new status and update time,
// one more revision, and the token naming this write (see wroteBy).
func stamp(after job.Job, token string) part {
	return part{
		set: []string{"#status = :status", "#updated = :updated", "#revision = #revision + :one", "#token = :token"},
		uses: []refs{{
			names: nameMap("#status", aStatus, "#updated", aUpdatedAt, "#revision", aRevision, "#token", aWriteToken),
			values: map[string]types.AttributeValue{
				":status": avS(string(after.Status)), ":updated": avT(after.UpdatedAt), ":one": avN(1), ":token": avS(token),
			},
		}},
	}
}

// touch is stamp without the status, for a bookkeeping write that never
// changes it (the notifier's dispatch record): such a write names nothing
// of the job's state, and the notify role may write no more (review L5,
// DispatchAttributes).
func touch(after job.Job, token string) part {
	return part{
		set: []string{"#updated = :updated", "#revision = #revision + :one", "#token = :token"},
		uses: []refs{{
			names:  nameMap("#updated", aUpdatedAt, "#revision", aRevision, "#token", aWriteToken),
			values: map[string]types.AttributeValue{":updated": avT(after.UpdatedAt), ":one": avN(1), ":token": avS(token)},
		}},
	}
}

// putAttempt writes attempt a whole into the job item's map of attempts.
func putAttempt(a job.Attempt) part {
	return part{set: []string{"#attempts.#n = :attempt"}, uses: []refs{{
		names:  nameMap("#attempts", aAttempts, "#n", strconv.Itoa(a.Number)),
		values: map[string]types.AttributeValue{":attempt": &types.AttributeValueMemberM{Value: encodeAttempt(a)}},
	}}}
}

// setAttemptCount records how many attempts the job has started.
func setAttemptCount(n int) part {
	return part{set: []string{"#count = :count"}, uses: []refs{{
		names:  nameMap("#count", aAttemptCount),
		values: map[string]types.AttributeValue{":count": avN(int64(n))},
	}}}
}

// setVersion moves the outcome version (versionIs compares on it).
func setVersion(v int64) part {
	return part{set: []string{"#version = :version"}, uses: []refs{{
		names:  nameMap("#version", aVersion),
		values: map[string]types.AttributeValue{":version": avN(v)},
	}}}
}

// outcomeFields writes the outcome after carries: the winning attempt and
// its result, if any; the job's failure, or its removal when before had one
// and after has none.
func outcomeFields(before, after job.Job) part {
	var p part
	if after.CompletedBy != 0 {
		p.set = append(p.set, "#completed = :completed", "#result = :result")
		p.uses = append(p.uses, refs{
			names: nameMap("#completed", aCompletedBy, "#result", aResult),
			values: map[string]types.AttributeValue{
				":completed": avN(int64(after.CompletedBy)), ":result": avS(string(after.Result)),
			},
		})
	}
	if after.Cancellation != nil {
		p.set = append(p.set, "#cancellation = :cancellation")
		p.uses = append(p.uses, refs{
			names:  nameMap("#cancellation", aCancellation),
			values: map[string]types.AttributeValue{":cancellation": encodeCancellation(*after.Cancellation)},
		})
	}
	switch {
	case after.Error != nil:
		p.set = append(p.set, "#error = :error")
		p.uses = append(p.uses, refs{
			names:  nameMap("#error", aError),
			values: map[string]types.AttributeValue{":error": encodeFailure(*after.Error)},
		})
	case before.Error != nil:
		p.remove = append(p.remove, "#error")
		p.uses = append(p.uses, refs{names: nameMap("#error", aError)})
	}
	w := setWaiting(before, after)
	p.set, p.remove, p.uses = append(p.set, w.set...), append(p.remove, w.remove...), append(p.uses, w.uses...)
	if !after.ExpiresAt.IsZero() {
		// The outcome starts the retention (the tables' TTL attribute).
		p.set = append(p.set, "#expires = :expires")
		p.uses = append(p.uses, refs{names: nameMap("#expires", aExpiresAt),
			values: map[string]types.AttributeValue{":expires": avEpoch(after.ExpiresAt)}})
	}
	return p
}

// setWaiting writes after's wait for providers, or removes before's when
// after has none; nothing when neither has one.
func setWaiting(before, after job.Job) part {
	switch {
	case after.Waiting != nil:
		return part{set: []string{"#waiting = :waiting"}, uses: []refs{{
			names:  nameMap("#waiting", aWaiting),
			values: map[string]types.AttributeValue{":waiting": encodeWaiting(*after.Waiting)},
		}}}
	case before.Waiting != nil:
		return part{remove: []string{"#waiting"}, uses: []refs{{names: nameMap("#waiting", aWaiting)}}}
	}
	return part{}
}

// leaveOpenIndex drops the job from the sweeper's sparse by_open index.
func leaveOpenIndex() part {
	return part{remove: []string{"#open"}, uses: []refs{{names: nameMap("#open", AttrOpenShard)}}}
}

// openIndex drops the job from the by_open index with the write that ends
// its last work in flight (job.SettlesJob): its outcome, or, for a job
// that has one, the end of its last running or unknown attempt.
func openIndex(before, after job.Job) part {
	if job.SettlesJob(before, after) {
		return leaveOpenIndex()
	}
	return part{}
}

// recordNotices appends the events the transition recorded (a job that
// notifies, ended or blocked) to the outbox and puts the job in the
// notifier's sparse by_notify index: the event is durable with the write
// that made it happen. It appends rather than sets: an outcome compares
// on the version, not the revision, so a notice another write added since
// the decision's read must stay. Nothing for every other write.
func recordNotices(before, after job.Job) part {
	if len(after.Outbox) <= len(before.Outbox) {
		return part{}
	}
	return part{set: []string{"#outbox = list_append(if_not_exists(#outbox, :no_notices), :notices)",
		"#dispatched = if_not_exists(#dispatched, :none_dispatched)", "#notify_shard = :notify_shard"}, uses: []refs{{
		names: nameMap("#outbox", aOutbox, "#dispatched", aDispatched, "#notify_shard", AttrNotifyShard),
		values: map[string]types.AttributeValue{":no_notices": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":notices": encodeOutbox(after.Outbox[len(before.Outbox):]), ":none_dispatched": avN(0),
			":notify_shard": avS(NotifyShard(after.ID))},
	}}}
}

// pollIndex keeps the job in the scheduled pass's sparse by_poll index
// at the soonest moment its work at a provider is due (job.DueAt of the
// transition's after), with the write that moved it; the write that ends
// its last such work takes it out. Nothing for a job whose due moment did
// not move: every job that never waits on a provider (the happy path).
func pollIndex(before, after job.Job) part {
	was, due := job.DueAt(before), job.DueAt(after)
	switch {
	case due.Equal(was):
		return part{}
	case due.IsZero():
		return part{remove: []string{"#poll_shard", "#poll_at"}, uses: []refs{{names: nameMap("#poll_shard", AttrPollShard, "#poll_at", AttrPollAt)}}}
	}
	return part{set: []string{"#poll_shard = :poll_shard", "#poll_at = :poll_at"}, uses: []refs{{
		names:  nameMap("#poll_shard", AttrPollShard, "#poll_at", AttrPollAt),
		values: map[string]types.AttributeValue{":poll_shard": avS(PollShard(after.ID)), ":poll_at": avS(due.UTC().Format(sortTime))},
	}}}
}

// setDispatched records the notices fanned out; with none left, the job
// leaves by_notify.
func setDispatched(after job.Job) part {
	p := part{set: []string{"#dispatched = :dispatched"}, uses: []refs{{
		names:  nameMap("#dispatched", aDispatched),
		values: map[string]types.AttributeValue{":dispatched": avN(int64(after.Dispatched))},
	}}}
	if !after.Pending() {
		p.remove = []string{"#notify_shard"}
		p.uses = append(p.uses, refs{names: nameMap("#notify_shard", AttrNotifyShard)})
	}
	return p
}

// updateOf joins parts into one update expression, SET actions before
// REMOVE actions, each in the parts' order.
func updateOf(parts ...part) (string, []refs) {
	var set, remove []string
	var uses []refs
	for _, p := range parts {
		set = append(set, p.set...)
		remove = append(remove, p.remove...)
		uses = append(uses, p.uses...)
	}
	var clauses []string
	if len(set) > 0 {
		clauses = append(clauses, "SET "+strings.Join(set, ", "))
	}
	if len(remove) > 0 {
		clauses = append(clauses, "REMOVE "+strings.Join(remove, ", "))
	}
	return strings.Join(clauses, " "), uses
}

// ---- one request's maps -----------------------------------------------------

// attributeMaps merges the names and values of a request's pieces. Pieces
// may share a name placeholder only for the same attribute; a value
// placeholder belongs to one piece. Empty maps are nil: DynamoDB refuses
// empty ones.
func attributeMaps(uses ...[]refs) (map[string]string, map[string]types.AttributeValue, error) {
	var ns map[string]string
	var vs map[string]types.AttributeValue
	for _, rs := range uses {
		for _, r := range rs {
			for k, v := range r.names {
				if old, ok := ns[k]; ok && old != v {
					return nil, nil, fmt.Errorf("store: expression name %s means both %q and %q", k, old, v)
				}
				if ns == nil {
					ns = map[string]string{}
				}
				ns[k] = v
			}
			for k, v := range r.values {
				if _, ok := vs[k]; ok {
					return nil, nil, fmt.Errorf("store: expression value %s is set by two pieces", k)
				}
				if vs == nil {
					vs = map[string]types.AttributeValue{}
				}
				vs[k] = v
			}
		}
	}
	return ns, vs, nil
}
