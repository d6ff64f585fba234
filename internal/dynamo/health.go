package dynamo

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// A provider's health is one item of the providers table, keyed by the
// provider's name and replaced whole by each decided change: a conditional
// PutItem on the revision the decision read (absent for the first). The
// item is bounded: its maps by the provider's max_concurrent (held,
// running, held_by; job.MaxConcurrentBound) and its probes, and by the
// owner keys (job.OwnerKey, at most job.MaxOwnerKeyBytes;
// job.MaxTrackedOwners of them and job.OwnerBuckets buckets: owners,
// backoff, waiters, rate_waiters; job.MaxRateEntries in the rate's
// window). TestAProvidersHealthFitsAtItsBounds holds it within
// DynamoDB's 400 KB at all of them at once.

// Attribute names of a provider's health item.
const (
	hState       = "state"
	hSince       = "since"
	hReason      = "reason"
	hWindowStart = "window_start"
	hFailures    = "failures"
	hAnswered    = "answered"
	hPrevFail    = "previous_failures"
	hPrevAnswer  = "previous_answered"
	hOpenUntil   = "open_until"
	hCooldownMS  = "cooldown_ms"
	hTrips       = "trips"
	hProbes      = "probes"
	hPassed      = "passed"
	hHeld        = "held"
	hForced      = "forced"
	hOpened      = "opened"
	hOwners      = "owners"
	hBackoff     = "backoff"
	hRunning     = "running"
	hHeldBy      = "held_by"
	hWaiters     = "waiters"
	hRate        = "rate"
	hRateWaiters = "rate_waiters"
	hOverdue     = "overdue"
	hPausedUntil = "paused_until"
	hOwnerFail   = "f"
	hOwnerAns    = "a"
)

// Health reads a provider's health with a consistent read; a provider
// nothing was written for is closed.
func (s *Store) Health(ctx context.Context, provider string) (job.Health, error) {
	out, err := s.db.getItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.providers),
		Key:            map[string]types.AttributeValue{AttrProvider: avS(provider)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return job.Health{}, storeError("get provider health", err)
	}
	if len(out.Item) == 0 {
		return job.NewHealth(provider), nil
	}
	return decodeHealth(out.Item)
}

// SaveHealth writes a decided change unless the stored revision moved; a
// lost condition hands back the stored health.
func (s *Store) SaveHealth(ctx context.Context, c job.HealthChange) (bool, job.Health, error) {
	if !c.Decided() {
		return false, job.Health{}, errors.New("store: health change was not decided")
	}
	cond := healthAt(c.Before().Revision)
	ns, vs, err := attributeMaps(cond.uses)
	if err != nil {
		return false, job.Health{}, err
	}
	_, err = s.db.putItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(s.providers),
		Item:                      encodeHealth(c.After()),
		ConditionExpression:       aws.String(cond.text),
		ExpressionAttributeNames:  ns,
		ExpressionAttributeValues: vs,
		// A lost race hands back the stored health in the same request
		// (DynamoDB; dynalite ignores it, and the health is read then).
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		if len(ccf.Item) > 0 {
			cur, err := decodeHealth(ccf.Item)
			return false, cur, err
		}
		cur, err := s.Health(ctx, c.After().Provider)
		return false, cur, err
	case err != nil:
		return false, job.Health{}, storeError("put provider health", err)
	}
	return true, c.After(), nil
}

// healthAt: the stored health is still at the revision the decision read
// (none stored, for revision 0).
func healthAt(rev int64) clause {
	if rev == 0 {
		return clause{text: "attribute_not_exists(#provider)", uses: []refs{{names: nameMap("#provider", AttrProvider)}}}
	}
	return revisionIs(rev)
}

// ListHealth scans the providers table: one item per configured provider
// that ever changed, a handful in all.
func (s *Store) ListHealth(ctx context.Context) ([]job.Health, error) {
	var out []job.Health
	var start map[string]types.AttributeValue
	for {
		res, err := s.db.scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.providers), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, storeError("list provider health", err)
		}
		for _, item := range res.Items {
			h, err := decodeHealth(item)
			if err != nil {
				return nil, err
			}
			out = append(out, h)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Provider < out[k].Provider })
	return out, nil
}

func encodeTimes(m map[string]time.Time) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for k, t := range m {
		out[k] = avT(t)
	}
	return &types.AttributeValueMemberM{Value: out}
}

