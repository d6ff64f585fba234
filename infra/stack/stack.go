package stack

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsstepfunctions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
)

// StackName is the CloudFormation stack name for env.
func StackName(env string) string { return "onejob-" + env }

// physical names every resource per environment so the three environments
// can share an account.
func physical(env, name string) *string { return jsii.String("onejob-" + env + "-" + name) }

// New adds the onejob stack for cfg to scope (normally the CDK App).
func New(scope constructs.Construct, cfg Config) (awscdk.Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("onejob %s config: %w", cfg.Env, err)
	}
	definition, err := loadDefinition(cfg.DefinitionPath)
	if err != nil {
		return nil, err
	}
	retention, err := retentionDays(cfg.LogRetentionDays)
	if err != nil {
		return nil, err
	}

	var env *awscdk.Environment
	if cfg.Account != "" || cfg.Region != "" {
		env = &awscdk.Environment{}
		if cfg.Account != "" {
			env.Account = jsii.String(cfg.Account)
		}
		if cfg.Region != "" {
			env.Region = jsii.String(cfg.Region)
		}
	}
	stack := awscdk.NewStack(scope, jsii.String(StackName(cfg.Env)), &awscdk.StackProps{
		Env:         env,
		Description: jsii.String("onejob " + cfg.Env + ": HTTP API, Step Functions job driver, DynamoDB ledger"),
	})
	awscdk.Tags_Of(stack).Add(jsii.String("project"), jsii.String("onejob"), nil)
	awscdk.Tags_Of(stack).Add(jsii.String("env"), jsii.String(cfg.Env), nil)

	removal := awscdk.RemovalPolicy_DESTROY
	if cfg.RetainData {
		removal = awscdk.RemovalPolicy_RETAIN
	}

	// Tables come from the one schema the local bootstrap also uses.
	tables := map[string]awsdynamodb.TableV2{}
	for _, def := range dynamo.Tables() {
		tables[def.Logical] = newTable(stack, cfg, def, removal)
	}
	jobs := tables[dynamo.JobsTable().Logical]
	attempts := tables[dynamo.AttemptsTable().Logical]
	certs := tables[dynamo.CertificationsTable().Logical]
	if jobs == nil || attempts == nil || certs == nil {
		return nil, fmt.Errorf("dynamo.Tables() lacks one of jobs/attempts/certifications")
	}

	// The provider configuration. Only the run function may read it.
	secretArn := cfg.ProvidersSecretArn
	if secretArn == "" {
		secret := awssecretsmanager.NewSecret(stack, jsii.String("ProvidersSecret"), &awssecretsmanager.SecretProps{
			// No physical name: a deleted secret lingers for its recovery
			// window and would block re-creating a dev stack.
			Description: jsii.String("onejob " + cfg.Env + " provider configuration (JSON), read by the run function"),
			// A valid empty configuration, set once at creation. CloudFormation
			// only writes it again if this literal changes, so the value an
			// operator puts afterwards survives deploys.
			SecretStringValue: awscdk.SecretValue_UnsafePlainText(jsii.String("{}")),
			RemovalPolicy:     removal,
		})
		suppress(secret, "AwsSolutions-SMG4", "The secret holds third-party providers' API keys, which only their consoles can rotate; "+
			"an operator replaces them by hand, so no rotation Lambda could do it.")
		secretArn = *secret.SecretArn()
	}

	// The variable names are the ones internal/app reads, so the two
	// cannot drift.
	common := map[string]*string{deploy.EnvName: jsii.String(cfg.Env),
		deploy.EnvQuotaUnfinishedJobs:   jsii.String(strconv.Itoa(cfg.Quotas.UnfinishedJobs)),
		deploy.EnvQuotaHeldRequests:     jsii.String(strconv.Itoa(cfg.Quotas.HeldRequests)),
		deploy.EnvQuotaCreatesPerMinute: jsii.String(strconv.Itoa(cfg.Quotas.Creates.PerMinute)),
		deploy.EnvQuotaCreateBurst:      jsii.String(strconv.Itoa(cfg.Quotas.Creates.Burst)),
	}
	if cfg.Budget != nil {
		b, err := json.Marshal(cfg.Budget)
		if err != nil {
			panic(err) // plain strings and maps always marshal
		}
		common[deploy.EnvBudget] = jsii.String(string(b))
	}
	for logical, t := range tables {
		common[deploy.TableEnv(logical)] = t.TableName()
	}
	fns := map[string]awslambda.Function{}
	for _, spec := range deploy.Functions() {
		vars := map[string]*string{}
		for k, v := range common {
			vars[k] = v
		}
		if spec.Name == deploy.FnRun || spec.Name == deploy.FnEvents {
			vars[deploy.EnvProvidersSecretARN] = jsii.String(secretArn)
		}
		if cfg.TraceSampleRatio != nil && slices.Contains(permissions.Traced(), spec.Name) {
			vars[deploy.EnvTraceRatio] = jsii.String(strconv.FormatFloat(*cfg.TraceSampleRatio, 'f', -1, 64))
		}
		if spec.Name == deploy.FnStream {
			// It verifies the tokens the HTTP API's JWT authorizer
			// verifies (newHTTPAPI), with the same issuer and audiences.
			vars[deploy.EnvJWTIssuer] = jsii.String(cfg.JWTIssuer)
			vars[deploy.EnvJWTAudience] = jsii.String(strings.Join(cfg.JWTAudience, ","))
		}
		fns[spec.Name] = newFunction(stack, cfg, spec, vars, retention, removal)
	}

	// The state machine invokes the five task functions and nothing else;
	// in particular not the API function, whose environment holds the
	// state machine ARN (that reference would be a cycle).
	subs := map[string]*string{}
	var taskArns []*string
	for placeholder, name := range deploy.Tasks() {
		subs[placeholder] = fns[name].FunctionArn()
	}
	for _, name := range deploy.TaskNames() {
		taskArns = append(taskArns, fns[name].FunctionArn())
	}
	smLogs := awslogs.NewLogGroup(stack, jsii.String("StateMachineLogs"), &awslogs.LogGroupProps{
		// The vendedlogs prefix keeps Step Functions from growing the
		// account's CloudWatch Logs resource policy per log group.
		LogGroupName:  jsii.String("/aws/vendedlogs/states/onejob-" + cfg.Env),
		Retention:     retention,
		RemovalPolicy: removal,
	})
	// Every event is logged everywhere (cdk-nag's SF1); their data (the
	// job's input, a prompt, and the provider's result) only where
	// FullExecutionLogs allows it.
	logLevel, withData := awsstepfunctions.LogLevel_ALL, cfg.FullExecutionLogs
	sm := awsstepfunctions.NewStateMachine(stack, jsii.String("StateMachine"), &awsstepfunctions.StateMachineProps{
		StateMachineName: jsii.String("onejob-" + cfg.Env),
		StateMachineType: awsstepfunctions.StateMachineType_STANDARD,
		// FromString, not FromFile: FromFile uploads the file as an S3
		// asset (DefinitionS3Location), which hides the definition from the
		// template, its tests and local tools.
		DefinitionBody:          awsstepfunctions.DefinitionBody_FromString(jsii.String(definition)),
		DefinitionSubstitutions: &subs,
		TracingEnabled:          jsii.Bool(true),
		Logs: &awsstepfunctions.LogOptions{
			Destination:          smLogs,
			Level:                logLevel,
			IncludeExecutionData: jsii.Bool(withData),
		},
		// The state machine holds no data of its own (removal policy is for
		// tables, secret and logs); a retained one would outlive its tasks.
	})
	// Substituted ARNs are opaque to CDK, so it grants nothing by itself.
	sm.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("lambda:InvokeFunction"),
		Resources: &taskArns,
	}))
	suppressStar(sm.Role(), "Step Functions delivers logs (logs:CreateLogDelivery and the other log-delivery APIs) and "+
		"traces (xray:PutTraceSegments, PutTelemetryRecords, GetSampling*) through APIs that take no resource ARN; "+
		"CDK adds exactly these for logging and tracing.")

	// The webhook signing secrets are sealed with this key (review M4):
	// the api function may only generate data keys with it, the notify
	// function only decrypt, through the grants below (the key policy
	// leaves access to IAM). Yearly rotation keeps every older key
	// version, so what was sealed before still opens.
	secretsKey := awskms.NewKey(stack, jsii.String("WebhookSecretsKey"), &awskms.KeyProps{
		Description:       jsii.String("onejob " + cfg.Env + " webhook signing secrets (envelope encryption)"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     removal,
	})
	for _, fn := range []string{deploy.FnAPI, deploy.FnNotify} {
		fns[fn].AddEnvironment(jsii.String(deploy.EnvSecretsKey), secretsKey.KeyArn(), nil)
	}

	// Each function's role gets exactly its entry in infra/permissions,
	// the list the local invoke test checks the real binaries against.
	arnOf := func(r permissions.Resource) (*string, error) {
		switch r.Kind {
		case permissions.KindTable:
			t, ok := tables[r.Name]
			if !ok {
				return nil, fmt.Errorf("grant on unknown table %q", r.Name)
			}
			if r.Index != "" {
				return indexArn(t, r.Index), nil
			}
			return t.TableArn(), nil
		case permissions.KindStateMachine:
			return sm.StateMachineArn(), nil
		case permissions.KindProvidersSecret:
			return jsii.String(secretArn), nil
		case permissions.KindSecretsKey:
			return secretsKey.KeyArn(), nil
		case permissions.KindFunction:
			f, ok := fns[r.Name]
			if !ok {
				return nil, fmt.Errorf("grant on unknown function %q", r.Name)
			}
			return f.FunctionArn(), nil
		case permissions.KindTraces:
			return jsii.String("*"), nil
		}
		return nil, fmt.Errorf("grant on unknown resource kind %q", r.Kind)
	}
	all := permissions.All()
	if got, want := slices.Sorted(maps.Keys(all)), slices.Sorted(slices.Values(deploy.Names())); !slices.Equal(got, want) {
		return nil, fmt.Errorf("infra/permissions covers functions %v, the stack deploys %v", got, want)
	}
	for _, name := range deploy.Names() {
		for _, g := range grantsOf(cfg, all, name) {
			arn, err := arnOf(g.Resource)
			if err != nil {
				return nil, fmt.Errorf("function %s: %w", name, err)
			}
			allow(fns[name], g, arn)
		}
	}
	// Traces go to X-Ray's OTLP endpoint (internal/tracing), which needs
	// CloudWatch Transaction Search on in the account and region. The
	// stack does not own that setting (AWS::XRay::TransactionSearchConfig
	// and the aws/spans resource policy it needs): it is one per account
	// and region, shared by every stack there (dev and staging may share
	// an account, and so may other applications), CloudFormation refuses
	// to create it where it is already on, and deleting a stack that
	// owned it would turn span ingestion off for all of them. An operator
	// turns it on once (docs/tracing.md).

	api := fns[deploy.FnAPI]
	api.AddEnvironment(jsii.String(deploy.EnvStateMachineARN), sm.StateMachineArn(), nil)
	// Both decide who is an operator from the same verified claims.
	for _, fn := range []string{deploy.FnAPI, deploy.FnStream} {
		fns[fn].AddEnvironment(jsii.String(deploy.EnvAdminClaim), jsii.String(cfg.Admin.Claim), nil)
		fns[fn].AddEnvironment(jsii.String(deploy.EnvAdminValue), jsii.String(cfg.Admin.Value), nil)
	}
	// Jobs' streams are served at the stream function's own URL; the api
	// puts each job's address under it in the job's view (stream_url).
	// The URL refers to the stream function only, which refers to
	// nothing of the api's: no cycle.
	streamURL, err := newStreamURL(cfg, fns[deploy.FnStream])
	if err != nil {
		return nil, err
	}
	api.AddEnvironment(jsii.String(deploy.EnvStreamURL), streamURL.Url(), nil)
	sweeper := fns[deploy.FnSweeper]
	sweeper.AddEnvironment(jsii.String(deploy.EnvStateMachineARN), sm.StateMachineArn(), nil)
	// The api hands it a job whose start failed past its tries.
	api.AddEnvironment(jsii.String(deploy.EnvSweepFunction), sweeper.FunctionArn(), nil)
	awsevents.NewRule(stack, jsii.String("SweeperSchedule"), &awsevents.RuleProps{
		RuleName:    physical(cfg.Env, "sweeper"),
		Description: jsii.String(fmt.Sprintf("Runs the onejob sweeper every %s", deploy.SweepEvery)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(deploy.SweepEvery.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(sweeper, &awseventstargets.LambdaFunctionProps{
			// A late sweep is worthless once the next one is due (60 s is
			// the shortest age EventBridge accepts).
			MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(60)),
			RetryAttempts: jsii.Number(1),
		})},
	})

	// The functions that record jobs' events hand them to the notifier
	// at once; it also drains whatever is due once a minute.
	notify := fns[deploy.FnNotify]
	for _, fn := range []string{deploy.FnAPI, deploy.FnRun, deploy.FnHold, deploy.FnEvents} {
		fns[fn].AddEnvironment(jsii.String(deploy.EnvNotifyFunction), notify.FunctionArn(), nil)
	}
	awsevents.NewRule(stack, jsii.String("NotifySchedule"), &awsevents.RuleProps{
		RuleName:    physical(cfg.Env, "notify"),
		Description: jsii.String(fmt.Sprintf("Runs the onejob notifier every %s", deploy.NotifyEvery)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(deploy.NotifyEvery.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(notify, &awseventstargets.LambdaFunctionProps{
			MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(60)),
			RetryAttempts: jsii.Number(1),
		})},
	})

	// The events function also passes over the work parked jobs left at
	// their providers (polls, cancels, deadlines), waking the jobs that
	// then need a run (issue 40).
	events := fns[deploy.FnEvents]
	events.AddEnvironment(jsii.String(deploy.EnvStateMachineARN), sm.StateMachineArn(), nil)
	awsevents.NewRule(stack, jsii.String("PollSchedule"), &awsevents.RuleProps{
		RuleName:    physical(cfg.Env, "poll"),
		Description: jsii.String(fmt.Sprintf("Runs the onejob pass over work at providers every %s", deploy.PollEvery)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(deploy.PollEvery.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(events, &awseventstargets.LambdaFunctionProps{
			MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(60)),
			RetryAttempts: jsii.Number(1),
		})},
	})

	httpAPI := newHTTPAPI(stack, cfg, api, events, retention, removal)
	topic := newAlarms(stack, cfg, httpAPI, sm, sweeper)

	out := func(id string, value *string, desc string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: value, Description: jsii.String(desc)})
	}
	out("ApiUrl", httpAPI.ApiEndpoint(), "HTTP API endpoint")
	out("StreamUrl", streamURL.Url(), "Jobs' streams (GET /v1/jobs/{id}/stream), the stream function's URL")
	out("StateMachineArn", sm.StateMachineArn(), "Job driver state machine")
	out("JobsTableName", jobs.TableName(), "Jobs table")
	out("AttemptsTableName", attempts.TableName(), "Attempts table")
	out("CertificationsTableName", certs.TableName(), "Certifications table")
	out("AlarmTopicArn", topic.TopicArn(), "Alarm notifications")
	out("ProvidersSecretArn", jsii.String(secretArn), "Provider configuration secret")
	return stack, nil
}

