package dynamo

import (
	"encoding/json"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// Attribute names of the job item and the attempt ledger.
const (
	aIdemKey      = "idem_key"
	aType         = "type"
	aInput        = "input"
	aProviders    = "providers"
	aPrimary      = "primary"
	aFingerprint  = "fingerprint"
	aStatus       = "status"
	aVersion      = "version"
	aRevision     = "revision"
	aAttemptCount = "attempt_count"
	aAttempts     = "attempts"
	aCompletedBy  = "completed_by"
	aResult       = "result"
	aError        = "error"
	aCreatedAt    = "created_at"
	aUpdatedAt    = "updated_at"

	aProvider     = "provider"
	aState        = "state"
	aHedge        = "hedge"
	aReadVersion  = "read_version"
	aStartedAt    = "started_at"
	aFinishedAt   = "finished_at"
	aUnknownSince = "unknown_since"
	aProviderReq  = "provider_request_id"
	aReqDigest    = "request_digest"
	aProviderKey  = "provider_key"
	aOutcome      = "outcome"
	aWriteToken   = "write_token"
	aClass        = "class"
	aMessage      = "message"
	aProvStatus   = "provider_status"
	aUsage        = "usage"
	aModel        = "model"
	aInTokens     = "input_tokens"
	aOutTokens    = "output_tokens"
	aLatencyMS    = "latency_ms"
	aResolution   = "resolution"
	aCancellation = "cancellation"
	aWaiting      = "waiting"
	// aIncarnation counts the jobs an (owner, key) named; aRetentionS is
	// the job's retention in seconds; aExpiresAt (epoch seconds, the
	// tables' TTL attribute) is when a finished job and its attempts go.
	aIncarnation = "incarnation"
	aRetentionS  = "retention_s"
	aExpiresAt   = "expires_at"
	aSince       = "since"
	aUntil       = "until"
	aDetail      = "detail"
	aBy          = "by"
	aReason      = "reason"
	aAt          = "at"
	// aNotify marks a job whose owner had an endpoint at create; aOutbox
	// holds its events, aDispatched how many were fanned out.
	aNotify = "notify"
	// aStream marks a job created with "stream": true (only those carry it).
	aStream     = "stream"
	aOutbox     = "outbox"
	aDispatched = "dispatched"
	aAttempt    = "attempt"
	// aRecorded is what a notice keeps of its job (job.Recorded): aStatus,
	// aVersion, aAttemptCount and aOpen, its open attempts as
	// "<n>:<state>:<class>" joined by ','.
	aRecorded = "recorded"
	aOpen     = "open"
	// aReservedN is what a budgeted job's create set aside (nano-dollars);
	// aSpend is a budgeted attempt's reservation and price.
	aReservedN    = "reserved_nusd"
	aReservation  = "reservation"
	aSpend        = "spend"
	aPriceVersion = "price_version"
	aPriceIn      = "price_in_nusd_per_mtok"
	aPriceOut     = "price_out_nusd_per_mtok"
	aKey          = "key"
	// aRemote is an asynchronous attempt's work at its provider
	// (job.Remote): aID, aStatus, aTier, the times, aPolls, aFound, and
	// for a batch line aLine and aBatch.
	aRemote      = "remote"
	aRemoteID    = "id"
	aTier        = "tier"
	aSubmittedAt = "submitted_at"
	aHeardAt     = "heard_at"
	aNextPollAt  = "next_poll_at"
	aPolls       = "polls"
	aFound       = "found"
	aCancelAt    = "cancel_at"
	aDeadline    = "deadline"
	aLine        = "line"
	aBatch       = "batch"
	// aTrace and aTraceState are the job's trace context (job.TraceContext):
	// written by the create, only for a job that has one.
	aTrace      = "trace"
	aTraceState = "trace_state"
)

// PollShards spreads jobs with work at a provider over partitions of
// by_poll: each entry is rewritten at each poll, so a partition's 1,000
// writes a second bound the polls it takes.
const PollShards = 4

// PollShard is a job's by_poll partition.
func PollShard(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return "poll#" + strconv.Itoa(int(h.Sum32()%PollShards))
}

const timeLayout = time.RFC3339Nano

// OpenShards is how many partitions by_open spreads open jobs over: each
// takes at most 1,000 index writes per second, and an open job costs two
// (its creation, its end).
const OpenShards = 16

// OpenShard is the by_open partition of a job: "open#" and a hash of its ID
// modulo OpenShards.
func OpenShard(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return "open#" + strconv.Itoa(int(h.Sum32()%OpenShards))
}

// sortTime is fixed width so that string order is time order.
const sortTime = "20060102T150405.000000000Z"

func ownerSort(j job.Job) string { return j.CreatedAt.UTC().Format(sortTime) + "#" + j.ID }

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func avN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func avB(v bool) types.AttributeValue      { return &types.AttributeValueMemberBOOL{Value: v} }
func avT(t time.Time) types.AttributeValue { return avS(t.UTC().Format(timeLayout)) }

func encodeJob(j job.Job) map[string]types.AttributeValue {
	providers := make([]types.AttributeValue, len(j.Providers))
	for i, p := range j.Providers {
		providers[i] = avS(p)
	}
	attempts := map[string]types.AttributeValue{}
	for _, a := range j.Attempts {
		attempts[strconv.Itoa(a.Number)] = &types.AttributeValueMemberM{Value: encodeAttempt(a)}
	}
	base, _ := job.ItemKey(j.ID)
	item := map[string]types.AttributeValue{
		AttrID:        avS(base),
		aIncarnation:  avN(int64(j.Incarnation)),
		AttrOwner:     avS(j.Owner),
		AttrOwnerSort: avS(ownerSort(j)),
		aIdemKey:      avS(j.IdempotencyKey),
		aType:         avS(j.Type),
		aInput:        avS(string(j.Input)),
		aProviders:    &types.AttributeValueMemberL{Value: providers},
		aFingerprint:  avS(j.Fingerprint),
		aStatus:       avS(string(j.Status)),
		aVersion:      avN(j.Version),
		aRevision:     avN(j.Revision),
		aAttemptCount: avN(int64(j.AttemptCount)),
		aAttempts:     &types.AttributeValueMemberM{Value: attempts},
		aCreatedAt:    avT(j.CreatedAt),
		aUpdatedAt:    avT(j.UpdatedAt),
	}
	if j.Primary != "" {
		item[aPrimary] = avS(j.Primary)
	}
	if j.Unsettled() {
		item[AttrOpenShard] = avS(OpenShard(j.ID))
	}
	if j.WriteToken != "" {
		item[aWriteToken] = avS(j.WriteToken)
	}
	if j.CompletedBy != 0 {
		item[aCompletedBy] = avN(int64(j.CompletedBy))
	}
	if len(j.Result) > 0 {
		item[aResult] = avS(string(j.Result))
	}
	if j.Error != nil {
		item[aError] = encodeFailure(*j.Error)
	}
	if j.Cancellation != nil {
		item[aCancellation] = encodeCancellation(*j.Cancellation)
	}
	if j.Waiting != nil {
		item[aWaiting] = encodeWaiting(*j.Waiting)
	}
	if j.Retention > 0 {
		item[aRetentionS] = avN(int64(j.Retention / time.Second))
	}
	if j.Tier != "" {
		// Only a job that may wait longer than now carries it.
		item[aTier] = avS(string(j.Tier))
	}
	if !j.ExpiresAt.IsZero() {
		item[aExpiresAt] = avEpoch(j.ExpiresAt)
	}
	// Only a job that notifies carries these: the others' items (and so
	// their cost) are as they were.
	if j.Notify {
		item[aNotify] = avB(true)
	}
	if j.Stream {
		item[aStream] = avB(true)
	}
	if len(j.Outbox) > 0 {
		item[aOutbox] = encodeOutbox(j.Outbox)
		item[aDispatched] = avN(int64(j.Dispatched))
	}
	if j.Pending() {
		item[AttrNotifyShard] = avS(NotifyShard(j.ID))
	}
	if r := j.Reservation; r != nil {
		item[aReservation] = encodeSpend(*r)
	}
	// Only a traced job carries its context: the others' items (and so
	// their cost) are as they were.
	if !j.Trace.IsZero() {
		item[aTrace] = avS(j.Trace.Parent)
		if j.Trace.State != "" {
			item[aTraceState] = avS(j.Trace.State)
		}
	}
	return item
}

// avEpoch is a time as DynamoDB's TTL reads it: whole seconds since the
// epoch, rounded up so nothing expires early.
func avEpoch(t time.Time) types.AttributeValue {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return avN(s)
}

func encodeWaiting(w job.Waiting) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		aReason: avS(string(w.Reason)), aSince: avT(w.Since), aUntil: avT(w.Until), aDetail: avS(w.Detail),
	}}
}