func encodeHealth(h job.Health) map[string]types.AttributeValue {
	failures := make(map[string]types.AttributeValue, len(h.Failures))
	for k, n := range h.Failures {
		failures[string(k)] = avN(int64(n))
	}
	item := map[string]types.AttributeValue{
		AttrProvider: avS(h.Provider),
		hState:       avS(string(h.State)),
		hReason:      avS(h.Reason),
		hFailures:    &types.AttributeValueMemberM{Value: failures},
		hAnswered:    avN(int64(h.Answered)),
		hPrevFail:    avN(int64(h.PreviousFailures)),
		hPrevAnswer:  avN(int64(h.PreviousAnswered)),
		hCooldownMS:  avN(h.Cooldown.Milliseconds()),
		hTrips:       avN(int64(h.Trips)),
		hProbes:      encodeTimes(h.Probes),
		hPassed:      avN(int64(h.Passed)),
		hHeld:        encodeTimes(h.Held),
		hOpened:      avN(int64(h.Opened)),
		hOwners:      encodeTallies(h.Owners),
		hBackoff:     encodeTimes(h.Backoff),
		hRunning:     encodeTimes(h.Running),
		hHeldBy:      encodeStrings(h.HeldBy),
		hWaiters:     encodeTimes(h.Waiters),
		hRateWaiters: encodeTimes(h.RateWaiters),
		hOverdue:     encodeTimes(h.Overdue),
		aUpdatedAt:   avT(h.UpdatedAt),
		aRevision:    avN(h.Revision),
	}
	if len(h.Rate) > 0 {
		item[hRate] = encodeRate(h.Rate)
	}
	for name, t := range map[string]time.Time{hSince: h.Since, hWindowStart: h.WindowStart, hOpenUntil: h.OpenUntil, hPausedUntil: h.PausedUntil} {
		if !t.IsZero() {
			item[name] = avT(t)
		}
	}
	if f := h.Forced; f != nil {
		item[hForced] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			hState: avS(string(f.State)), aBy: avS(f.By), aReason: avS(f.Reason), aAt: avT(f.At),
		}}
	}
	return item
}

func encodeStrings(m map[string]string) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = avS(v)
	}
	return &types.AttributeValueMemberM{Value: out}
}

func (d *decoder) strings(name string) map[string]string {
	return decodeMap(d, name, func(sub *decoder, k string) string { return sub.str(k, true) })
}

// encodeTallies: owner key -> {f: failures, a: answered}; bounded by
// job.MaxTrackedOwners and job.OwnerBuckets.
func encodeTallies(m map[string]job.OwnerTally) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for o, t := range m {
		out[o] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			hOwnerFail: avN(int64(t.Failures)), hOwnerAns: avN(int64(t.Answered))}}
	}
	return &types.AttributeValueMemberM{Value: out}
}

func (d *decoder) tallies(name string) map[string]job.OwnerTally {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok || len(v.Value) == 0 {
		return nil
	}
	out := make(map[string]job.OwnerTally, len(v.Value))
	for o, tv := range v.Value {
		m, ok := tv.(*types.AttributeValueMemberM)
		if !ok {
			d.fail(name)
			continue
		}
		sub := decoder{m: m.Value}
		out[o] = job.OwnerTally{Failures: int(sub.num(hOwnerFail, true)), Answered: int(sub.num(hOwnerAns, true))}
		if sub.err != nil && d.err == nil {
			d.err = sub.err
		}
	}
	return out
}

// encodeRate: slot start (Unix milliseconds) -> "o"+owner -> requests, and
// "t"+owner -> tokens under a token rate. The prefix keeps the no-owner
// count ("") a valid map key; the slots and owners are bounded
// (job.RateSlots, job.MaxRateEntries and job.OwnerBuckets).
func encodeRate(slots []job.RateSlot) types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(slots))
	for _, s := range slots {
		by := make(map[string]types.AttributeValue, len(s.ByOwner))
		for o, n := range s.ByOwner {
			by["o"+o] = avN(int64(n))
		}
		for o, n := range s.Tokens {
			by["t"+o] = avN(int64(n))
		}
		out[strconv.FormatInt(s.Start.UnixMilli(), 10)] = &types.AttributeValueMemberM{Value: by}
	}
	return &types.AttributeValueMemberM{Value: out}
}