func newTable(stack awscdk.Stack, cfg Config, def dynamo.TableDef, removal awscdk.RemovalPolicy) awsdynamodb.TableV2 {
	var gsis []*awsdynamodb.GlobalSecondaryIndexPropsV2
	for _, idx := range def.Indexes {
		gsi := &awsdynamodb.GlobalSecondaryIndexPropsV2{
			IndexName:      jsii.String(idx.Name),
			PartitionKey:   attribute(&idx.PartitionKey),
			SortKey:        attribute(idx.SortKey),
			ProjectionType: awsdynamodb.ProjectionType(idx.Projection),
		}
		// CDK refuses even an empty list unless the projection is INCLUDE.
		if len(idx.Include) > 0 {
			gsi.NonKeyAttributes = jsii.Strings(idx.Include...)
		}
		gsis = append(gsis, gsi)
	}
	props := &awsdynamodb.TablePropsV2{
		TableName:    physical(cfg.Env, def.Logical),
		PartitionKey: attribute(&def.PartitionKey),
		SortKey:      attribute(def.SortKey),
		Billing:      awsdynamodb.Billing_OnDemand(nil),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(cfg.RetainData),
		RemovalPolicy:      removal,
	}
	if def.TTL != "" {
		props.TimeToLiveAttribute = jsii.String(def.TTL)
	}
	if len(gsis) > 0 {
		props.GlobalSecondaryIndexes = &gsis
	}
	return awsdynamodb.NewTableV2(stack, jsii.String(title(def.Logical)+"Table"), props)
}

