package dynamo

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onejob/onejob/internal/job"
)

// decoder reads attributes, remembering the first problem.
type decoder struct {
	m   map[string]types.AttributeValue
	err error
}

func (d *decoder) fail(name string) {
	if d.err == nil {
		d.err = fmt.Errorf("store: bad or missing attribute %q", name)
	}
}

func (d *decoder) str(name string, required bool) string {
	v, ok := d.m[name].(*types.AttributeValueMemberS)
	if !ok {
		if required {
			d.fail(name)
		}
		return ""
	}
	return v.Value
}

func (d *decoder) num(name string, required bool) int64 {
	v, ok := d.m[name].(*types.AttributeValueMemberN)
	if !ok {
		if required {
			d.fail(name)
		}
		return 0
	}
	x, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		d.fail(name)
	}
	return x
}

// millis reads a time kept as Unix milliseconds (zero when absent).
func (d *decoder) millis(name string) time.Time {
	if _, ok := d.m[name]; !ok {
		return time.Time{}
	}
	return time.UnixMilli(d.num(name, true)).UTC()
}

func (d *decoder) time(name string, required bool) time.Time {
	v := d.str(name, required)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(timeLayout, v)
	if err != nil {
		d.fail(name)
	}
	return t
}

func (d *decoder) failure(name string) *job.Failure {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	f := &job.Failure{Class: job.Class(sub.str(aClass, false)), Message: sub.str(aMessage, false),
		ProviderStatus: int(sub.num(aProvStatus, false))}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return f
}

func (d *decoder) usage(name string) *job.Usage {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	u := &job.Usage{Model: sub.str(aModel, false), InputTokens: int(sub.num(aInTokens, false)),
		OutputTokens: int(sub.num(aOutTokens, false)), Latency: time.Duration(sub.num(aLatencyMS, false)) * time.Millisecond}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return u
}

func (d *decoder) cancellation(name string) *job.Cancellation {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	c := &job.Cancellation{By: sub.str(aBy, false), Reason: sub.str(aReason, false), At: sub.time(aAt, true)}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return c
}

func (d *decoder) waiting(name string) *job.Waiting {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	w := &job.Waiting{Reason: job.WaitReason(sub.str(aReason, true)), Since: sub.time(aSince, true), Until: sub.time(aUntil, true),
		Detail: sub.str(aDetail, false)}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return w
}

func (d *decoder) resolved(name string) *job.Resolved {
	v, ok := d.m[name].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	sub := decoder{m: v.Value}
	r := &job.Resolved{Outcome: job.AttemptState(sub.str(aOutcome, true)), By: sub.str(aBy, false),
		Reason: sub.str(aReason, false), At: sub.time(aAt, true)}
	if sub.err != nil && d.err == nil {
		d.err = sub.err
	}
	return r
}
