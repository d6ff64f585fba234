package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
	"github.com/onejob/onejob/internal/dynamo"
	"github.com/onejob/onejob/internal/emf"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/verify/iamcheck"
)

// stagingSecretArn exercises the "bring your own secret" path: staging is
// synthesized with it, dev and prod create their own.
const stagingSecretArn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:onejob/staging/providers-AbC123"

// synthesized is one environment's stack after a real synthesis.
type synthesized struct {
	env      string
	cfg      Config
	template map[string]any // the CloudFormation template
	names    map[string]string
	path     string // the template, written out
	outdir   string // the cloud assembly: staged assets beside the stack's template
	// nag is cdk-nag's AwsSolutions report of this synthesis.
	nag []nagLine
}

// nagLine is one line of cdk-nag's JSON report.
type nagLine struct {
	RuleID          string `json:"ruleId"`
	ResourceID      string `json:"resourceId"`
	Compliance      string `json:"compliance"`
	ExceptionReason string `json:"exceptionReason"`
	RuleLevel       string `json:"ruleLevel"`
	RuleInfo        string `json:"ruleInfo"`
}

// TestStack synthesizes each environment once (jsii is one node process;
// its calls stay on this goroutine) and then checks the templates in
// parallel subtests that only read Go maps.
func TestStack(t *testing.T) {
	root := testenv.MustRoot(t)
	fnDir := stubFunctions(t)
	var all []*synthesized
	for _, env := range []string{"dev", "staging", "prod"} {
		s := synth(t, root, fnDir, env)
		all = append(all, s)
		t.Run(env, func(t *testing.T) {
			t.Parallel()
			t.Run("tables", func(t *testing.T) { t.Parallel(); checkTables(t, s) })
			t.Run("functions", func(t *testing.T) { t.Parallel(); checkFunctions(t, s) })
			t.Run("state machine", func(t *testing.T) { t.Parallel(); checkStateMachine(t, s) })
			t.Run("definition references only task functions", func(t *testing.T) { t.Parallel(); checkDefinition(t, s) })
			t.Run("http api", func(t *testing.T) { t.Parallel(); checkHTTPAPI(t, s) })
			t.Run("sweeper schedule", func(t *testing.T) { t.Parallel(); checkSchedule(t, s) })
			t.Run("alarms", func(t *testing.T) { t.Parallel(); checkAlarms(t, s) })
			t.Run("iam allow-list", func(t *testing.T) { t.Parallel(); checkIAM(t, s) })
			t.Run("lambda resource policies", func(t *testing.T) { t.Parallel(); checkPermissions(t, s) })
			t.Run("retention", func(t *testing.T) { t.Parallel(); checkRetention(t, s) })
			t.Run("no dependency cycle", func(t *testing.T) { t.Parallel(); checkAcyclic(t, s) })
			t.Run("cors", func(t *testing.T) { t.Parallel(); checkCORS(t, s) })
			t.Run("stream url", func(t *testing.T) { t.Parallel(); checkStreamURL(t, s) })
			t.Run("cdk-nag", func(t *testing.T) { t.Parallel(); checkNag(t, s) })
			t.Run("guards", func(t *testing.T) { t.Parallel(); checkGuards(t, s) })
			t.Run("tracing", func(t *testing.T) { t.Parallel(); checkTracing(t, s) })
		})
	}
	// One cfn-lint for the three templates: its start (loading the resource
	// specifications) is most of its time.
	t.Run("cfn-lint", func(t *testing.T) { t.Parallel(); checkCfnLint(t, all) })
}

// synth builds the stack for env the way the CLI would (cdk.json's
// context, asset metadata on) and runs the assertions-library checks,
// which call into jsii and so must not run in parallel.
func synth(t *testing.T, root, fnDir, env string) *synthesized {
	t.Helper()
	ctx := cdkContext(t, root)
	ctx[ContextEnv] = env
	ctx[ContextFunctionsDir] = fnDir
	ctx[ContextDefinition] = filepath.Join(root, "statemachine", "onejob.asl.json")
	// The CLI always sets this; SAM needs the aws:asset:path it enables.
	ctx["aws:cdk:enable-asset-metadata"] = true
	if env == "staging" {
		ctx[ContextSecretArn] = stagingSecretArn
	}
	outdir := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(outdir)})
	// cdk-nag's AwsSolutions pack runs in this one synthesis and writes its
	// report to outdir; checkNag reads it.
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true), Reports: jsii.Bool(true), ReportFormats: &[]cdknag.NagReportFormat{cdknag.NagReportFormat_JSON},
	}), nil)
	cfg, err := LoadConfig(func(k string) any { return app.Node().TryGetContext(jsii.String(k)) },
		func(string) string { return "" })
	if err != nil {
		t.Fatalf("%s: LoadConfig: %v", env, err)
	}
	st, err := New(app, cfg)
	if err != nil {
		t.Fatalf("%s: New: %v", env, err)
	}
	var tmpl assertions.Template
	func() {
		// Synthesis errors (including CDK's own validation, which catches
		// dependency cycles) arrive as jsii panics.
		// An unsuppressed cdk-nag error fails CDK's validation (this
		// project's feature flags) after the report is written: list its
		// findings rather than the validation's wall of text.
		defer func() {
			if r := recover(); r != nil {
				if lines, err := readNag(outdir); err == nil && len(nagFindings(lines)) > 0 {
					t.Fatalf("%s: synth failed on cdk-nag findings:\n%s", env, strings.Join(nagFindings(lines), "\n"))
				}
				t.Fatalf("%s: synth: %v", env, r)
			}
		}()
		tmpl = assertions.Template_FromStack(st, nil)
	}()

	expect := func(what string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s: %s: %v", env, what, r)
			}
		}()
		f()
	}
	expect("one on-demand table per dynamo.Tables entry", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::GlobalTable"), jsii.Number(float64(len(dynamo.Tables()))))
	})
	expect("tables PAY_PER_REQUEST", func() {
		tmpl.AllResourcesProperties(jsii.String("AWS::DynamoDB::GlobalTable"), map[string]any{"BillingMode": "PAY_PER_REQUEST"})
	})
	expect("one Lambda function per deploy.Functions entry", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(float64(len(deploy.Functions()))))
	})
	expect("functions on provided.al2023/arm64", func() {
		tmpl.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
			"Runtime": "provided.al2023", "Architectures": []any{"arm64"}, "Handler": "bootstrap",
		})
	})
	expect("standard traced state machine", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::StepFunctions::StateMachine"), map[string]any{
			"StateMachineType": "STANDARD", "TracingConfiguration": map[string]any{"Enabled": true},
		})
	})
	expect("JWT authorizer", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), map[string]any{
			"AuthorizerType":   "JWT",
			"JwtConfiguration": map[string]any{"Issuer": cfg.JWTIssuer, "Audience": toAny(cfg.JWTAudience)},
		})
	})
	for _, key := range []string{"GET /console", "GET /console/{file}"} {
		expect("the console's route "+key+" without an authorizer", func() {
			tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), map[string]any{
				"RouteKey": key, "AuthorizationType": "NONE", "AuthorizerId": assertions.Match_Absent(),
			})
		})
	}
	expect("CORS preflight for the environment's origins", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), map[string]any{
			"CorsConfiguration": map[string]any{
				"AllowOrigins":     toAny(cfg.CORSOrigins),
				"AllowHeaders":     toAny(apigw.CORSAllowHeaders()),
				"ExposeHeaders":    toAny(apigw.CORSExposeHeaders()),
				"AllowMethods":     []any{"DELETE", "GET", "POST"},
				"MaxAge":           3600,
				"AllowCredentials": false,
			},
		})
	})
	expect("the stream function's URL streams, without IAM auth", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Url"), map[string]any{
			"InvokeMode": "RESPONSE_STREAM", "AuthType": "NONE",
			"TargetFunctionArn": map[string]any{"Fn::GetAtt": []any{"StreamFunction", "Arn"}},
			"Cors": map[string]any{
				"AllowOrigins":     toAny(cfg.CORSOrigins),
				"AllowHeaders":     toAny(apigw.CORSAllowHeaders()),
				"ExposeHeaders":    toAny(apigw.CORSExposeHeaders()),
				"AllowMethods":     []any{"GET"},
				"MaxAge":           3600,
				"AllowCredentials": false,
			},
		})
	})
	expect("sweeper schedule", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), map[string]any{"ScheduleExpression": "rate(1 minute)"})
	})
	policy := "Delete"
	if env == "prod" {
		policy = "Retain"
	}
	expect("table deletion policy", func() {
		tmpl.AllResources(jsii.String("AWS::DynamoDB::GlobalTable"), map[string]any{"DeletionPolicy": policy, "UpdateReplacePolicy": policy})
	})

	tj := tmpl.ToJSON()
	if tj == nil {
		t.Fatalf("%s: empty template", env)
	}
	// Round-trip so the checks see plain encoding/json types.
	b, err := json.Marshal(*tj)
	if err != nil {
		t.Fatal(err)
	}
	var template map[string]any
	if err := json.Unmarshal(b, &template); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), StackName(env)+".template.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	nag, err := readNag(outdir)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	// `make test` checks every AWS call the suites recorded against these
	// (internal/verify/iamcheck), without synthesizing them again.
	if dir := os.Getenv(iamcheck.EnvTemplatesDir); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, StackName(env)+".template.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &synthesized{env: env, cfg: cfg, template: template, names: friendlyNames(template), path: path, outdir: outdir, nag: nag}
}

// readNag reads cdk-nag's JSON report(s) in outdir.
func readNag(outdir string) ([]nagLine, error) {
	files, err := filepath.Glob(filepath.Join(outdir, "AwsSolutions-*NagReport.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no cdk-nag report in %s (%v)", outdir, err)
	}
	var lines []nagLine
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var report struct {
			Lines []nagLine `json:"lines"`
		}
		if err := json.Unmarshal(b, &report); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		lines = append(lines, report.Lines...)
	}
	return lines, nil
}

// nagFindings lists the report's unsuppressed findings, errors and
// warnings alike.
func nagFindings(lines []nagLine) []string {
	var out []string
	for _, l := range lines {
		if l.Compliance == "Non-Compliant" || l.Compliance == "UNKNOWN" {
			out = append(out, fmt.Sprintf("  %s %s %s: %s", l.RuleLevel, l.RuleID, l.ResourceID, l.RuleInfo))
		}
	}
	sort.Strings(out)
	return out
}

// --- checks (pure Go over the template) -----------------------------------