func encodeCancellation(c job.Cancellation) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{aBy: avS(c.By), aReason: avS(c.Reason), aAt: avT(c.At)}}
}

func encodeFailure(f job.Failure) types.AttributeValue {
	m := map[string]types.AttributeValue{aClass: avS(string(f.Class)), aMessage: avS(f.Message)}
	if f.ProviderStatus != 0 {
		m[aProvStatus] = avN(int64(f.ProviderStatus))
	}
	return &types.AttributeValueMemberM{Value: m}
}

func encodeUsage(u job.Usage) types.AttributeValue {
	m := map[string]types.AttributeValue{
		aInTokens: avN(int64(u.InputTokens)), aOutTokens: avN(int64(u.OutputTokens)), aLatencyMS: avN(u.Latency.Milliseconds()),
	}
	if u.Model != "" {
		m[aModel] = avS(u.Model)
	}
	return &types.AttributeValueMemberM{Value: m}
}

func encodeResolved(r job.Resolved) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		aOutcome: avS(string(r.Outcome)), aBy: avS(r.By), aReason: avS(r.Reason), aAt: avT(r.At),
	}}
}

func encodeAttempt(a job.Attempt) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		aProvider:    avS(a.Provider),
		aState:       avS(string(a.State)),
		aHedge:       avB(a.Hedge),
		aReadVersion: avN(a.ReadVersion),
		aStartedAt:   avT(a.StartedAt),
		aUpdatedAt:   avT(a.UpdatedAt),
	}
	if !a.FinishedAt.IsZero() {
		m[aFinishedAt] = avT(a.FinishedAt)
	}
	if !a.UnknownSince.IsZero() {
		m[aUnknownSince] = avT(a.UnknownSince)
	}
	if a.ProviderRequestID != "" {
		m[aProviderReq] = avS(a.ProviderRequestID)
	}
	if a.Error != nil {
		m[aError] = encodeFailure(*a.Error)
	}
	if a.Outcome != "" {
		m[aOutcome] = avS(a.Outcome)
	}
	if a.Usage != nil {
		m[aUsage] = encodeUsage(*a.Usage)
	}
	if a.Resolution != nil {
		m[aResolution] = encodeResolved(*a.Resolution)
	}
	if a.WriteToken != "" {
		m[aWriteToken] = avS(a.WriteToken)
	}
	if a.RequestDigest != "" {
		m[aReqDigest] = avS(a.RequestDigest)
	}
	if a.ProviderKey != "" {
		m[aProviderKey] = avS(a.ProviderKey)
	}
	if s := a.Spend; s != nil {
		m[aSpend] = encodeSpend(*s)
	}
	if r := a.Remote; r != nil {
		m[aRemote] = encodeRemote(*r)
	}
	return m
}