func attribute(k *dynamo.KeyAttr) *awsdynamodb.Attribute {
	if k == nil {
		return nil
	}
	t := awsdynamodb.AttributeType_STRING
	if k.Type == dynamo.AttrNumber {
		t = awsdynamodb.AttributeType_NUMBER
	}
	return &awsdynamodb.Attribute{Name: jsii.String(k.Name), Type: t}
}

func newFunction(stack awscdk.Stack, cfg Config, spec deploy.Function, vars map[string]*string, retention awslogs.RetentionDays, removal awscdk.RemovalPolicy) awslambda.Function {
	id := strings.TrimSuffix(spec.LogicalID, "Function")
	// An explicit log group gets the environment's retention without the
	// LogRetention custom resource (another Lambda with logs:* on "*").
	logs := awslogs.NewLogGroup(stack, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/lambda/onejob-" + cfg.Env + "-" + spec.Name),
		Retention:     retention,
		RemovalPolicy: removal,
	})
	// An explicit role instead of the AWS managed AWSLambdaBasicExecutionRole
	// (logs on every log group in the account): writing to its own log
	// group is all a function logs to.
	role := awsiam.NewRole(stack, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("onejob " + cfg.Env + " " + spec.Name + " function"),
	})
	role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: jsii.Strings(*logs.LogGroupArn()),
	}))
	suppressStar(role, "X-Ray's PutTraceSegments and PutTelemetryRecords take no resource ARN; CDK grants exactly these "+
		"for active tracing. Nor do PutSpans and PutSpansForIndexing, which a traced function's export of its spans to "+
		"X-Ray's OTLP endpoint needs (infra/permissions.Spans).")
	props := &awslambda.FunctionProps{
		FunctionName: physical(cfg.Env, spec.Name),
		Role:         role,
		Description:  jsii.String("onejob " + cfg.Env + ": " + spec.Description),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(filepath.Join(cfg.FunctionsDir, spec.Name)), nil),
		MemorySize:   jsii.Number(spec.MemoryMB),
		Timeout:      awscdk.Duration_Seconds(jsii.Number(spec.Timeout.Seconds())),
		Environment:  &vars,
		LogGroup:     logs,
		Tracing:      awslambda.Tracing_ACTIVE,
	}
	if spec.Name == deploy.FnSweeper || spec.Name == deploy.FnNotify || spec.Name == deploy.FnEvents {
		// The schedule invokes asynchronously; the next tick is the retry
		// (API Gateway's invokes of the events function are synchronous:
		// the setting is not theirs).
		props.RetryAttempts = jsii.Number(0)
	}
	if n, ok := cfg.ReservedConcurrency[spec.Name]; ok {
		props.ReservedConcurrentExecutions = jsii.Number(n)
	}
	fn := awslambda.NewFunction(stack, jsii.String(id), props)
	fn.Node().DefaultChild().(awscdk.CfnResource).OverrideLogicalId(jsii.String(spec.LogicalID))
	return fn
}