func checkTables(t *testing.T, s *synthesized) {
	want := map[string]dynamo.TableDef{}
	for _, d := range dynamo.Tables() {
		want["onejob-"+s.env+"-"+d.Logical] = d
	}
	got := resources(s, "AWS::DynamoDB::GlobalTable")
	if len(got) != len(want) {
		t.Fatalf("%d tables, want %d", len(got), len(want))
	}
	for id, r := range got {
		p := props(r)
		name, _ := p["TableName"].(string)
		def, ok := want[name]
		if !ok {
			t.Errorf("%s: unexpected table name %q", id, name)
			continue
		}
		if p["BillingMode"] != "PAY_PER_REQUEST" {
			t.Errorf("%s: BillingMode %v", name, p["BillingMode"])
		}
		keys := map[string]string{}
		for _, k := range list(p["KeySchema"]) {
			keys[str(k, "KeyType")] = str(k, "AttributeName")
		}
		wantKeys := map[string]string{"HASH": def.PartitionKey.Name}
		if def.SortKey != nil {
			wantKeys["RANGE"] = def.SortKey.Name
		}
		if !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("%s: keys %v, want %v", name, keys, wantKeys)
		}
		var gsis []string
		for _, g := range list(p["GlobalSecondaryIndexes"]) {
			gsis = append(gsis, str(g, "IndexName"))
		}
		var wantGSIs []string
		for _, idx := range def.Indexes {
			wantGSIs = append(wantGSIs, idx.Name)
		}
		if !slices.Equal(gsis, wantGSIs) {
			t.Errorf("%s: indexes %v, want %v", name, gsis, wantGSIs)
		}
		// DynamoDB expires what the store already reads as gone (the
		// inbound deliveries once their signatures are stale, review N-L1).
		ttl, _ := p["TimeToLiveSpecification"].(map[string]any)
		if def.TTL != "" && (ttl["AttributeName"] != def.TTL || ttl["Enabled"] != true) || def.TTL == "" && ttl != nil {
			t.Errorf("%s: TTL %v, want on %q", name, ttl, def.TTL)
		}
		replicas := list(p["Replicas"])
		if len(replicas) != 1 {
			t.Fatalf("%s: %d replicas, want 1", name, len(replicas))
		}
		rep := replicas[0].(map[string]any)
		if pitr, _ := rep["PointInTimeRecoverySpecification"].(map[string]any); pitr["PointInTimeRecoveryEnabled"] != true {
			t.Errorf("%s: PITR off: %v", name, rep["PointInTimeRecoverySpecification"])
		}
		if got, want := rep["DeletionProtectionEnabled"], s.env == "prod"; got != want {
			t.Errorf("%s: DeletionProtectionEnabled %v, want %v", name, got, want)
		}
	}
}

