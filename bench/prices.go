package main

import "github.com/onejob/onejob/internal/deploy"

// price is one published AWS list price (us-east-1, on-demand, first tier).
type price struct {
	Item string  `json:"item"`
	USD  float64 `json:"usd"`
	Per  string  `json:"per"`
	// Effective is when the price took effect, as far as the sources say.
	Effective string `json:"effective"`
	// Confirmed is true when an AWS page in the search index states the
	// number itself; false when only secondary sources do (AWS renders some
	// pricing tables client-side, so their stored text has no numbers).
	Confirmed bool     `json:"confirmed_on_aws_page"`
	Sources   []string `json:"sources"`
}

// pricesCheckedOn is when the prices below were looked up (search tool,
// stored copies of the pages).
const pricesCheckedOn = "2026-11-30"

// Keys into the price list.
const (
	priceDynamoWrite = "dynamodb_write_request_unit"
	priceDynamoRead  = "dynamodb_read_request_unit"
	priceTransition  = "stepfunctions_standard_state_transition"
	priceLambdaReq   = "lambda_request"
	priceLambdaGBs   = "lambda_arm64_gb_second"
	priceHTTPAPI     = "apigateway_http_api_request"
)

func prices() map[string]price {
	return map[string]price{
		priceDynamoWrite: {Item: "DynamoDB on-demand write request unit", USD: 0.625, Per: "million WRU",
			Effective: "2024-11-01 (50% on-demand price cut)", Confirmed: false, Sources: []string{
				"https://aws.amazon.com/dynamodb/pricing/on-demand/ (defines WRU/RRU; rate table not in stored text)",
				"https://airbyte.com/data-engineering-resources/dynamodb-pricing (2025-07-21: $0.625 per million WRU, US East)",
				"https://www.jusdb.com/blog/dynamodb-cost-optimization-a-comprehensive-guide-by-jusdb (2025-08-19: cut effective 2024-11-01)",
			}},
		priceDynamoRead: {Item: "DynamoDB on-demand read request unit", USD: 0.125, Per: "million RRU",
			Effective: "2024-11-01 (50% on-demand price cut)", Confirmed: false, Sources: []string{
				"https://aws.amazon.com/dynamodb/pricing/on-demand/ (defines RRU: strongly consistent read up to 4 KB = 1 RRU)",
				"https://airbyte.com/data-engineering-resources/dynamodb-pricing (2025-07-21: $0.125 per million RRU, US East)",
			}},
		priceTransition: {Item: "Step Functions Standard state transition", USD: 25, Per: "million transitions",
			Effective: "unchanged since at least 2020 ($0.025 per 1,000)", Confirmed: true, Sources: []string{
				"https://aws.amazon.com/step-functions/pricing/ (US East (N. Virginia) $0.0250 per 1,000 state transitions; retries count)",
			}},
		priceLambdaReq: {Item: "Lambda requests", USD: 0.20, Per: "million requests",
			Effective: "unchanged since launch", Confirmed: false, Sources: []string{
				"https://aws.amazon.com/lambda/pricing/ (rate table rendered client-side; not in stored text)",
				"https://cloudchipr.com/blog/aws-lambda-pricing (2024 guide, US East (N. Virginia))",
			}},
		priceLambdaGBs: {Item: "Lambda duration, arm64, first 7.5 billion GB-s/month", USD: 13.3334, Per: "million GB-seconds",
			Effective: "arm64 price since 2021-09; tiers since 2022-08", Confirmed: false, Sources: []string{
				"https://aws.amazon.com/blogs/compute/introducing-tiered-pricing-for-aws-lambda/ (arm64 tiers: 0–7.5 billion GB-s at the base price)",
				"https://cloudchipr.com/blog/aws-lambda-pricing (ARM first 7.5 billion GB-s: $0.0000133334 per GB-second)",
			}},
		priceHTTPAPI: {Item: "API Gateway HTTP API requests, first 300 million/month", USD: 1.00, Per: "million requests",
			Effective: "since HTTP APIs launched (2019-12)", Confirmed: true, Sources: []string{
				"https://aws.amazon.com/cn/about-aws/whats-new/2019/12/amazon-api-gateway-offers-faster-cheaper-simpler-apis-using-http-apis-preview (AWS: from $1.00 per million requests, us-east-1)",
				"https://aws.amazon.com/api-gateway/pricing/ (rate table rendered client-side; not in stored text)",
				"https://awsforengineers.com/blog/aws-api-gateway-pricing-explained (2025-05-19: $1.00 per million, first 300M)",
			}},
	}
}

