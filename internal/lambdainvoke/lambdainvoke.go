// Package lambdainvoke is the AWS Lambda adapter of lifecycle.Handoff: it
// hands a job whose write just recorded events to the notify function with
// one asynchronous invoke (InvocationType Event), so the event's first
// tries start within about a second instead of on the notifier's next
// scheduled pass. The payload is only the job's ID (lifecycle.HandoffEvent):
// the notify function reads everything else from the job's outbox, so a
// hand-off repeated, reordered or lost changes nothing but how soon.
package lambdainvoke

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Timeout bounds one hand-off: the write it follows is already made, so a
// slow Lambda API only delays the caller, never the event (the schedule
// finds it).
const Timeout = 2 * time.Second

// Invoker hands jobs to one function.
type Invoker struct {
	client   *lambda.Client
	function string
}

var _ lifecycle.Handoff = (*Invoker)(nil)

// New hands off to function (a name or ARN) through client.
func New(client *lambda.Client, function string) (*Invoker, error) {
	if client == nil || function == "" {
		return nil, errors.New("lambdainvoke: a client and a function are needed")
	}
	return &Invoker{client: client, function: function}, nil
}

// Handoff invokes the function asynchronously with the job's ID.
func (i *Invoker) Handoff(ctx context.Context, jobID string) error {
	payload, err := json.Marshal(lifecycle.HandoffEvent{JobID: jobID})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	_, err = i.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(i.function),
		InvocationType: types.InvocationTypeEvent, Payload: payload})
	return err
}

// FromEnv is a function main's hand-off: to function (deploy.Env's
// NotifyFunction) through a client of cfg, whose endpoint
// AWS_ENDPOINT_URL_LAMBDA may set; nil when function is empty (the
// notifier's schedule alone).
func FromEnv(cfg aws.Config, function string, getenv func(string) string) (lifecycle.Handoff, error) {
	if function == "" {
		return nil, nil
	}
	return New(lambda.NewFromConfig(cfg, func(o *lambda.Options) {
		o.BaseEndpoint = deploy.ServiceEndpoint(getenv, "LAMBDA", o.BaseEndpoint)
	}), function)
}