// allow adds one least-privilege statement to fn's role: g's actions on
// resource, narrowed to g's item attributes when it names them (review
// L5; IAM's ForAllValues condition on dynamodb:Attributes, which a call
// naming any other attribute fails).
func allow(fn awslambda.Function, g permissions.Grant, resource *string) {
	props := &awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(g.Actions...),
		Resources: &[]*string{resource},
	}
	if g.Attributes != nil {
		props.Conditions = &map[string]any{
			"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": g.Attributes},
		}
	}
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(props))
}

// grantsOf is fn's grants in cfg's environment: its entry in
// infra/permissions, and the grant to export spans when the environment
// traces and fn is one of the traced functions.
func grantsOf(cfg Config, all map[string][]permissions.Grant, fn string) []permissions.Grant {
	gs := slices.Clone(all[fn])
	if cfg.TraceSampleRatio != nil && slices.Contains(permissions.Traced(), fn) {
		gs = append(gs, permissions.Spans())
	}
	return gs
}

func indexArn(t awsdynamodb.TableV2, index string) *string {
	return jsii.String(*t.TableArn() + "/index/" + index)
}

// accessLogFormat is one JSON line per request in the HTTP API's access
// log: who asked for what and how it went, in the gateway's and the
// integration's words. Quoted values may be "-" when absent (an answer
// the gateway gave itself has no integration latency).
const accessLogFormat = `{"request_id":"$context.requestId","time_epoch_ms":$context.requestTimeEpoch,` +
	`"route_key":"$context.routeKey","method":"$context.httpMethod","status":$context.status,` +
	`"latency_ms":$context.responseLatency,"integration_latency_ms":"$context.integrationLatency",` +
	`"integration_status":"$context.integrationStatus","integration_error":"$context.integrationErrorMessage",` +
	`"error":"$context.error.message","authorizer_error":"$context.authorizer.error","response_length":"$context.responseLength"}`