// lambdaMemoryGB is the memory of every function the bench prices
// (deploy.Functions, which infra/stack deploys: 256 MB; the stream
// function, which no bench row runs, has less); a test keeps them equal.
const lambdaMemoryGB = 0.25

// deployedCallTimeout is how long the deployed run function waits on a
// silent provider.
const deployedCallTimeout = deploy.CallTimeout

// costRow is the AWS cost of a million jobs of one scenario.
type costRow struct {
	Scenario string `json:"scenario"`
	// USD per million jobs, by service.
	DynamoDB      float64 `json:"dynamodb"`
	StepFunctions float64 `json:"step_functions"`
	LambdaReq     float64 `json:"lambda_requests"`
	LambdaGBs     float64 `json:"lambda_duration"`
	APIGateway    float64 `json:"api_gateway"`
	Total         float64 `json:"total"`
	// RatioToHappy is this scenario's total over the happy path's.
	RatioToHappy float64 `json:"ratio_to_happy_path"`
	Note         string  `json:"note,omitempty"`
}

// costOf prices one scenario: a price per million units times units per job
// is dollars per million jobs.
func costOf(p perJob, pr map[string]price) costRow {
	// dynalite ignores ReturnValuesOnConditionCheckFailure, so the store
	// reads the item back after each failed condition; DynamoDB returns it
	// with the failure. Drop those reads (1 RRU each) from the AWS bill.
	reads := max(0, p.ReadUnits-p.ReadBacks)
	c := costRow{
		Scenario:      p.Scenario,
		DynamoDB:      reads*pr[priceDynamoRead].USD + (p.WriteUnits+p.IndexWriteUnits)*pr[priceDynamoWrite].USD,
		StepFunctions: p.StateTransitions * pr[priceTransition].USD,
		LambdaReq:     p.lambdaInvocations() * pr[priceLambdaReq].USD,
		LambdaGBs:     p.lambdaGBSeconds(lambdaMemoryGB) * pr[priceLambdaGBs].USD,
		APIGateway:    p.APIRequests * pr[priceHTTPAPI].USD,
	}
	c.Total = c.DynamoDB + c.StepFunctions + c.LambdaReq + c.LambdaGBs + c.APIGateway
	return c
}

// costs prices every scenario and adds the unknown scenario as deployed:
// the run function keeps waiting on the silent provider for the deployed
// call timeout, not the bench's.
func costs(rows []perJob, pr map[string]price) []costRow {
	var out []costRow
	var happy float64
	for _, p := range rows {
		c := costOf(p, pr)
		if p.Scenario == "happy path" {
			happy = c.Total
		}
		out = append(out, c)
		if p.Scenario == "unknown then resolved" {
			deployed := p
			deployed.LambdaBilledMS = map[string]float64{}
			for k, v := range p.LambdaBilledMS {
				deployed.LambdaBilledMS[k] = v
			}
			extra := float64((deployedCallTimeout - benchCallTimeout).Milliseconds())
			deployed.LambdaBilledMS[deploy.FnRun] += extra
			d := costOf(deployed, pr)
			d.Scenario = p.Scenario + " (deployed)"
			d.Note = "run function waits the deployed 4 min call timeout on the silent provider instead of the bench's 5 s"
			out = append(out, d)
		}
	}
	for i := range out {
		out[i].RatioToHappy = ratio(out[i].Total, happy)
		out[i].DynamoDB = round2(out[i].DynamoDB)
		out[i].StepFunctions = round2(out[i].StepFunctions)
		out[i].LambdaReq = round2(out[i].LambdaReq)
		out[i].LambdaGBs = round2(out[i].LambdaGBs)
		out[i].APIGateway = round2(out[i].APIGateway)
		out[i].Total = round2(out[i].Total)
	}
	return out
}