func (d *decoder) rate(name string) []job.RateSlot {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok || len(v.Value) == 0 {
		return nil
	}
	out := make([]job.RateSlot, 0, len(v.Value))
	for k, sv := range v.Value {
		ms, err := strconv.ParseInt(k, 10, 64)
		m, ok := sv.(*types.AttributeValueMemberM)
		if err != nil || !ok {
			d.fail(name)
			continue
		}
		slot := job.RateSlot{Start: time.UnixMilli(ms).UTC(), ByOwner: make(map[string]int, len(m.Value))}
		for o, nv := range m.Value {
			n, ok := nv.(*types.AttributeValueMemberN)
			x, err := strconv.Atoi(valueOf(n, ok))
			switch {
			case !ok || err != nil:
				d.fail(name)
			case strings.HasPrefix(o, "o"):
				slot.ByOwner[o[1:]] = x
			case strings.HasPrefix(o, "t"):
				if slot.Tokens == nil {
					slot.Tokens = map[string]int{}
				}
				slot.Tokens[o[1:]] = x
			default:
				d.fail(name)
			}
		}
		out = append(out, slot)
	}
	slices.SortFunc(out, func(a, b job.RateSlot) int { return a.Start.Compare(b.Start) })
	return out
}

func (d *decoder) times(name string) map[string]time.Time {
	return decodeMap(d, name, func(sub *decoder, k string) time.Time { return sub.time(k, true) })
}

// decodeMap reads a map attribute whose entries decode alike; a bad entry
// fails the decoder.
func decodeMap[T any](d *decoder, name string, entry func(sub *decoder, k string) T) map[string]T {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok || len(v.Value) == 0 {
		return nil
	}
	sub := decoder{m: v.Value}
	out := make(map[string]T, len(v.Value))
	for k := range v.Value {
		out[k] = entry(&sub, k)
	}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return out
}

func decodeHealth(item map[string]types.AttributeValue) (job.Health, error) {
	d := decoder{m: item}
	h := job.Health{
		Provider:         d.str(AttrProvider, true),
		State:            job.ProviderState(d.str(hState, true)),
		Since:            d.time(hSince, false),
		Reason:           d.str(hReason, false),
		WindowStart:      d.time(hWindowStart, false),
		OpenUntil:        d.time(hOpenUntil, false),
		Answered:         int(d.num(hAnswered, false)),
		PreviousFailures: int(d.num(hPrevFail, false)),
		PreviousAnswered: int(d.num(hPrevAnswer, false)),
		Cooldown:         time.Duration(d.num(hCooldownMS, false)) * time.Millisecond,
		Trips:            int(d.num(hTrips, false)),
		Probes:           d.times(hProbes),
		Passed:           int(d.num(hPassed, false)),
		Held:             d.times(hHeld),
		Opened:           int(d.num(hOpened, false)),
		Owners:           d.tallies(hOwners),
		Backoff:          d.times(hBackoff),
		Running:          d.times(hRunning),
		HeldBy:           d.strings(hHeldBy),
		Waiters:          d.times(hWaiters),
		RateWaiters:      d.times(hRateWaiters),
		Overdue:          d.times(hOverdue),
		Rate:             d.rate(hRate),
		PausedUntil:      d.time(hPausedUntil, false),
		UpdatedAt:        d.time(aUpdatedAt, true),
		Revision:         d.num(aRevision, true),
	}
	if m, ok := item[hFailures].(*types.AttributeValueMemberM); ok && len(m.Value) > 0 {
		h.Failures = map[job.HealthEventKind]int{}
		for k, v := range m.Value {
			n, ok := v.(*types.AttributeValueMemberN)
			x, err := strconv.Atoi(valueOf(n, ok))
			if !ok || err != nil {
				d.fail(hFailures)
				continue
			}
			h.Failures[job.HealthEventKind(k)] = x
		}
	}
	if m, ok := item[hForced].(*types.AttributeValueMemberM); ok {
		sub := decoder{m: m.Value}
		h.Forced = &job.Forced{State: job.ProviderState(sub.str(hState, true)), By: sub.str(aBy, false),
			Reason: sub.str(aReason, false), At: sub.time(aAt, true)}
		if sub.err != nil && d.err == nil {
			d.err = sub.err
		}
	}
	return h, d.err
}

func valueOf(n *types.AttributeValueMemberN, ok bool) string {
	if !ok {
		return ""
	}
	return n.Value
}
