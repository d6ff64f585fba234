// Command stream serves jobs' streams (GET /v1/jobs/{id}/stream) on the
// stream function's URL: a Lambda function URL in RESPONSE_STREAM mode,
// through aws-lambda-go's lambdaurl, which hands Lambda the response as
// the handler writes it. API Gateway's HTTP API cannot stream a response
// (infra/stack's newStreamURL says why not a REST API either). No
// authorizer stands in front of a function URL (auth type NONE: browsers
// cannot sign requests with IAM credentials), so the handler verifies the
// bearer token itself, as the HTTP API's JWT authorizer does
// (internal/jwtverify, the issuer's keys over HTTPS). One invocation
// serves one connection for at most deploy.StreamTimeout; the client
// resumes with Last-Event-ID.
package main

import (
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambdaurl"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/jwtverify"
	"github.com/onejob/onejob/internal/lifecycle"
)

func main() {
	env := deploy.LoadEnv(os.Getenv, dynamo.Logicals())
	log := deploy.Logger(env.Name)
	deploy.Check(log, env.Validate(deploy.NeedIssuer))
	cfg, err := deploy.LambdaAWSConfig(os.Getenv)
	deploy.Check(log, err)

	store, err := dynamo.New(dynamo.Config{
		Client: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = deploy.ServiceEndpoint(os.Getenv, "DYNAMODB", o.BaseEndpoint)
		}),
		Tables: dynamo.NamesFrom(env.Table), Logger: log,
	})
	deploy.Check(log, err)
	// Only the owners' held requests: an open stream is one of them.
	engine, err := lifecycle.NewEngine(lifecycle.EngineConfig{Store: store, Logger: log, Owners: store,
		Quotas: env.Quotas(), Budget: env.Budget()})
	deploy.Check(log, err)
	reader, err := lifecycle.NewStreamReader(lifecycle.StreamReaderConfig{Store: store, Streams: store, Logger: log})
	deploy.Check(log, err)
	// The same issuer, audiences and algorithms as the HTTP API's JWT
	// authorizer (no route of it asks for scopes). Nothing is fetched
	// until the first token.
	verifier, err := jwtverify.New(jwtverify.Config{Issuer: env.JWTIssuer, Audience: env.JWTAudience, Logger: log})
	deploy.Check(log, err)

	// The final event carries the job as GET /v1/jobs/{id} shows it, with
	// its stream_url: this function's own URL, which its environment
	// cannot hold (deploy.OwnURL).
	build := func(base string) (http.Handler, error) {
		return apigw.NewStream(apigw.StreamConfig{Streams: reader, Holds: engine, Verifier: verifier,
			Admin: apigw.AdminRule{Claim: env.AdminClaim, Value: env.AdminValue}, StreamBase: base, Logger: log})
	}
	_, err = build("https://stream.lambda-url.invalid") // the configuration, checked at init
	deploy.Check(log, err)
	lambdaurl.Start(deploy.EndBeforeDeadline(deploy.OwnURL(build), deploy.StreamEndBefore))
}