func newHTTPAPI(stack awscdk.Stack, cfg Config, api, events awslambda.Function, retention awslogs.RetentionDays, removal awscdk.RemovalPolicy) awsapigatewayv2.HttpApi {
	auth := awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(cfg.JWTIssuer),
		&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
			AuthorizerName: physical(cfg.Env, "jwt"),
			JwtAudience:    jsii.Strings(cfg.JWTAudience...),
		})
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"), api,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
		})
	// Asynchronous providers' webhooks go to the events function, which
	// alone beside run reads the providers' configuration.
	eventsIntegration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("EventsIntegration"), events,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
		})
	httpAPI := awsapigatewayv2.NewHttpApi(stack, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		ApiName:     jsii.String("onejob-" + cfg.Env),
		Description: jsii.String("onejob " + cfg.Env + " API"),
		// Also covers any route added later without naming an authorizer.
		DefaultAuthorizer: auth,
		CorsPreflight:     corsPreflight(cfg),
	})
	var eventsRoutes []awsapigatewayv2.HttpRoute
	for _, r := range apigw.Routes() {
		if r.Function == apigw.FnStream {
			continue // served at the stream function's own URL (newStreamURL)
		}
		var authorizer awsapigatewayv2.IHttpRouteAuthorizer = auth
		if r.Public {
			// The console's files (they hold no data, and a browser
			// opening the page sends no token) and providers' webhooks
			// (their signature authenticates them).
			authorizer = awsapigatewayv2.NewHttpNoneAuthorizer()
		}
		var target awsapigatewayv2.HttpRouteIntegration = integration
		if r.Function == apigw.FnEvents {
			target = eventsIntegration
		}
		added := httpAPI.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: target,
			Authorizer:  authorizer,
		})
		if r.Function == apigw.FnEvents {
			eventsRoutes = append(eventsRoutes, *added...)
		}
		if r.Public {
			reason := "The operator console's page and files (" + r.Key() + ") hold no data and a browser " +
				"opening them sends no token; everything the page shows it reads from routes behind the JWT authorizer."
			if strings.HasPrefix(r.Path, "/v1/provider-events/") {
				reason = "Asynchronous providers' webhooks (" + r.Key() + ") carry no token: each delivery is verified " +
					"with its provider's signature before anything is read, and it only names work that is then read from the provider."
			}
			for _, route := range *added {
				suppress(route, "AwsSolutions-APIG4", reason)
			}
		}
	}

	// The default stage: its access log and its throttling, set on the L1
	// stage (the L2 stage takes them only when it is created by hand).
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String("/aws/vendedlogs/apigateway/onejob-" + cfg.Env),
		Retention:     retention,
		RemovalPolicy: removal,
	})
	stage := httpAPI.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:  jsii.Number(cfg.Throttle.Rate),
		ThrottlingBurstLimit: jsii.Number(cfg.Throttle.Burst),
	})
	// The providers' webhooks, the one route without a token, get a bucket
	// of their own (review N-L2): a flood of it is refused by the gateway
	// and leaves the other routes' buckets alone. A stage's route settings
	// name routes that must exist first.
	eventsSettings := map[string]any{}
	for _, r := range eventsRoutes {
		route := r.Node().DefaultChild().(awsapigatewayv2.CfnRoute)
		// RouteSettings is untyped JSON to the L1: CloudFormation's names.
		eventsSettings[*route.RouteKey()] = map[string]any{
			"ThrottlingRateLimit":  cfg.EventsThrottle.Rate,
			"ThrottlingBurstLimit": cfg.EventsThrottle.Burst,
		}
		stage.AddDependency(route)
	}
	stage.SetRouteSettings(eventsSettings)
	events.AddEnvironment(jsii.String(deploy.EnvEventsThrottleRate), jsii.String(strconv.FormatFloat(cfg.EventsThrottle.Rate, 'f', -1, 64)), nil)
	events.AddEnvironment(jsii.String(deploy.EnvEventsThrottleBurst), jsii.String(strconv.Itoa(cfg.EventsThrottle.Burst)), nil)
	return httpAPI
}