func encodeRemote(r job.Remote) types.AttributeValue {
	m := map[string]types.AttributeValue{
		aRemoteID: avS(r.ID), aTier: avS(string(r.Tier)), aSubmittedAt: avT(r.SubmittedAt), aHeardAt: avT(r.HeardAt),
		aNextPollAt: avT(r.NextPollAt), aPolls: avN(int64(r.Polls)), aFound: avB(r.Found),
	}
	if r.Status != "" {
		m[aStatus] = avS(r.Status)
	}
	if !r.CancelAt.IsZero() {
		m[aCancelAt] = avT(r.CancelAt)
	}
	if !r.Deadline.IsZero() {
		m[aDeadline] = avT(r.Deadline)
	}
	if r.Line != "" {
		m[aLine] = avS(r.Line)
	}
	if r.Batch != "" {
		m[aBatch] = avS(r.Batch)
	}
	return &types.AttributeValueMemberM{Value: m}
}

func (d *decoder) remote(name string) *job.Remote {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	r := &job.Remote{ID: sub.str(aRemoteID, true), Status: sub.str(aStatus, false), Tier: job.Tier(sub.str(aTier, true)),
		SubmittedAt: sub.time(aSubmittedAt, true), HeardAt: sub.time(aHeardAt, true), NextPollAt: sub.time(aNextPollAt, true),
		Polls: int(sub.num(aPolls, true)), CancelAt: sub.time(aCancelAt, false), Deadline: sub.time(aDeadline, false),
		Line: sub.str(aLine, false), Batch: sub.str(aBatch, false)}
	if f, ok := v.Value[aFound].(*types.AttributeValueMemberBOOL); ok {
		r.Found = f.Value
	}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return r
}

func encodeSpend(s job.Spend) types.AttributeValue {
	m := map[string]types.AttributeValue{aReservedN: avN(int64(s.Reserved)), aKey: avS(s.Key)}
	if s.Price.Version != "" {
		m[aPriceVersion], m[aPriceIn], m[aPriceOut] = avS(s.Price.Version), avN(int64(s.Price.Input)), avN(int64(s.Price.Output))
	}
	return &types.AttributeValueMemberM{Value: m}
}

func (d *decoder) spend(name string) *job.Spend {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	s := &job.Spend{Key: sub.str(aKey, true), Reserved: job.Money(sub.num(aReservedN, true)), Price: job.Price{
		Version: sub.str(aPriceVersion, false), Input: job.Money(sub.num(aPriceIn, false)), Output: job.Money(sub.num(aPriceOut, false))}}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return s
}