func checkFunctions(t *testing.T, s *synthesized) {
	fns := resources(s, "AWS::Lambda::Function")
	seen := map[string]bool{}
	for id, r := range fns {
		p := props(r)
		fname, _ := p["FunctionName"].(string)
		short := strings.TrimPrefix(fname, "onejob-"+s.env+"-")
		seen[short] = true
		if p["Runtime"] != "provided.al2023" || !reflect.DeepEqual(p["Architectures"], []any{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v arch %v handler %v", fname, p["Runtime"], p["Architectures"], p["Handler"])
		}
		if tc, _ := p["TracingConfig"].(map[string]any); tc["Mode"] != "Active" {
			t.Errorf("%s: tracing %v", fname, p["TracingConfig"])
		}
		// What `sam local invoke -t cdk.out/<stack>.template.json <LogicalID>`
		// reads: the function's code is the folder aws:asset:path names,
		// relative to the template, for its Code property; there the
		// synthesis staged this function's own bootstrap.
		md, _ := r["Metadata"].(map[string]any)
		if path, _ := md["aws:asset:path"].(string); path == "" || filepath.IsAbs(path) || md["aws:asset:property"] != "Code" {
			t.Errorf("%s (%s): no relative aws:asset:path for its Code, as SAM needs: %v", fname, id, md)
		} else if b, err := os.ReadFile(filepath.Join(s.outdir, path, "bootstrap")); err != nil || !strings.Contains(string(b), "# "+short+"\n") {
			t.Errorf("%s (%s): aws:asset:path %s does not hold its bootstrap: %v %q", fname, id, path, err, b)
		}
		if lc, _ := p["LoggingConfig"].(map[string]any); lc["LogGroup"] == nil {
			t.Errorf("%s: no explicit log group", fname)
		}

		vars := map[string]string{}
		env, _ := p["Environment"].(map[string]any)
		for k, v := range asMap(env["Variables"]) {
			vars[k] = s.sym(v)
		}
		want := map[string]string{deploy.EnvName: s.env,
			deploy.EnvQuotaUnfinishedJobs:   strconv.Itoa(s.cfg.Quotas.UnfinishedJobs),
			deploy.EnvQuotaHeldRequests:     strconv.Itoa(s.cfg.Quotas.HeldRequests),
			deploy.EnvQuotaCreatesPerMinute: strconv.Itoa(s.cfg.Quotas.Creates.PerMinute),
			deploy.EnvQuotaCreateBurst:      strconv.Itoa(s.cfg.Quotas.Creates.Burst)}
		if s.cfg.Budget != nil {
			b, err := json.Marshal(s.cfg.Budget)
			if err != nil {
				t.Fatal(err)
			}
			want[deploy.EnvBudget] = string(b)
		}
		for _, logical := range dynamo.Logicals() {
			want[deploy.TableEnv(logical)] = "ref:table:" + logical
		}
		switch short {
		case "api", "sweeper", deploy.FnEvents:
			want[deploy.EnvStateMachineARN] = "ref:statemachine"
			if short == deploy.FnAPI {
				want[deploy.EnvAdminClaim], want[deploy.EnvAdminValue] = s.cfg.Admin.Claim, s.cfg.Admin.Value
				// Where the job views say each job's stream is read.
				want[deploy.EnvStreamURL] = "getatt:url:" + deploy.FnStream + ".FunctionUrl"
				// A start throttled past its tries is handed to the sweeper.
				want[deploy.EnvSweepFunction] = "arn:fn:" + deploy.FnSweeper
			}
		case deploy.FnStream:
			// The tokens the HTTP API's authorizer verifies, and the
			// API's reading of who is an operator.
			want[deploy.EnvJWTIssuer] = s.cfg.JWTIssuer
			want[deploy.EnvJWTAudience] = strings.Join(s.cfg.JWTAudience, ",")
			want[deploy.EnvAdminClaim], want[deploy.EnvAdminValue] = s.cfg.Admin.Claim, s.cfg.Admin.Value
		}
		if short == deploy.FnRun || short == deploy.FnEvents {
			want[deploy.EnvProvidersSecretARN] = s.secret()
		}
		// The events function announces its route's own throttle.
		if short == deploy.FnEvents {
			want[deploy.EnvEventsThrottleRate] = strconv.FormatFloat(s.cfg.EventsThrottle.Rate, 'f', -1, 64)
			want[deploy.EnvEventsThrottleBurst] = strconv.Itoa(s.cfg.EventsThrottle.Burst)
		}
		// The functions that record jobs' events hand them to the notifier.
		if short == deploy.FnAPI || short == deploy.FnRun || short == deploy.FnHold || short == deploy.FnEvents {
			want[deploy.EnvNotifyFunction] = "arn:fn:" + deploy.FnNotify
		}
		// The api seals the webhook secrets with this key, notify opens them.
		if short == deploy.FnAPI || short == deploy.FnNotify {
			want[deploy.EnvSecretsKey] = "arn:secretskey"
		}
		// The traced functions, in an environment that traces, sample
		// at its ratio (issue 42).
		if r := s.cfg.TraceSampleRatio; r != nil && slices.Contains(permissions.Traced(), short) {
			want[deploy.EnvTraceRatio] = strconv.FormatFloat(*r, 'f', -1, 64)
		}
		if !reflect.DeepEqual(vars, want) {
			t.Errorf("%s: environment\n got %v\nwant %v", fname, vars, want)
		}
	}
	for _, n := range deploy.Names() {
		if !seen[n] {
			t.Errorf("function onejob-%s-%s missing", s.env, n)
		}
	}
}

func checkStateMachine(t *testing.T, s *synthesized) {
	sms := resources(s, "AWS::StepFunctions::StateMachine")
	if len(sms) != 1 {
		t.Fatalf("%d state machines", len(sms))
	}
	for _, r := range sms {
		p := props(r)
		if p["StateMachineType"] != "STANDARD" {
			t.Errorf("type %v", p["StateMachineType"])
		}
		if tc, _ := p["TracingConfiguration"].(map[string]any); tc["Enabled"] != true {
			t.Errorf("tracing %v", p["TracingConfiguration"])
		}
		lc, _ := p["LoggingConfiguration"].(map[string]any)
		// Every event everywhere; prod keeps the data (prompts, results)
		// out of its logs.
		wantLevel, wantData := "ALL", s.env != "prod"
		if lc["Level"] != wantLevel || lc["IncludeExecutionData"] != wantData {
			t.Errorf("logging level %v data %v, want %v %v", lc["Level"], lc["IncludeExecutionData"], wantLevel, wantData)
		}
		if len(list(lc["Destinations"])) != 1 {
			t.Errorf("log destinations %v", lc["Destinations"])
		}
		if _, ok := p["DefinitionS3Location"]; ok {
			t.Errorf("definition uploaded to S3; it should be inline")
		}
	}
}

// checkDefinition resolves the definition (literal, Fn::Join or Fn::Sub,
// plus DefinitionSubstitutions) to ASL whose references are symbolic, and
// requires every Task resource, and every reference anywhere in it, to be
// one of this stack's five task functions.
func checkDefinition(t *testing.T, s *synthesized) {
	allowed := map[string]bool{}
	for _, name := range deploy.Tasks() {
		allowed["arn:fn:"+name] = true
	}
	for _, r := range resources(s, "AWS::StepFunctions::StateMachine") {
		p := props(r)
		subs := asMap(p["DefinitionSubstitutions"])
		def, refs := s.flatten(t, p["DefinitionString"])
		def = regexp.MustCompile(`\$\{([^}]+)\}`).ReplaceAllStringFunc(def, func(m string) string {
			key := m[2 : len(m)-1]
			v, ok := subs[key]
			if !ok {
				t.Errorf("placeholder %s has no substitution", m)
				return m
			}
			ref := s.sym(v)
			refs = append(refs, ref)
			return ref
		})
		for _, ref := range refs {
			if !allowed[ref] {
				t.Errorf("definition references %s, not one of the task functions", ref)
			}
		}
		var asl map[string]any
		if err := json.Unmarshal([]byte(def), &asl); err != nil {
			t.Fatalf("resolved definition is not JSON: %v", err)
		}
		used := map[string]bool{}
		walkStates(asl, func(name string, st map[string]any) {
			if st["Type"] != "Task" {
				return
			}
			res, _ := st["Resource"].(string)
			if !allowed[res] {
				t.Errorf("task %s invokes %q", name, res)
			}
			used[res] = true
		})
		if !reflect.DeepEqual(used, allowed) {
			t.Errorf("tasks invoke %v, want exactly %v", keys(used), keys(allowed))
		}
	}
}

func checkHTTPAPI(t *testing.T, s *synthesized) {
	apis := resources(s, "AWS::ApiGatewayV2::Api")
	if len(apis) != 1 {
		t.Fatalf("%d APIs", len(apis))
	}
	for _, r := range apis {
		if props(r)["ProtocolType"] != "HTTP" {
			t.Errorf("protocol %v", props(r)["ProtocolType"])
		}
	}
	auths := resources(s, "AWS::ApiGatewayV2::Authorizer")
	if len(auths) != 1 {
		t.Fatalf("%d authorizers", len(auths))
	}
	var authID string
	for id, r := range auths {
		authID = id
		p := props(r)
		jc := asMap(p["JwtConfiguration"])
		if p["AuthorizerType"] != "JWT" || jc["Issuer"] != s.cfg.JWTIssuer || !reflect.DeepEqual(jc["Audience"], toAny(s.cfg.JWTAudience)) {
			t.Errorf("authorizer %v", p)
		}
	}
	integrations := resources(s, "AWS::ApiGatewayV2::Integration")
	for _, r := range integrations {
		p := props(r)
		if fn := s.sym(p["IntegrationUri"]); p["IntegrationType"] != "AWS_PROXY" || p["PayloadFormatVersion"] != "2.0" ||
			(fn != "arn:fn:api" && fn != "arn:fn:"+deploy.FnEvents) {
			t.Errorf("integration %v", p)
		}
	}
	// Only the console's files and providers' signed webhooks are public;
	// every other route, and any route added later, is behind the JWT
	// authorizer.
	public := map[string]bool{}
	for _, r := range apigw.Routes() {
		if r.Public {
			public[r.Key()] = true
		}
	}
	if want := map[string]bool{"GET /console": true, "GET /console/{file}": true, "POST /v1/provider-events/{provider}": true}; !maps.Equal(public, want) {
		t.Errorf("public routes %v, want %v", public, want)
	}
	var routes, publicDeployed []string
	for id, r := range resources(s, "AWS::ApiGatewayV2::Route") {
		p := props(r)
		key := p["RouteKey"].(string)
		routes = append(routes, key)
		switch {
		case public[key]:
			publicDeployed = append(publicDeployed, key)
			if p["AuthorizationType"] != "NONE" || p["AuthorizerId"] != nil {
				t.Errorf("public route %s (%s) has an authorizer: %v %v", key, id, p["AuthorizationType"], p["AuthorizerId"])
			}
		case p["AuthorizationType"] != "JWT" || s.sym(p["AuthorizerId"]) != "ref:"+authID:
			t.Errorf("route %s (%s) not behind the JWT authorizer: %v %v", key, id, p["AuthorizationType"], p["AuthorizerId"])
		}
		target := s.sym(p["Target"])
		found := false
		for iid := range integrations {
			found = found || target == "integrations/ref:"+iid
		}
		if !found {
			t.Errorf("route %s targets %s", p["RouteKey"], target)
		}
	}
	// Every route but the stream's, which the stream function's own URL
	// serves (checkStreamURL): an HTTP API cannot stream a response.
	var want []string
	for _, r := range apigw.Routes() {
		if r.Function != apigw.FnStream {
			want = append(want, r.Method+" "+r.Path)
		}
	}
	sort.Strings(routes)
	sort.Strings(want)
	if !slices.Equal(routes, want) {
		t.Errorf("routes %v, want %v", routes, want)
	}
	if len(publicDeployed) != len(public) {
		t.Errorf("public routes deployed %v, want %v", publicDeployed, public)
	}
}

// checkCORS: browsers may call the API from the environment's origins
// only, with the headers the client contract needs; prod and staging name
// https origins, dev names loopback ones, nobody allows "*".
func checkCORS(t *testing.T, s *synthesized) {
	var cors map[string]any
	for _, r := range resources(s, "AWS::ApiGatewayV2::Api") {
		cors = asMap(props(r)["CorsConfiguration"])
	}
	if cors == nil {
		t.Fatal("no CorsConfiguration on the HTTP API")
	}
	origins := strList(cors["AllowOrigins"])
	if len(origins) == 0 || !slices.Equal(origins, s.cfg.CORSOrigins) {
		t.Errorf("AllowOrigins %v, config %v", origins, s.cfg.CORSOrigins)
	}
	for _, o := range origins {
		loopback := strings.HasPrefix(o, "http://localhost:") || strings.HasPrefix(o, "http://127.0.0.1:")
		switch {
		case strings.Contains(o, "*"):
			t.Errorf("%s allows %q", s.env, o)
		case s.env == "dev" && !loopback:
			t.Errorf("dev allows %q, not a loopback origin", o)
		case s.env != "dev" && !strings.HasPrefix(o, "https://"):
			t.Errorf("%s allows %q, not https", s.env, o)
		}
	}
	for key, want := range map[string][]string{"AllowHeaders": {"Authorization", "Content-Type", "Idempotency-Key", "If-None-Match", "Last-Event-ID", "Prefer"},
		"ExposeHeaders": {"Location", "Idempotent-Replayed", "ETag", "Retry-After", "Preference-Applied"},
		// DELETE: a webhook endpoint.
		"AllowMethods": {"DELETE", "GET", "POST"}} {
		if got := strList(cors[key]); !slices.Equal(got, want) {
			t.Errorf("%s %v, want %v", key, got, want)
		}
	}
	if cors["MaxAge"] != float64(3600) || cors["AllowCredentials"] != false {
		t.Errorf("MaxAge %v AllowCredentials %v", cors["MaxAge"], cors["AllowCredentials"])
	}
	// No OPTIONS route: API Gateway answers preflights itself, before the
	// authorizer (a route would put OPTIONS behind the JWT check).
	for _, r := range resources(s, "AWS::ApiGatewayV2::Route") {
		if strings.HasPrefix(str(props(r), "RouteKey"), "OPTIONS ") {
			t.Errorf("route %s would take preflights", str(props(r), "RouteKey"))
		}
	}
}

// checkCfnLint runs cfn-lint (preinstalled on onejob's machines, offline)
// on the synthesized templates: errors fail, warnings are logged (CDK's
// redundant DependsOn gives W3005). Each line it prints names its template.
func checkCfnLint(t *testing.T, all []*synthesized) {
	bin, err := testenv.PythonTool(testenv.MustRoot(t), "cfn-lint")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--format", "parseable", "--"}
	for _, s := range all {
		args = append(args, s.path)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("cfn-lint: %v", err)
	}
	// Exit codes are a bit mask: 2 errors, 4 warnings, 8 informational;
	// anything else is cfn-lint failing.
	if code&^(4|8) != 0 {
		t.Fatalf("cfn-lint exit %d:\n%s", code, out)
	}
	t.Logf("cfn-lint on %d templates: no errors, %d warning or info lines", len(all), strings.Count(string(out), "\n"))
}

func checkSchedule(t *testing.T, s *synthesized) {
	rules := resources(s, "AWS::Events::Rule")
	if len(rules) != 3 {
		t.Fatalf("%d rules, want the sweeper's, the notifier's and the pass's (events)", len(rules))
	}
	scheduled := map[string]bool{}
	for _, r := range rules {
		p := props(r)
		targets := list(p["Targets"])
		if p["ScheduleExpression"] != "rate(1 minute)" || p["State"] != "ENABLED" || len(targets) != 1 {
			t.Errorf("schedule %v", p)
			continue
		}
		scheduled[s.sym(asMap(targets[0])["Arn"])] = true
	}
	if !scheduled["arn:fn:sweeper"] || !scheduled["arn:fn:"+deploy.FnNotify] || !scheduled["arn:fn:"+deploy.FnEvents] {
		t.Errorf("scheduled %v, want the sweeper, the notifier and the events function", scheduled)
	}
}

func checkAlarms(t *testing.T, s *synthesized) {
	topics := resources(s, "AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("%d topics", len(topics))
	}
	var topic string
	for id := range topics {
		topic = "ref:" + id
	}
	readme, err := os.ReadFile(filepath.Join(testenv.MustRoot(t), "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]bool{}
	for id, r := range resources(s, "AWS::CloudWatch::Alarm") {
		p := props(r)
		// Every alarm says in docs/operating.md what it means and what to do.
		name, _ := p["AlarmName"].(string)
		if row := "| `onejob-<env>-" + strings.TrimPrefix(name, "onejob-"+s.env+"-") + "` |"; !strings.Contains(string(readme), row) {
			t.Errorf("%s (%s): no row %s in docs/operating.md's alarm table", id, name, row)
		}
		for _, a := range list(p["AlarmActions"]) {
			if s.sym(a) != topic {
				t.Errorf("%s: action %v", id, a)
			}
		}
		if len(list(p["AlarmActions"])) != 1 {
			t.Errorf("%s: %d alarm actions", id, len(list(p["AlarmActions"])))
		}
		if name, ok := p["MetricName"].(string); ok {
			metrics[p["Namespace"].(string)+"/"+name] = true
			checkDims(t, s, id, p)
		}
		for _, m := range list(p["Metrics"]) {
			mm := asMap(m)
			if e, ok := mm["Expression"].(string); ok {
				metrics["expr:"+e] = true
				continue
			}
			met := asMap(asMap(mm["MetricStat"])["Metric"])
			metrics[met["Namespace"].(string)+"/"+met["MetricName"].(string)] = true
			checkDims(t, s, id, met)
		}
	}
	for _, m := range []string{
		"onejob/AttemptsUnknownOldestSeconds", "onejob/" + emf.ProvidersOpened, "onejob/" + emf.EndpointsDisabled,
		"onejob/RaceLost", "onejob/AttemptsStarted", "expr:IF(started > 0, lost / started, 0)",
		"AWS/ApiGateway/5xx",
		"AWS/States/ExecutionsFailed",
		"AWS/Lambda/Errors",
	} {
		if !metrics[m] {
			t.Errorf("no alarm on %s (have %v)", m, keys(metrics))
		}
	}
}

// checkDims: custom metrics carry exactly the env dimension the functions
// emit.
func checkDims(t *testing.T, s *synthesized, id string, m map[string]any) {
	if m["Namespace"] != emf.Namespace {
		return
	}
	dims := list(m["Dimensions"])
	if len(dims) != 1 || str(dims[0], "Name") != emf.Dimension || str(dims[0], "Value") != s.env {
		t.Errorf("%s: dimensions %v, want [%s=%s]", id, dims, emf.Dimension, s.env)
	}
}

// checkIAM compares every statement of every role with an allow-list:
// the grants must be exactly these, with no wildcard action.
func checkIAM(t *testing.T, s *synthesized) {
	xrayLambda := []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}
	// Both tasks read and transition the job and write the ledger
	// (attempt transitions); only the run reads certifications (provider
	// choice) and the providers' secret.
	task := func(ledger, certs bool) grants {
		g := grants{}.add([]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, "arn:table:jobs").add(xrayLambda, "*")
		if ledger {
			g.add([]string{"dynamodb:PutItem"}, "arn:table:attempts")
		}
		if certs {
			g.add([]string{"dynamodb:GetItem"}, "arn:table:certifications")
		}
		return g
	}
	want := map[string]grants{
		// No PutItem on jobs: a create is a conditional UpdateItem (review
		// L5).
		"fn:api": grants{}.
			add([]string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem"}, "arn:table:jobs").
			// Owners list through by_owner; operators through by_open,
			// then read those jobs in batches (dynamo.ListOpen).
			add([]string{"dynamodb:Query"}, "arn:table:jobs/index/"+dynamo.IndexByOwner, "arn:table:jobs/index/"+dynamo.IndexByOpen).
			add([]string{"dynamodb:Query", "dynamodb:PutItem"}, "arn:table:attempts").
			add([]string{"states:StartExecution"}, "ref:statemachine").
			add([]string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, "arn:table:providers").
			// Owners' quotas and budgets; operators list every owner.
			add([]string{"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:Scan"}, "arn:table:owners").
			// Webhook endpoints and a job's deliveries.
			add([]string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}, "arn:table:endpoints").
			add([]string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem"}, "arn:table:deliveries").
			// A cancel's event, handed to the notifier at once.
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnNotify).
			// A start throttled past its tries, handed to the sweeper.
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnSweeper).
			// Seals new signing secrets; no kms:Decrypt (review M4).
			add([]string{"kms:GenerateDataKey"}, "arn:secretskey").
			add(xrayLambda, "*"),
		// The notifier: pending events from by_notify, the owner's
		// endpoints, deliveries (put, due in by_due, claimed and tried);
		// its updates of jobs and endpoints are narrowed (narrowed below).
		"fn:" + deploy.FnNotify: grants{}.
			add([]string{"dynamodb:Query"}, "arn:table:jobs/index/"+dynamo.IndexByNotify).
			add([]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, "arn:table:jobs").
			add([]string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"}, "arn:table:endpoints").
			add([]string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"}, "arn:table:deliveries").
			add([]string{"dynamodb:Query"}, "arn:table:deliveries/index/"+dynamo.IndexByDue).
			// Only it opens the sealed signing secrets.
			add([]string{"kms:Decrypt"}, "arn:secretskey").
			add(xrayLambda, "*"),
		"fn:" + deploy.FnRun: task(true, true).add([]string{"secretsmanager:GetSecretValue"}, s.secret()).
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnNotify).
			add([]string{"dynamodb:GetItem", "dynamodb:PutItem"}, "arn:table:providers").
			// Budget reservations: reserved and settled, read after a refusal.
			add([]string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, "arn:table:owners").
			// A streamed attempt's chunks, one conditional put each.
			add([]string{"dynamodb:PutItem"}, "arn:table:streams"),
		// A provider's webhook: the work read back from the provider (its
		// configuration), the job's attempt ended, its budget settled, its
		// events handed off; no certifications, no provider health.
		"fn:" + deploy.FnEvents: task(true, false).add([]string{"secretsmanager:GetSecretValue"}, s.secret()).
			add([]string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, "arn:table:owners").
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnNotify).
			// Each verified delivery taken once by its webhook-id, given
			// back when its taking failed (review N-L1).
			add([]string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"}, "arn:table:inbound").
			// The pass over due work (issue 40): the sparse by_poll index,
			// and the run a job whose parked work ended needs.
			add([]string{"dynamodb:Query"}, "arn:table:jobs/index/"+dynamo.IndexByPoll).
			add([]string{"states:StartExecution"}, "ref:statemachine").
			add([]string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, "arn:table:providers").
			// The provider batches it sends and asks about (issue 40): one
			// item each, created, changed and forgotten conditionally, a
			// provider's open ones one Query.
			add([]string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:Query"}, "arn:table:batches"),
		// An attempt the hold ends settles its budget reservation.
		"fn:" + deploy.FnHold: task(true, false).add([]string{"dynamodb:UpdateItem"}, "arn:table:owners").
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnNotify),
		"fn:sweeper": grants{}.
			add([]string{"dynamodb:Query"}, "arn:table:jobs/index/"+dynamo.IndexByOpen).
			add([]string{"dynamodb:BatchGetItem", "dynamodb:GetItem"}, "arn:table:jobs").
			add([]string{"dynamodb:Query"}, "arn:table:jobs/index/"+dynamo.IndexByOwner).
			add([]string{"states:StartExecution"}, "ref:statemachine").
			add([]string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:PutItem"}, "arn:table:providers").
			add([]string{"dynamodb:Query"}, "arn:table:owners/index/"+dynamo.IndexByBusy).
			add([]string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, "arn:table:owners").
			// The recount counts owners' endpoints.
			add([]string{"dynamodb:Query"}, "arn:table:endpoints").
			add(xrayLambda, "*"),
		// A job's stream: the job, its log, and its owner's held
		// requests counted while it is open; nothing else.
		"fn:" + deploy.FnStream: grants{}.
			add([]string{"dynamodb:GetItem"}, "arn:table:jobs").
			add([]string{"dynamodb:Query"}, "arn:table:"+dynamo.StreamsTable().Logical).
			add([]string{"dynamodb:UpdateItem", "dynamodb:GetItem"}, "arn:table:owners").
			add(xrayLambda, "*"),
		"statemachine": grants{}.
			add([]string{"lambda:InvokeFunction"}, "arn:fn:"+deploy.FnHold, "arn:fn:"+deploy.FnRun).
			// What Step Functions needs to deliver logs and traces; these
			// APIs take no resource ARN.
			add([]string{"logs:CreateLogDelivery", "logs:DeleteLogDelivery", "logs:DescribeLogGroups", "logs:DescribeResourcePolicies",
				"logs:GetLogDelivery", "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:UpdateLogDelivery",
				"xray:GetSamplingRules", "xray:GetSamplingTargets", "xray:PutTelemetryRecords", "xray:PutTraceSegments"}, "*"),
	}

	// Each function writes its own log group, and no other.
	for _, name := range deploy.Names() {
		if g := want["fn:"+name]; g != nil {
			g.add([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, "arn:logs:"+name)
		}
	}
	// In an environment that traces, the traced functions export their
	// spans to X-Ray's OTLP endpoint (issue 42).
	if s.cfg.TraceSampleRatio != nil {
		for _, name := range permissions.Traced() {
			want["fn:"+name].add([]string{"xray:PutSpans", "xray:PutSpansForIndexing"}, "*")
		}
	}
	// Review L5: the notifier's updates of jobs and endpoints may name
	// only the attributes it writes; no other statement has a condition.
	narrowed := map[string][]string{
		"fn:" + deploy.FnNotify + " dynamodb:UpdateItem arn:table:jobs":      dynamo.DispatchAttributes(),
		"fn:" + deploy.FnNotify + " dynamodb:UpdateItem arn:table:endpoints": dynamo.EndpointHealthAttributes(),
	}
	conditions := map[string]any{}
	owners := roleOwners(t, s)
	got := map[string]grants{}
	addDoc := func(role string, doc any) {
		owner, ok := owners[role]
		if !ok {
			t.Errorf("policy for role %s that no function or state machine uses", role)
			return
		}
		if got[owner] == nil {
			got[owner] = grants{}
		}
		for _, st := range list(asMap(doc)["Statement"]) {
			stm := asMap(st)
			for _, k := range []string{"NotAction", "NotResource", "NotPrincipal"} {
				if _, bad := stm[k]; bad {
					t.Errorf("%s: statement uses %s: %v", owner, k, stm)
				}
			}
			if stm["Effect"] != "Allow" {
				continue // a Deny only narrows
			}
			for _, a := range strList(stm["Action"]) {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %q", owner, a)
				}
				for _, res := range list(stm["Resource"]) {
					sym := s.sym(res)
					if strings.HasPrefix(a, "dynamodb:") && !strings.HasPrefix(sym, "arn:table:") {
						t.Errorf("%s: %s on %s, not a table or index ARN", owner, a, sym)
					}
					got[owner].add([]string{a}, sym)
					if c, ok := stm["Condition"]; ok {
						conditions[owner+" "+a+" "+sym] = c
					}
				}
			}
		}
	}
	for _, r := range resources(s, "AWS::IAM::Policy") {
		p := props(r)
		for _, role := range list(p["Roles"]) {
			addDoc(strings.TrimPrefix(s.sym(role), "ref:"), p["PolicyDocument"])
		}
	}
	for id, r := range resources(s, "AWS::IAM::Role") {
		p := props(r)
		for _, pol := range list(p["Policies"]) {
			addDoc(id, asMap(pol)["PolicyDocument"])
		}
		var managed []string
		for _, m := range list(p["ManagedPolicyArns"]) {
			managed = append(managed, s.sym(m))
		}
		// No AWS managed policy (AWSLambdaBasicExecutionRole would allow
		// logs on every log group): every grant is in the lists above.
		if len(managed) > 0 {
			t.Errorf("%s: managed policies %v, want none", owners[id], managed)
		}
	}
	for owner := range want {
		if !reflect.DeepEqual(got[owner], want[owner]) {
			t.Errorf("%s grants differ\n got %v\nwant %v", owner, got[owner], want[owner])
		}
	}
	for owner := range got {
		if _, ok := want[owner]; !ok {
			t.Errorf("unexpected grants for %s: %v", owner, got[owner])
		}
	}
	for k, attrs := range narrowed {
		want := map[string]any{"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": toAny(attrs)}}
		if !reflect.DeepEqual(conditions[k], want) {
			t.Errorf("%s: condition %v, want %v", k, conditions[k], want)
		}
	}
	for k, c := range conditions {
		if _, ok := narrowed[k]; !ok {
			t.Errorf("%s: an unexpected condition %v", k, c)
		}
	}
	// Grants least privilege keeps out (review L5), whatever else changes.
	for _, f := range permissions.Forbidden() {
		res := "arn:table:" + f.Resource.Name
		if f.Resource.Index != "" {
			res += "/index/" + f.Resource.Index
		}
		if got["fn:"+f.Function][f.Action][res] {
			t.Errorf("%s may %s on %s: %s", f.Function, f.Action, res, f.Why)
		}
	}
	// The webhook secrets at rest (review M4): only the notify function
	// may decrypt them; the internet-facing API seals and cannot read back.
	for owner, g := range got {
		for _, a := range []string{"kms:Decrypt", "kms:ReEncryptFrom", "kms:CreateGrant"} {
			if len(g[a]) > 0 && owner != "fn:"+deploy.FnNotify {
				t.Errorf("%s may %s %v: only the notify function may open the webhook secrets", owner, a, keys(g[a]))
			}
		}
	}
	if keys := resources(s, "AWS::KMS::Key"); len(keys) != 1 {
		t.Errorf("%d KMS keys, want the webhook secrets' one", len(keys))
	} else {
		for _, k := range keys {
			if props(k)["EnableKeyRotation"] != true {
				t.Errorf("the secrets key does not rotate: %v", props(k))
			}
		}
	}
}

// checkPermissions: functions may be invoked only by this API (api, and
// events for providers' webhooks) and by the schedules (sweeper, notify,
// events for its pass over due work); the state machine uses its role
// instead. Anyone may invoke the stream
// function, through its URL only (it verifies the caller's token itself):
// Lambda wants both lambda:InvokeFunctionUrl for auth type NONE and
// lambda:InvokeFunction, here only when invoked through the URL.
func checkPermissions(t *testing.T, s *synthesized) {
	public := map[string]bool{}
	for id, r := range resources(s, "AWS::Lambda::Permission") {
		p := props(r)
		fn, principal := s.sym(p["FunctionName"]), p["Principal"]
		if fn == "arn:fn:"+deploy.FnStream && principal == "*" && p["SourceArn"] == nil && p["SourceAccount"] == nil {
			switch {
			case p["Action"] == "lambda:InvokeFunctionUrl" && p["FunctionUrlAuthType"] == "NONE" && p["InvokedViaFunctionUrl"] == nil:
				public["url"] = true
				continue
			case p["Action"] == "lambda:InvokeFunction" && p["InvokedViaFunctionUrl"] == true && p["FunctionUrlAuthType"] == nil:
				public["invoke via url"] = true
				continue
			}
		}
		ok := p["Action"] == "lambda:InvokeFunction" && p["SourceArn"] != nil &&
			((fn == "arn:fn:api" || fn == "arn:fn:"+deploy.FnEvents) && principal == "apigateway.amazonaws.com" ||
				(fn == "arn:fn:sweeper" || fn == "arn:fn:"+deploy.FnNotify || fn == "arn:fn:"+deploy.FnEvents) && principal == "events.amazonaws.com")
		if !ok {
			t.Errorf("%s: %s may invoke %s (%v, source %v): %v", id, principal, fn, p["Action"], p["SourceArn"], p)
		}
	}
	if !public["url"] || !public["invoke via url"] {
		t.Errorf("the stream function's URL is not open to callers with both permissions: %v", public)
	}
}

// checkStreamURL: jobs' streams are served by the stream function on its
// own URL, in response-streaming mode, with no IAM auth (the function
// verifies bearer tokens), CORS as the API's for the stream's method, and
// its concurrency reserved; the API function is told the URL.
func checkStreamURL(t *testing.T, s *synthesized) {
	urls := resources(s, "AWS::Lambda::Url")
	if len(urls) != 1 {
		t.Fatalf("%d function URLs, want the stream function's only", len(urls))
	}
	for id, r := range urls {
		p := props(r)
		if fn := s.sym(p["TargetFunctionArn"]); fn != "arn:fn:"+deploy.FnStream || p["Qualifier"] != nil {
			t.Errorf("%s targets %s (qualifier %v), want the stream function", id, fn, p["Qualifier"])
		}
		if p["InvokeMode"] != "RESPONSE_STREAM" || p["AuthType"] != "NONE" {
			t.Errorf("%s: invoke mode %v, auth %v; want RESPONSE_STREAM and NONE", id, p["InvokeMode"], p["AuthType"])
		}
		cors := asMap(p["Cors"])
		var methods []string
		for _, r := range apigw.Routes() {
			if r.Function == apigw.FnStream {
				methods = append(methods, r.Method)
			}
		}
		if !slices.Equal(methods, []string{"GET"}) {
			t.Errorf("the stream function serves %v, want GET (the stream) only", methods)
		}
		for key, want := range map[string][]string{"AllowOrigins": s.cfg.CORSOrigins, "AllowHeaders": apigw.CORSAllowHeaders(),
			"ExposeHeaders": apigw.CORSExposeHeaders(), "AllowMethods": methods} {
			if got := strList(cors[key]); !slices.Equal(got, want) {
				t.Errorf("%s: CORS %s %v, want %v", id, key, got, want)
			}
		}
		if !slices.Contains(strList(cors["AllowHeaders"]), "Last-Event-ID") || !slices.Contains(strList(cors["AllowHeaders"]), "Authorization") {
			t.Errorf("%s: a page cannot send its token or resume: %v", id, cors["AllowHeaders"])
		}
		if cors["MaxAge"] != apigw.CORSMaxAge.Seconds() || cors["AllowCredentials"] != false {
			t.Errorf("%s: CORS MaxAge %v AllowCredentials %v", id, cors["MaxAge"], cors["AllowCredentials"])
		}
	}
	for _, r := range resources(s, "AWS::Lambda::Function") {
		p := props(r)
		if p["FunctionName"] != "onejob-"+s.env+"-"+deploy.FnStream {
			continue
		}
		if n, ok := p["ReservedConcurrentExecutions"].(float64); !ok || n < 1 || int(n) != s.cfg.ReservedConcurrency[deploy.FnStream] ||
			int(n) <= s.cfg.Quotas.HeldRequests {
			t.Errorf("stream function: reserved concurrency %v, want cdk.json's %d, above the held-requests quota %d",
				p["ReservedConcurrentExecutions"], s.cfg.ReservedConcurrency[deploy.FnStream], s.cfg.Quotas.HeldRequests)
		}
		if p["Timeout"] != deploy.StreamTimeout.Seconds() || p["MemorySize"] != float64(128) {
			t.Errorf("stream function: timeout %v memory %v", p["Timeout"], p["MemorySize"])
		}
	}
	out := asMap(asMap(s.template["Outputs"])["StreamUrl"])
	if v := s.sym(out["Value"]); v != "getatt:url:"+deploy.FnStream+".FunctionUrl" {
		t.Errorf("output StreamUrl %v", v)
	}
}

// checkRetention: prod keeps tables, secret and logs; elsewhere stack
// deletion removes them.
func checkRetention(t *testing.T, s *synthesized) {
	want := "Delete"
	if s.env == "prod" {
		want = "Retain"
	}
	for _, typ := range []string{"AWS::DynamoDB::GlobalTable", "AWS::SecretsManager::Secret", "AWS::Logs::LogGroup"} {
		for id, r := range resources(s, typ) {
			if r["DeletionPolicy"] != want || r["UpdateReplacePolicy"] != want {
				t.Errorf("%s %s: DeletionPolicy %v UpdateReplacePolicy %v, want %s", typ, id, r["DeletionPolicy"], r["UpdateReplacePolicy"], want)
			}
		}
	}
	if n := len(resources(s, "AWS::SecretsManager::Secret")); (s.env == "staging") != (n == 0) {
		t.Errorf("%d secrets created (staging brings its own)", n)
	}
}

// checkAcyclic: CloudFormation rejects circular dependencies at deploy
// time; e.g. the API function's STATE_MACHINE_ARN would close a cycle if
// the state machine referenced the API function. (CDK's default
// validation rules catch this at synth too; this check does not depend
// on that feature flag.)
func checkAcyclic(t *testing.T, s *synthesized) {
	if c := findCycle(s.template); c != nil {
		t.Errorf("dependency cycle: %s", strings.Join(c, " -> "))
	}
}

// findCycle returns one dependency cycle among the template's resources
// (Ref, GetAtt, Fn::Sub and DependsOn), or nil.
func findCycle(template map[string]any) []string {
	res := asMap(template["Resources"])
	deps := map[string][]string{}
	for id, r := range res {
		rm := asMap(r)
		refs := map[string]bool{}
		collectRefs(rm["Properties"], refs)
		for _, d := range strList(rm["DependsOn"]) {
			refs[d] = true
		}
		for _, ref := range keys(refs) {
			if _, ok := res[ref]; ok {
				deps[id] = append(deps[id], ref)
			}
		}
	}
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var visit func(id string, path []string) []string
	visit = func(id string, path []string) []string {
		switch state[id] {
		case active:
			return append(path, id)
		case done:
			return nil
		}
		state[id] = active
		for _, d := range deps[id] {
			if c := visit(d, append(path, id)); c != nil {
				return c
			}
		}
		state[id] = done
		return nil
	}
	for _, id := range keys(deps) {
		if c := visit(id, nil); c != nil {
			return c
		}
	}
	return nil
}

func TestFindCycle(t *testing.T) {
	t.Parallel()
	tmpl := func(smRefsAPI bool) map[string]any {
		sm := map[string]any{"Type": "AWS::StepFunctions::StateMachine", "Properties": map[string]any{
			"DefinitionSubstitutions": map[string]any{"A": map[string]any{"Fn::GetAtt": []any{"Task", "Arn"}}}}}
		if smRefsAPI {
			sm["Properties"].(map[string]any)["DefinitionString"] = map[string]any{"Fn::Sub": "${Api.Arn}"}
		}
		return map[string]any{"Resources": map[string]any{
			"Api":  map[string]any{"Type": "AWS::Lambda::Function", "Properties": map[string]any{"Environment": map[string]any{"Variables": map[string]any{"SM": map[string]any{"Ref": "Sm"}}}}},
			"Task": map[string]any{"Type": "AWS::Lambda::Function"},
			"Sm":   sm,
		}}
	}
	if c := findCycle(tmpl(false)); c != nil {
		t.Errorf("false cycle %v", c)
	}
	if c := findCycle(tmpl(true)); len(c) == 0 {
		t.Errorf("cycle Api -> Sm -> Api not found")
	}
}

// --- config ----------------------------------------------------------------

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	fnDir := stubFunctions(t)
	base := cdkContext(t, root)
	load := func(over map[string]any, env map[string]string) (Config, error) {
		ctx := map[string]any{}
		for k, v := range base {
			ctx[k] = v
		}
		ctx[ContextFunctionsDir] = fnDir
		ctx[ContextDefinition] = filepath.Join(root, "statemachine", "onejob.asl.json")
		for k, v := range over {
			ctx[k] = v
		}
		return LoadConfig(func(k string) any { return ctx[k] }, func(k string) string { return env[k] })
	}

	t.Run("env from context beats ONEJOB_ENV; default dev", func(t *testing.T) {
		t.Parallel()
		c, err := load(map[string]any{ContextEnv: "prod"}, map[string]string{"ONEJOB_ENV": "staging"})
		if err != nil || c.Env != "prod" || !c.RetainData || c.FullExecutionLogs {
			t.Fatalf("%+v %v", c, err)
		}
		c, err = load(nil, map[string]string{"ONEJOB_ENV": "staging"})
		if err != nil || c.Env != "staging" || c.RetainData {
			t.Fatalf("%+v %v", c, err)
		}
		c, err = load(nil, nil)
		if err != nil || c.Env != "dev" {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("context overrides cdk.json settings", func(t *testing.T) {
		t.Parallel()
		c, err := load(map[string]any{ContextJWTIssuer: "https://issuer.test/x", ContextJWTAudience: " a , b,", ContextAlarmEmail: "ops@onejob.test"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.JWTIssuer != "https://issuer.test/x" || !slices.Equal(c.JWTAudience, []string{"a", "b"}) || c.AlarmEmail != "ops@onejob.test" {
			t.Fatalf("%+v", c)
		}
	})
	for name, tc := range map[string]struct {
		over    map[string]any
		wantErr string
	}{
		"unknown env":                      {map[string]any{ContextEnv: "qa"}, "unknown environment"},
		"http issuer":                      {map[string]any{ContextJWTIssuer: "http://issuer.test/"}, "https URL"},
		"partial secret arn":               {map[string]any{ContextSecretArn: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:onejob"}, "complete Secrets Manager"},
		"missing binaries":                 {map[string]any{ContextFunctionsDir: t.TempDir()}, "no bootstrap binary"},
		"missing definition":               {map[string]any{ContextDefinition: filepath.Join(t.TempDir(), "x.json")}, "state machine definition"},
		"prod allows any origin":           {map[string]any{ContextEnv: "prod", ContextCORSOrigins: "*"}, "wildcards are not allowed"},
		"prod allows a subdomain wildcard": {map[string]any{ContextEnv: "prod", ContextCORSOrigins: "https://*.onejob.example"}, "wildcards are not allowed"},
		"prod allows loopback http":        {map[string]any{ContextEnv: "prod", ContextCORSOrigins: "http://localhost:8080"}, "must be https"},
		"staging allows loopback http":     {map[string]any{ContextEnv: "staging", ContextCORSOrigins: "http://127.0.0.1:8080"}, "must be https"},
		"dev allows a port wildcard":       {map[string]any{ContextCORSOrigins: "http://localhost:*"}, "wildcards are not allowed"},
		"dev allows remote http":           {map[string]any{ContextCORSOrigins: "http://app.onejob.example"}, "loopback hosts only"},
		"origin with a path":               {map[string]any{ContextCORSOrigins: "https://app.onejob.example/"}, "nothing after it"},
		"origin not lower case":            {map[string]any{ContextCORSOrigins: "https://App.onejob.example"}, "lower case"},
		"origin with default port":         {map[string]any{ContextCORSOrigins: "https://app.onejob.example:443"}, "default port"},
		"origin twice":                     {map[string]any{ContextCORSOrigins: "https://a.onejob.example,https://a.onejob.example"}, "listed twice"},
		"origin not a url":                 {map[string]any{ContextCORSOrigins: "app.onejob.example"}, "scheme://host"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := load(tc.over, nil); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	t.Run("CORS origins from cdk.json, overridden by context", func(t *testing.T) {
		t.Parallel()
		c, err := load(map[string]any{ContextEnv: "prod"}, nil)
		if err != nil || len(c.CORSOrigins) == 0 || c.LoopbackOrigins {
			t.Fatalf("prod: %v %v %v", c.CORSOrigins, c.LoopbackOrigins, err)
		}
		c, err = load(map[string]any{ContextCORSOrigins: "http://localhost:4200, https://dev.app.onejob.example"}, nil)
		if err != nil || !slices.Equal(c.CORSOrigins, []string{"http://localhost:4200", "https://dev.app.onejob.example"}) {
			t.Fatalf("dev override: %v %v", c.CORSOrigins, err)
		}
		if c, err := load(map[string]any{ContextCORSOrigins: "http://[::1]:8080"}, nil); err != nil {
			t.Fatalf("dev IPv6 loopback: %v %v", c.CORSOrigins, err)
		}
	})
	t.Run("admin claims from cdk.json, overridden by context", func(t *testing.T) {
		t.Parallel()
		for env, want := range map[string]apigw.AdminRule{
			"dev":     {Claim: "scope", Value: "jobs:admin"},
			"staging": {Claim: "cognito:groups", Value: "onejob-operators"},
			"prod":    {Claim: "scp", Value: "jobs:admin"},
		} {
			if c, err := load(map[string]any{ContextEnv: env}, nil); err != nil || c.Admin != want {
				t.Errorf("%s: admin %+v %v, want %+v", env, c.Admin, err, want)
			}
		}
		c, err := load(map[string]any{ContextAdminClaim: "groups", ContextAdminValue: "ops"}, nil)
		if err != nil || c.Admin != (apigw.AdminRule{Claim: "groups", Value: "ops"}) {
			t.Fatalf("override: %+v %v", c.Admin, err)
		}
		if _, err := load(map[string]any{ContextAdminValue: "jobs admin"}, nil); err == nil || !strings.Contains(err.Error(), "admin") {
			t.Fatalf("a value with a space: %v", err)
		}
	})
	t.Run("every environment in cdk.json is valid", func(t *testing.T) {
		t.Parallel()
		for _, env := range []string{"dev", "staging", "prod"} {
			if _, err := load(map[string]any{ContextEnv: env}, nil); err != nil {
				t.Errorf("%s: %v", env, err)
			}
		}
	})
}

func TestDefinitionPlaceholders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := 0
	write := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("d%d.json", n))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := `"${RunFunctionArn}${HoldFunctionArn}"`
	if _, err := loadDefinition(write(all)); err != nil {
		t.Errorf("both: %v", err)
	}
	if _, err := loadDefinition(write(`"${RunFunctionArn}${HoldFunctionArn}${ApiFunctionArn}"`)); err == nil || !strings.Contains(err.Error(), "ApiFunctionArn") {
		t.Errorf("unknown placeholder accepted: %v", err)
	}
	if _, err := loadDefinition(write(`"${RunFunctionArn}"`)); err == nil || !strings.Contains(err.Error(), "never uses") {
		t.Errorf("missing placeholders accepted: %v", err)
	}
}

// TestCDKJSON pins what offline synthesis depends on.
func TestCDKJSON(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(testenv.MustRoot(t), "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		App     string         `json:"app"`
		Notices *bool          `json:"notices"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.App != "go run ./infra" || c.Notices == nil || *c.Notices || c.Context["cli-telemetry"] != false {
		t.Errorf("cdk.json: app %q notices %v telemetry %v", c.App, c.Notices, c.Context["cli-telemetry"])
	}
	if c.Context["@aws-cdk/aws-iam:minimizePolicies"] != true || c.Context["@aws-cdk/aws-lambda:useCdkManagedLogGroup"] != true {
		t.Errorf("cdk.json lacks the recorded feature flags")
	}
}

// --- helpers ---------------------------------------------------------------

// grants is role → action → resource set, in symbolic form.
type grants map[string]map[string]bool

func (g grants) add(actions []string, resources ...string) grants {
	for _, a := range actions {
		if g[a] == nil {
			g[a] = map[string]bool{}
		}
		for _, r := range resources {
			g[a][r] = true
		}
	}
	return g
}

func (g grants) String() string {
	var lines []string
	for _, a := range keys(g) {
		lines = append(lines, a+" on "+strings.Join(keys(g[a]), ","))
	}
	return strings.Join(lines, "; ")
}

// roleOwners maps each role's logical ID to "fn:<name>" or "statemachine".
func roleOwners(t *testing.T, s *synthesized) map[string]string {
	owners := map[string]string{}
	for id, r := range resources(s, "AWS::Lambda::Function") {
		owners[roleOf(s, props(r)["Role"])] = s.names[id]
	}
	for _, r := range resources(s, "AWS::StepFunctions::StateMachine") {
		owners[roleOf(s, props(r)["RoleArn"])] = "statemachine"
	}
	for id := range resources(s, "AWS::IAM::Role") {
		if _, ok := owners[id]; !ok {
			t.Errorf("role %s belongs to neither a function nor the state machine", id)
		}
	}
	return owners
}

func roleOf(s *synthesized, v any) string {
	return strings.TrimPrefix(s.sym(v), "arn:")
}

// friendlyNames names the resources the checks talk about.
func friendlyNames(tmpl map[string]any) map[string]string {
	names := map[string]string{}
	for id, r := range asMap(tmpl["Resources"]) {
		rm := asMap(r)
		p := asMap(rm["Properties"])
		switch rm["Type"] {
		case "AWS::DynamoDB::GlobalTable":
			n, _ := p["TableName"].(string)
			names[id] = "table:" + n[strings.LastIndex(n, "-")+1:]
		case "AWS::Lambda::Function":
			n, _ := p["FunctionName"].(string)
			names[id] = "fn:" + n[strings.LastIndex(n, "-")+1:]
		case "AWS::StepFunctions::StateMachine":
			names[id] = "statemachine"
		case "AWS::SecretsManager::Secret":
			names[id] = "secret"
		case "AWS::KMS::Key":
			names[id] = "secretskey"
		case "AWS::Lambda::Url":
			// Named for its function (deploy fixes functions' logical IDs).
			if ga := list(asMap(p["TargetFunctionArn"])["Fn::GetAtt"]); len(ga) == 2 {
				for _, f := range deploy.Functions() {
					if ga[0] == f.LogicalID {
						names[id] = "url:" + f.Name
					}
				}
			}
		case "AWS::Logs::LogGroup":
			n, _ := p["LogGroupName"].(string)
			if fn, ok := strings.CutPrefix(n, "/aws/lambda/onejob-"); ok {
				names[id] = "logs:" + fn[strings.Index(fn, "-")+1:]
			}
		}
	}
	return names
}

// secret is how the run function's grant and variable refer to the secret.
func (s *synthesized) secret() string {
	if s.cfg.ProvidersSecretArn != "" {
		return s.cfg.ProvidersSecretArn
	}
	return "ref:secret"
}

// sym renders a CloudFormation value with references in symbolic form:
// Ref → "ref:<name>", GetAtt Arn → "arn:<name>", Join → concatenation.
func (s *synthesized) sym(v any) string {
	name := func(id string) string {
		if n, ok := s.names[id]; ok {
			return n
		}
		return id
	}
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			return "ref:" + name(ref)
		}
		if ga := list(x["Fn::GetAtt"]); len(ga) == 2 {
			if ga[1] == "Arn" {
				return "arn:" + name(ga[0].(string))
			}
			return "getatt:" + name(ga[0].(string)) + "." + ga[1].(string)
		}
		if j := list(x["Fn::Join"]); len(j) == 2 {
			var parts []string
			for _, p := range list(j[1]) {
				parts = append(parts, s.sym(p))
			}
			return strings.Join(parts, j[0].(string))
		}
	}
	b, _ := json.Marshal(v)
	return "?" + string(b)
}

// flatten turns a DefinitionString (literal, Fn::Join or Fn::Sub) into one
// string, rendering embedded references symbolically and returning them.
func (s *synthesized) flatten(t *testing.T, v any) (string, []string) {
	switch x := v.(type) {
	case string:
		return x, nil
	case map[string]any:
		if j := list(x["Fn::Join"]); len(j) == 2 {
			var b strings.Builder
			var refs []string
			for _, p := range list(j[1]) {
				if str, ok := p.(string); ok {
					b.WriteString(str)
					continue
				}
				ref := s.sym(p)
				refs = append(refs, ref)
				b.WriteString(ref)
			}
			return b.String(), refs
		}
		if sub, ok := x["Fn::Sub"]; ok {
			body, vars := "", map[string]any{}
			if str, ok := sub.(string); ok {
				body = str
			} else if l := list(sub); len(l) == 2 {
				body, vars = l[0].(string), asMap(l[1])
			}
			var refs []string
			body = regexp.MustCompile(`\$\{([^}!]+)\}`).ReplaceAllStringFunc(body, func(m string) string {
				key := m[2 : len(m)-1]
				var ref string
				if v, ok := vars[key]; ok {
					ref = s.sym(v)
				} else if id, attr, ok := strings.Cut(key, "."); ok {
					ref = s.sym(map[string]any{"Fn::GetAtt": []any{id, attr}})
				} else {
					ref = s.sym(map[string]any{"Ref": key})
				}
				refs = append(refs, ref)
				return ref
			})
			return body, refs
		}
	}
	t.Fatalf("DefinitionString of unexpected shape: %v", v)
	return "", nil
}

// walkStates visits every state, including Parallel branches and Map
// processors.
func walkStates(machine map[string]any, f func(string, map[string]any)) {
	for name, st := range asMap(machine["States"]) {
		stm := asMap(st)
		f(name, stm)
		for _, b := range list(stm["Branches"]) {
			walkStates(asMap(b), f)
		}
		for _, k := range []string{"Iterator", "ItemProcessor"} {
			if sub, ok := stm[k]; ok {
				walkStates(asMap(sub), f)
			}
		}
	}
}

func collectRefs(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			into[ref] = true
		}
		if ga := list(x["Fn::GetAtt"]); len(ga) == 2 {
			into[ga[0].(string)] = true
		}
		if sub, ok := x["Fn::Sub"]; ok {
			body, _ := sub.(string)
			if l := list(sub); len(l) == 2 {
				body, _ = l[0].(string)
			}
			for _, m := range regexp.MustCompile(`\$\{([^}.!]+)`).FindAllStringSubmatch(body, -1) {
				into[m[1]] = true
			}
		}
		for _, vv := range x {
			collectRefs(vv, into)
		}
	case []any:
		for _, vv := range x {
			collectRefs(vv, into)
		}
	}
}

func resources(s *synthesized, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range asMap(s.template["Resources"]) {
		if rm := asMap(r); rm["Type"] == typ {
			out[id] = rm
		}
	}
	return out
}

func props(r map[string]any) map[string]any { return asMap(r["Properties"]) }

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// list also accepts a single value where CloudFormation allows one.
func list(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	default:
		return []any{x}
	}
}

func strList(v any) []string {
	var out []string
	for _, x := range list(v) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func str(v any, key string) string {
	s, _ := asMap(v)[key].(string)
	return s
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// cdkContext is cdk.json's context: the feature flags and per-environment
// settings the CLI would pass.
func cdkContext(t *testing.T, root string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Context
}

// stubFunctions makes a functions directory with a dummy bootstrap per
// function, so the stack synthesizes without building the real ones.
func stubFunctions(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range deploy.Names() {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n, "bootstrap"), []byte("#!/bin/sh\n# "+n+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestFunctionFolders keeps functions/ (one main per Lambda, the folders
// the Makefile builds and size-gates) and the functions this stack deploys
// the same set.
func TestFunctionFolders(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(filepath.Join(testenv.MustRoot(t), "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.IsDir() {
			got = append(got, e.Name())
		}
	}
	want := slices.Sorted(slices.Values(deploy.Names()))
	if !slices.Equal(got, want) {
		t.Errorf("functions/ holds %v, deploy.Functions() lists %v", got, want)
	}
}

// checkNag: cdk-nag's AwsSolutions pack ran on this synthesis and left no
// unsuppressed finding, error or warning. Every suppression carries its
// reason in the stack (next to its resource) and is one of the accepted
// kinds below; a new kind must be added here, with why.
func checkNag(t *testing.T, s *synthesized) {
	if len(s.nag) == 0 {
		t.Fatal("empty cdk-nag report")
	}
	if f := nagFindings(s.nag); len(f) > 0 {
		t.Errorf("unsuppressed cdk-nag findings:\n%s", strings.Join(f, "\n"))
	}
	accepted := map[string]string{
		"AwsSolutions-APIG4": "the console's public routes",
		"AwsSolutions-IAM5":  "X-Ray's and Step Functions' log delivery's Resource::*",
		"AwsSolutions-SMG4":  "the providers' secret, rotated by hand",
	}
	compliant := 0
	for _, l := range s.nag {
		switch l.Compliance {
		case "Compliant":
			compliant++
		case "Suppressed":
			if _, ok := accepted[l.RuleID]; !ok {
				t.Errorf("%s suppressed on %s: not an accepted kind of suppression (%s)", l.RuleID, l.ResourceID, l.ExceptionReason)
			}
			if len(l.ExceptionReason) < 40 {
				t.Errorf("%s on %s: suppressed without a real reason: %q", l.RuleID, l.ResourceID, l.ExceptionReason)
			}
		}
	}
	if compliant == 0 {
		t.Error("cdk-nag found nothing compliant: did the pack run?")
	}
}

// checkGuards: the stage's throttling and access log, and each function's
// reserved concurrency, as the environment's Config says (cdk.json).
func checkGuards(t *testing.T, s *synthesized) {
	stages := resources(s, "AWS::ApiGatewayV2::Stage")
	if len(stages) != 1 {
		t.Fatalf("%d stages", len(stages))
	}
	for _, r := range stages {
		p := props(r)
		rs := asMap(p["DefaultRouteSettings"])
		if rs["ThrottlingRateLimit"] != s.cfg.Throttle.Rate || rs["ThrottlingBurstLimit"] != float64(s.cfg.Throttle.Burst) {
			t.Errorf("stage throttling %v, want rate %v burst %d", rs, s.cfg.Throttle.Rate, s.cfg.Throttle.Burst)
		}
		// The providers' webhooks have a bucket of their own (review
		// N-L2), and the stage is created after the route it names.
		routes := asMap(p["RouteSettings"])
		events := asMap(routes["POST /v1/provider-events/{provider}"])
		if len(routes) != 1 || events["ThrottlingRateLimit"] != s.cfg.EventsThrottle.Rate ||
			events["ThrottlingBurstLimit"] != float64(s.cfg.EventsThrottle.Burst) {
			t.Errorf("route settings %v, want the provider-events route's own throttle, rate %v burst %d",
				routes, s.cfg.EventsThrottle.Rate, s.cfg.EventsThrottle.Burst)
		}
		var routeID string
		for id, route := range resources(s, "AWS::ApiGatewayV2::Route") {
			if props(route)["RouteKey"] == "POST /v1/provider-events/{provider}" {
				routeID = id
			}
		}
		if deps, _ := r["DependsOn"].([]any); routeID == "" || !slices.Contains(deps, any(routeID)) {
			t.Errorf("the stage depends on %v, not on the provider-events route %q its settings name", r["DependsOn"], routeID)
		}
		al := asMap(p["AccessLogSettings"])
		if dest := s.sym(al["DestinationArn"]); !strings.HasPrefix(dest, "arn:") {
			t.Errorf("access log destination %v", al["DestinationArn"])
		}
		format, _ := al["Format"].(string)
		asJSON := regexp.MustCompile(`\$context\.[A-Za-z.]+`).ReplaceAllString(format, "0")
		var line map[string]any
		if err := json.Unmarshal([]byte(asJSON), &line); err != nil {
			t.Errorf("access log format is not one JSON object: %v\n%s", err, format)
		}
		for key, variable := range map[string]string{"request_id": "requestId", "route_key": "routeKey", "status": "status",
			"latency_ms": "responseLatency", "integration_latency_ms": "integrationLatency", "integration_error": "integrationErrorMessage"} {
			if _, ok := line[key]; !ok || !strings.Contains(format, "$context."+variable) {
				t.Errorf("access log format lacks %s ($context.%s): %s", key, variable, format)
			}
		}
	}
	for _, name := range guardedFunctions() {
		if s.cfg.ReservedConcurrency[name] < 1 {
			t.Errorf("%s has no reserved concurrency", name)
		}
	}
	for _, r := range resources(s, "AWS::Lambda::Function") {
		p := props(r)
		fname, _ := p["FunctionName"].(string)
		name := strings.TrimPrefix(fname, "onejob-"+s.env+"-")
		got, set := p["ReservedConcurrentExecutions"]
		want, reserved := s.cfg.ReservedConcurrency[name]
		if set != reserved || (reserved && got != float64(want)) {
			t.Errorf("%s: reserved concurrency %v, want %d (reserved: %v)", fname, got, want, reserved)
		}
	}
}

// TestGuardsConfig: the throttling and reserved concurrency of each
// environment come from cdk.json, and a bad one is refused at load.
func TestGuardsConfig(t *testing.T) {
	t.Parallel()
	root := testenv.MustRoot(t)
	fnDir := stubFunctions(t)
	base := cdkContext(t, root)
	// load replaces prod's block in cdk.json's environments with edit's
	// result.
	load := func(t *testing.T, edit func(map[string]any)) (Config, error) {
		t.Helper()
		b, err := json.Marshal(base[ContextEnvironments])
		if err != nil {
			t.Fatal(err)
		}
		var envs map[string]map[string]any
		if err := json.Unmarshal(b, &envs); err != nil {
			t.Fatal(err)
		}
		edit(envs["prod"])
		ctx := map[string]any{ContextEnv: "prod", ContextEnvironments: envs, ContextFunctionsDir: fnDir,
			ContextDefinition: filepath.Join(root, "statemachine", "onejob.asl.json")}
		return LoadConfig(func(k string) any { return ctx[k] }, func(string) string { return "" })
	}
	t.Run("FromCDKJSON", func(t *testing.T) {
		t.Parallel()
		c, err := load(t, func(map[string]any) {})
		if err != nil {
			t.Fatal(err)
		}
		var envs map[string]envSettings
		b, _ := json.Marshal(base[ContextEnvironments])
		if err := json.Unmarshal(b, &envs); err != nil {
			t.Fatal(err)
		}
		for _, env := range []string{"dev", "staging", "prod"} {
			if envs[env].Throttle == nil || envs[env].EventsThrottle == nil || envs[env].ReservedConcurrency == nil {
				t.Errorf("cdk.json: %s has no throttle, eventsThrottle or reservedConcurrency", env)
			}
		}
		if c.Throttle != *envs["prod"].Throttle || c.EventsThrottle != *envs["prod"].EventsThrottle ||
			!maps.Equal(c.ReservedConcurrency, envs["prod"].ReservedConcurrency) {
			t.Errorf("prod: %+v %+v %v, cdk.json says %+v %+v %v", c.Throttle, c.EventsThrottle, c.ReservedConcurrency,
				*envs["prod"].Throttle, *envs["prod"].EventsThrottle, envs["prod"].ReservedConcurrency)
		}
	})
	t.Run("AsynchronousDiscountAndOverhead", func(t *testing.T) {
		t.Parallel()
		c, err := load(t, func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h", "prices": map[string]any{
				"openai-flex": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "openai-background", "tierDiscountPercent": map[string]any{"2h": 30, "8h": 40}},
				"anthropic-fallback": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "anthropic", "overheadInputTokens": 346, "tierDiscountPercent": map[string]any{"24h": 50}}}}
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Budget.Budget()
		if err != nil || b.Prices["openai-flex"].Discount != (job.Discount{Flex2h: 30, Flex8h: 40}) || b.Prices["anthropic-fallback"].OverheadInputTokens != 346 {
			t.Fatalf("%+v, %v", b.Prices, err)
		}
	})
	t.Run("DefaultedWhenAbsent", func(t *testing.T) {
		t.Parallel()
		c, err := load(t, func(m map[string]any) {
			delete(m, "throttle")
			delete(m, "eventsThrottle")
			delete(m, "reservedConcurrency")
		})
		d, _ := DefaultConfig("prod")
		if err != nil || c.Throttle != d.Throttle || c.EventsThrottle != d.EventsThrottle || !maps.Equal(c.ReservedConcurrency, d.ReservedConcurrency) {
			t.Fatalf("%+v %+v %v %v", c.Throttle, c.EventsThrottle, c.ReservedConcurrency, err)
		}
	})
	for _, tc := range []struct {
		name    string
		edit    func(map[string]any)
		wantErr string
	}{
		{"ZeroRate", func(m map[string]any) { m["throttle"] = map[string]any{"rate": 0, "burst": 10} }, "throttle rate"},
		{"RateAboveAccount", func(m map[string]any) { m["throttle"] = map[string]any{"rate": 20000, "burst": 10} }, "throttle rate"},
		{"BurstAboveAccount", func(m map[string]any) { m["throttle"] = map[string]any{"rate": 10, "burst": 6000} }, "throttle burst"},
		{"NoBurst", func(m map[string]any) { m["throttle"] = map[string]any{"rate": 10} }, "throttle burst"},
		{"MisspeltKey", func(m map[string]any) { m["throtle"] = map[string]any{"rate": 10, "burst": 10} }, "unknown field"},
		{"HoldUnreserved", func(m map[string]any) { m["reservedConcurrency"] = map[string]any{"api": 10, "run": 10} }, "hold needs reserved concurrency"},
		{"APIUnreserved", func(m map[string]any) { m["reservedConcurrency"] = map[string]any{"run": 10, "hold": 10} }, "api needs reserved concurrency"},
		{"StreamUnreserved", func(m map[string]any) {
			m["reservedConcurrency"] = map[string]any{"api": 100, "run": 200, "hold": 100}
		}, "stream needs reserved concurrency"},
		{"HeldRequestsTakeTheStreams", func(m map[string]any) {
			m["quotas"] = map[string]any{"unfinishedJobs": 5, "heldRequests": 10}
			m["reservedConcurrency"] = map[string]any{"api": 20, "run": 10, "hold": 5, "stream": 10}
		}, "quota heldRequests 10 must be at least 1 and below the stream function's reserved concurrency 10"},
		{"UnknownFunction", func(m map[string]any) {
			m["reservedConcurrency"] = map[string]any{"api": 1, "run": 1, "hold": 1, "apy": 1}
		}, "which is no function"},
		{"ZeroReserved", func(m map[string]any) { m["reservedConcurrency"] = map[string]any{"api": 0, "run": 1, "hold": 1} }, "at least 1"},
		{"HeldRequestsTakeTheAPI", func(m map[string]any) {
			m["quotas"] = map[string]any{"unfinishedJobs": 5, "heldRequests": 10}
			m["reservedConcurrency"] = map[string]any{"api": 10, "run": 10, "hold": 5}
		}, "quota heldRequests 10 must be at least 1 and below the api function's reserved concurrency 10"},
		{"UnfinishedJobsTakeRun", func(m map[string]any) {
			m["quotas"] = map[string]any{"unfinishedJobs": 100, "heldRequests": 5}
			m["reservedConcurrency"] = map[string]any{"api": 10, "run": 10, "hold": 5}
		}, "quota unfinishedJobs 100 must be at least 1 and below the run function's reserved concurrency 10"},
		{"UnboundedQuota", func(m map[string]any) {
			m["quotas"] = map[string]any{"unfinishedJobs": 0, "heldRequests": 5}
			m["reservedConcurrency"] = map[string]any{"api": 10, "run": 10, "hold": 5}
		}, "quota unfinishedJobs 0"},
		{"BudgetWithoutPeriod", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "1x"}
		}, "budget period"},
		{"PriceNotAnAmount", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-primary": map[string]any{"version": "v", "inputUSDPerMTok": "cheap", "outputUSDPerMTok": "1"}}}
		}, "inputUSDPerMTok"},
		{"DiscountForNoTier", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-primary": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "openai", "tierDiscountPercent": map[string]any{"24h": 50, "48h": 50}}}}
		}, `"48h" is not a tier with a discount`},
		// Issue 40: a kind that runs a tier as a batch line or at a flex
		// tier gives that tier its rate, or its jobs that may wait that
		// long would be billed at another tier's.
		{"ABatchKindWithoutItsRate", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-primary": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "openai"}}}
		}, "must give 24h its rate"},
		{"DiscountOfEverything", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-flex": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "openai-background", "tierDiscountPercent": map[string]any{"8h": 100}}}}
		}, "0 to 99 percent"},
		// Review N-L7: a discount only where the provider runs work in
		// the window (an asynchronous kind, declared).
		{"DiscountOnASynchronousProvider", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-primary": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"kind": "openai", "tierDiscountPercent": map[string]any{"2h": 30}}}}
		}, "only a provider that runs work in that window may be priced lower"},
		{"DiscountOfNoKind", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"openai-primary": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"tierDiscountPercent": map[string]any{"8h": 40}}}}
		}, `this price's kind is ""`},
		// Review N-L3: the provider's own prompt, bounded.
		{"NegativeOverhead", func(m map[string]any) {
			m["budget"] = map[string]any{"amountUSD": "1", "period": "24h",
				"prices": map[string]any{"anthropic-fallback": map[string]any{"version": "v", "inputUSDPerMTok": "1", "outputUSDPerMTok": "1",
					"overheadInputTokens": -300}}}
		}, "the overhead is 0 to"},
		{"TooMuchReserved", func(m map[string]any) {
			m["reservedConcurrency"] = map[string]any{"api": 500, "run": 300, "hold": 200}
		}, "adds up to 1000"},
		// Review N-L2: the providers' webhooks have their own bucket,
		// within the stage's, and a reserved function of their own,
		// which counts against the account's concurrency.
		{"EventsUnreserved", func(m map[string]any) {
			m["reservedConcurrency"] = map[string]any{"api": 100, "run": 200, "hold": 100}
		}, "events needs reserved concurrency"},
		{"EventsCountTowardTheAccount", func(m map[string]any) {
			m["reservedConcurrency"] = map[string]any{"api": 200, "run": 400, "hold": 200, "events": 101}
		}, "adds up to 901"},
		{"EventsRateAboveTheStage", func(m map[string]any) {
			m["eventsThrottle"] = map[string]any{"rate": 201, "burst": 10}
		}, "events throttle rate 201 must be in (0, 200]"},
		{"EventsBurstAboveTheStage", func(m map[string]any) {
			m["eventsThrottle"] = map[string]any{"rate": 10, "burst": 401}
		}, "events throttle burst 401 must be in [1, 400]"},
		{"NoEventsBurst", func(m map[string]any) { m["eventsThrottle"] = map[string]any{"rate": 10} }, "events throttle burst 0"},
		{"ZeroEventsRate", func(m map[string]any) { m["eventsThrottle"] = map[string]any{"rate": 0, "burst": 10} }, "events throttle rate 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := load(t, tc.edit); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