// newStreamURL serves the stream function on a Lambda function URL in
// RESPONSE_STREAM mode: aws-lambda-go's lambdaurl hands the response to
// Lambda as the handler writes it, so each event reaches the client as it
// is read from the log.
//
// Why not API Gateway: an HTTP API (the API's) cannot stream a response;
// it buffers the integration's answer (at most 30 s, 10 MB). A REST API
// can now (an integration's responseTransferMode STREAM, up to 15 minutes,
// 5 minutes idle on a regional endpoint), but it would be a second API
// Gateway in front of one route: another stage with its own throttling,
// access log and domain, $3.50 per million requests against the HTTP
// API's $1.00 plus its streaming charges, and a token check of its own
// anyway (a REST API's JWT authorizer is newer than this CDK, whose
// AWS::ApiGateway::Authorizer knows TOKEN, REQUEST and
// COGNITO_USER_POOLS only; a Lambda authorizer is another function on
// every connection). A function URL costs nothing beyond the function,
// and one held stream costs its GB-seconds while it is open: at 128 MB
// on arm64, 0.125 GB-s a second, $0.0000017 a second, $0.0001 a minute
// (a 30-s answer watched is $50 per million streams, plus $0.20 per
// million invocations).
//
// Auth NONE: the function verifies the bearer token itself, exactly as
// the HTTP API's JWT authorizer does (internal/jwtverify). AWS_IAM would
// need every request SigV4-signed with AWS credentials, which a browser
// or a mobile app calling with its user's token has not (and should not
// have). CORS is the API's (apigw.CORS*, for the stream's method only);
// Lambda answers preflights itself, before the function.
func newStreamURL(cfg Config, fn awslambda.Function) (awslambda.FunctionUrl, error) {
	var methods []awslambda.HttpMethod
	for _, r := range apigw.Routes() {
		if r.Function == apigw.FnStream && !slices.Contains(methods, awslambda.HttpMethod(r.Method)) {
			methods = append(methods, awslambda.HttpMethod(r.Method))
		}
	}
	if len(methods) == 0 {
		return nil, fmt.Errorf("apigw.Routes() names no route served by the %s function", deploy.FnStream)
	}
	opts := &awslambda.FunctionUrlOptions{
		AuthType:   awslambda.FunctionUrlAuthType_NONE,
		InvokeMode: awslambda.InvokeMode_RESPONSE_STREAM,
	}
	if len(cfg.CORSOrigins) > 0 {
		opts.Cors = &awslambda.FunctionUrlCorsOptions{
			AllowedOrigins: jsii.Strings(cfg.CORSOrigins...),
			AllowedMethods: &methods,
			AllowedHeaders: jsii.Strings(apigw.CORSAllowHeaders()...),
			ExposedHeaders: jsii.Strings(apigw.CORSExposeHeaders()...),
			MaxAge:         awscdk.Duration_Seconds(jsii.Number(apigw.CORSMaxAge.Seconds())),
			// Bearer tokens, never cookies: no credentials mode.
			AllowCredentials: jsii.Bool(false),
		}
	}
	return fn.AddFunctionUrl(opts), nil
}

