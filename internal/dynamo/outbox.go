package dynamo

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// A job's outbox in its item (job.Notice, job.Recorded), and its by_notify
// partition.

// NotifyShards spreads jobs with pending notices over partitions of
// by_notify.
const NotifyShards = 4

// NotifyShard is a job's by_notify partition.
func NotifyShard(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return "notify#" + strconv.Itoa(int(h.Sum32()%NotifyShards))
}

func encodeOutbox(ns []job.Notice) types.AttributeValue {
	l := make([]types.AttributeValue, len(ns))
	for i, n := range ns {
		m := map[string]types.AttributeValue{AttrID: avS(n.ID), aType: avS(string(n.Type)), aAt: avT(n.At)}
		if n.Attempt != 0 {
			m[aAttempt] = avN(int64(n.Attempt))
		}
		if r := n.Recorded; r != nil {
			open := make([]string, len(r.Open))
			for i, o := range r.Open {
				open[i] = strconv.Itoa(o.Number) + ":" + string(o.State) + ":" + string(o.Class)
			}
			m[aRecorded] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{aStatus: avS(string(r.Status)),
				aVersion: avN(r.Version), aAttemptCount: avN(int64(r.Attempts)), aOpen: avS(strings.Join(open, ","))}}
		}
		l[i] = &types.AttributeValueMemberM{Value: m}
	}
	return &types.AttributeValueMemberL{Value: l}
}

func (d *decoder) outbox(name string) []job.Notice {
	l, ok := d.m[name].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	var out []job.Notice
	for _, v := range l.Value {
		m, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			d.fail(name)
			continue
		}
		sub := decoder{m: m.Value}
		out = append(out, job.Notice{ID: sub.str(AttrID, true), Type: job.EventType(sub.str(aType, true)), At: sub.time(aAt, true),
			Attempt: int(sub.num(aAttempt, false)), Recorded: sub.recorded(aRecorded)})
		if sub.err != nil && d.err == nil {
			d.err = sub.err
		}
	}
	return out
}

// recorded decodes a notice's record of its job; nil when it has none (a
// notice written before notices kept one).
func (d *decoder) recorded(name string) *job.Recorded {
	m, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: m.Value}
	r := &job.Recorded{Status: job.Status(sub.str(aStatus, true)), Version: sub.num(aVersion, true),
		Attempts: int(sub.num(aAttemptCount, true))}
	if open := sub.str(aOpen, false); open != "" {
		for _, o := range strings.Split(open, ",") {
			parts := strings.SplitN(o, ":", 3)
			n, err := strconv.Atoi(parts[0])
			if len(parts) != 3 || err != nil {
				sub.fail(aOpen)
				break
			}
			r.Open = append(r.Open, job.AttemptMark{Number: n, State: job.AttemptState(parts[1]), Class: job.Class(parts[2])})
		}
	}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return r
}