// ledgerItem is the attempt ledger's copy of an attempt, stamped with the
// job revision it reflects so that late writes never overwrite newer ones,
// and expiring a retention after it was written: the ledger mirrors the
// job item, which stays the authority, so a copy outliving its job (or
// gone before it) loses nothing.
func ledgerItem(a job.Attempt, revision int64, retention time.Duration) map[string]types.AttributeValue {
	m := encodeAttempt(a)
	m[AttrJobID] = avS(a.JobID)
	m[AttrNumberKey] = avN(int64(a.Number))
	m[aRevision] = avN(revision)
	if retention <= 0 {
		retention = job.DefaultRetention
	}
	m[aExpiresAt] = avEpoch(a.UpdatedAt.Add(retention))
	return m
}

func decodeJob(item map[string]types.AttributeValue) (job.Job, error) {
	d := decoder{m: item}
	incarnation := int(d.num(aIncarnation, false))
	j := job.Job{
		ID:             job.IncarnationID(d.str(AttrID, true), incarnation),
		Incarnation:    incarnation,
		Retention:      time.Duration(d.num(aRetentionS, false)) * time.Second,
		Tier:           job.Tier(d.str(aTier, false)),
		Owner:          d.str(AttrOwner, true),
		IdempotencyKey: d.str(aIdemKey, true),
		Type:           d.str(aType, true),
		Input:          json.RawMessage(d.str(aInput, true)),
		Primary:        d.str(aPrimary, false),
		Fingerprint:    d.str(aFingerprint, true),
		Status:         job.Status(d.str(aStatus, true)),
		Version:        d.num(aVersion, true),
		Revision:       d.num(aRevision, true),
		AttemptCount:   int(d.num(aAttemptCount, true)),
		CompletedBy:    int(d.num(aCompletedBy, false)),
		Error:          d.failure(aError),
		Cancellation:   d.cancellation(aCancellation),
		Waiting:        d.waiting(aWaiting),
		CreatedAt:      d.time(aCreatedAt, true),
		UpdatedAt:      d.time(aUpdatedAt, true),
		WriteToken:     d.str(aWriteToken, false),
		Outbox:         d.outbox(aOutbox),
		Dispatched:     int(d.num(aDispatched, false)),
		Reservation:    d.spend(aReservation),
		Trace:          job.TraceContext{Parent: d.str(aTrace, false), State: d.str(aTraceState, false)},
	}
	if v, ok := item[aNotify].(*types.AttributeValueMemberBOOL); ok {
		j.Notify = v.Value
	}
	if v, ok := item[aStream].(*types.AttributeValueMemberBOOL); ok {
		j.Stream = v.Value
	}
	if r := d.str(aResult, false); r != "" {
		j.Result = json.RawMessage(r)
	}
	if s := d.num(aExpiresAt, false); s > 0 {
		j.ExpiresAt = time.Unix(s, 0).UTC()
	}
	if l, ok := item[aProviders].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if sv, ok := v.(*types.AttributeValueMemberS); ok {
				j.Providers = append(j.Providers, sv.Value)
			}
		}
	}
	if m, ok := item[aAttempts].(*types.AttributeValueMemberM); ok {
		for k, v := range m.Value {
			am, ok := v.(*types.AttributeValueMemberM)
			num, err := strconv.Atoi(k)
			if !ok || err != nil {
				d.fail(aAttempts)
				continue
			}
			a, err := decodeAttempt(j.ID, num, am.Value)
			if err != nil && d.err == nil {
				d.err = err
			}
			j.Attempts = append(j.Attempts, a)
		}
		sort.Slice(j.Attempts, func(i, k int) bool { return j.Attempts[i].Number < j.Attempts[k].Number })
	}
	return j, d.err
}

func decodeAttempt(jobID string, number int, m map[string]types.AttributeValue) (job.Attempt, error) {
	d := decoder{m: m}
	a := job.Attempt{
		JobID:             jobID,
		Number:            number,
		Provider:          d.str(aProvider, true),
		State:             job.AttemptState(d.str(aState, true)),
		ReadVersion:       d.num(aReadVersion, true),
		StartedAt:         d.time(aStartedAt, true),
		UpdatedAt:         d.time(aUpdatedAt, true),
		FinishedAt:        d.time(aFinishedAt, false),
		UnknownSince:      d.time(aUnknownSince, false),
		ProviderRequestID: d.str(aProviderReq, false),
		Error:             d.failure(aError),
		Usage:             d.usage(aUsage),
		Resolution:        d.resolved(aResolution),
		Outcome:           d.str(aOutcome, false),
		WriteToken:        d.str(aWriteToken, false),
		RequestDigest:     d.str(aReqDigest, false),
		ProviderKey:       d.str(aProviderKey, false),
		Spend:             d.spend(aSpend),
		Remote:            d.remote(aRemote),
	}
	if v, ok := m[aHedge].(*types.AttributeValueMemberBOOL); ok {
		a.Hedge = v.Value
	}
	return a, d.err
}