// corsPreflight lets the environment's browser origins call the API: API
// Gateway then answers preflights itself, before the JWT authorizer, and
// adds the CORS headers to every response. The headers are the ones the
// local server uses (apigw.CORS*), so pages behave alike here and there.
func corsPreflight(cfg Config) *awsapigatewayv2.CorsPreflightOptions {
	if len(cfg.CORSOrigins) == 0 {
		return nil
	}
	var methods []awsapigatewayv2.CorsHttpMethod
	for _, m := range apigw.CORSAllowMethods() {
		methods = append(methods, awsapigatewayv2.CorsHttpMethod(m))
	}
	return &awsapigatewayv2.CorsPreflightOptions{
		AllowOrigins:  jsii.Strings(cfg.CORSOrigins...),
		AllowMethods:  &methods,
		AllowHeaders:  jsii.Strings(apigw.CORSAllowHeaders()...),
		ExposeHeaders: jsii.Strings(apigw.CORSExposeHeaders()...),
		MaxAge:        awscdk.Duration_Seconds(jsii.Number(apigw.CORSMaxAge.Seconds())),
		// Bearer tokens, never cookies: no credentials mode.
		AllowCredentials: jsii.Bool(false),
	}
}

func newAlarms(stack awscdk.Stack, cfg Config, httpAPI awsapigatewayv2.HttpApi, sm awsstepfunctions.StateMachine, sweeper awslambda.Function) awssns.Topic {
	topic := awssns.NewTopic(stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		TopicName: physical(cfg.Env, "alarms"),
		// A policy denying publishes and subscriptions that are not over
		// TLS (aws:SecureTransport).
		EnforceSSL: jsii.Bool(true),
	})
	if cfg.AlarmEmail != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
	}
	action := awscloudwatchactions.NewSnsAction(topic)
	five := awscdk.Duration_Minutes(jsii.Number(5))

	metric := func(name, statistic string, period awscdk.Duration) awscloudwatch.Metric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(emf.Namespace),
			MetricName:    jsii.String(name),
			DimensionsMap: &map[string]*string{emf.Dimension: jsii.String(cfg.Env)},
			Statistic:     jsii.String(statistic),
			Period:        period,
		})
	}
	wire := func(a awscloudwatch.Alarm) {
		a.AddAlarmAction(action)
		a.AddOkAction(action)
	}

	// The sweeper reports the age of the oldest unknown attempt. An
	// unknown attempt blocks its job, so one that stays unknown needs a
	// person (resolve). No data means the sweeper saw none.
	wire(metric(emf.AttemptsUnknownOldestSeconds, "Maximum", five).CreateAlarm(stack, jsii.String("UnknownAttemptsAlarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          physical(cfg.Env, "attempt-unknown-too-long"),
		AlarmDescription:   jsii.String(fmt.Sprintf("An attempt has been unknown for more than %.0f minutes; resolve it via POST /v1/jobs/{id}/attempts/{n}/resolve.", cfg.UnknownAttemptAlarm.Minutes())),
		Threshold:          jsii.Number(cfg.UnknownAttemptAlarm.Seconds()),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}))

	// A breaker that opens sends a provider's work elsewhere (or makes jobs
	// wait): an operator looks at why (GET /v1/admin/providers).
	wire(metric(emf.ProvidersOpened, "Sum", five).CreateAlarm(stack, jsii.String("ProviderOpenedAlarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          physical(cfg.Env, "provider-opened"),
		AlarmDescription:   jsii.String("A provider's circuit breaker opened: new attempts skip it. See GET /v1/admin/providers (onejob providers)."),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}))

	// An endpoint disabled (410, or failing every try for days) gets no
	// more events: its owner's app stops hearing of its jobs until the
	// owner registers it again. An operator tells them.
	wire(metric(emf.EndpointsDisabled, "Sum", five).CreateAlarm(stack, jsii.String("EndpointDisabledAlarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          physical(cfg.Env, "webhook-endpoint-disabled"),
		AlarmDescription:   jsii.String("A webhook endpoint was disabled (it answered 410, or failed every try for 5 days): its owner gets no more events. The notify function's endpoint_disabled log line names the owner, the endpoint and why."),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}))

	// Hedging loses some races by design; a high share means providers
	// are slow enough that most work is done twice.
	window := awscdk.Duration_Minutes(jsii.Number(cfg.LostRaceWindow.Minutes()))
	lostRate := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String("IF(started > 0, lost / started, 0)"),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			"lost":    metric(emf.RaceLost, "Sum", window),
			"started": metric(emf.AttemptsStarted, "Sum", window),
		},
		Label:  jsii.String("RaceLost / AttemptsStarted"),
		Period: window,
	})
	wire(lostRate.CreateAlarm(stack, jsii.String("LostRaceRateAlarm"), &awscloudwatch.CreateAlarmOptions{
		AlarmName:          physical(cfg.Env, "lost-race-rate"),
		AlarmDescription:   jsii.String(fmt.Sprintf("More than %.0f%% of attempts lost the race over %.0f minutes.", cfg.LostRaceRateAlarm*100, cfg.LostRaceWindow.Minutes())),
		Threshold:          jsii.Number(cfg.LostRaceRateAlarm),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}))

	// HTTP APIs publish server errors as "5xx" (REST APIs use 5XXError).
	wire(httpAPI.MetricServerError(&awscloudwatch.MetricOptions{Period: five, Statistic: jsii.String("Sum")}).
		CreateAlarm(stack, jsii.String("Api5xxAlarm"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          physical(cfg.Env, "api-5xx"),
			AlarmDescription:   jsii.String(fmt.Sprintf("The HTTP API returned at least %.0f 5xx responses in 5 minutes.", cfg.API5xxAlarm)),
			Threshold:          jsii.Number(cfg.API5xxAlarm),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))

	// Executions end in Succeed unless something the definition does not
	// expect happened (UnexpectedStep, exhausted retries).
	wire(sm.MetricFailed(&awscloudwatch.MetricOptions{Period: five, Statistic: jsii.String("Sum")}).
		CreateAlarm(stack, jsii.String("ExecutionsFailedAlarm"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          physical(cfg.Env, "executions-failed"),
			AlarmDescription:   jsii.String("A job execution failed."),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))

	// The unknown-attempt alarm reads silence as health, so a sweeper
	// that keeps failing must alarm on its own.
	wire(sweeper.MetricErrors(&awscloudwatch.MetricOptions{Period: five, Statistic: jsii.String("Sum")}).
		CreateAlarm(stack, jsii.String("SweeperErrorsAlarm"), &awscloudwatch.CreateAlarmOptions{
			AlarmName:          physical(cfg.Env, "sweeper-errors"),
			AlarmDescription:   jsii.String("The sweeper failed in three consecutive 5-minute periods."),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(3),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		}))
	return topic
}

// loadDefinition reads the ASL and checks that its placeholders are
// exactly the five task-function substitutions, so a new placeholder
// cannot silently reach CloudFormation unsubstituted.
func loadDefinition(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("state machine definition: %w", err)
	}
	want := deploy.Tasks()
	found := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([^}]*)\}`).FindAllStringSubmatch(string(b), -1) {
		if _, ok := want[m[1]]; !ok {
			return "", fmt.Errorf("state machine definition %s: unknown placeholder ${%s}", path, m[1])
		}
		found[m[1]] = true
	}
	var missing []string
	for p := range want {
		if !found[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("state machine definition %s: never uses %s", path, strings.Join(missing, ", "))
	}
	return string(b), nil
}

func retentionDays(days int) (awslogs.RetentionDays, error) {
	known := map[int]awslogs.RetentionDays{
		1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
		7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
		60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS,
		365: awslogs.RetentionDays_ONE_YEAR,
	}
	r, ok := known[days]
	if !ok {
		keys := make([]int, 0, len(known))
		for k := range known {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return "", fmt.Errorf("log retention %d days is not one CloudWatch offers here (%v)", days, keys)
	}
	return r, nil
}

// title turns "jobs" into "Jobs" for construct IDs.
func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// suppress accepts one cdk-nag finding on construct and its children, with
// the reason it does not apply (shown in cdk-nag's report).
func suppress(construct constructs.IConstruct, rule, reason string) {
	cdknag.NagSuppressions_AddResourceSuppressions(construct, &[]*cdknag.NagPackSuppression{
		{Id: jsii.String(rule), Reason: jsii.String(reason)},
	}, jsii.Bool(true))
}

// suppressStar accepts AwsSolutions-IAM5 for the "*" resource only, on
// role and its default policy: any other wildcard is still reported.
func suppressStar(role awsiam.IRole, reason string) {
	cdknag.NagSuppressions_AddResourceSuppressions(role, &[]*cdknag.NagPackSuppression{
		{Id: jsii.String("AwsSolutions-IAM5"), Reason: jsii.String(reason), AppliesTo: &[]any{"Resource::*"}},
	}, jsii.Bool(true))
}
