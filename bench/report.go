package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func printReport(w io.Writer, r report) {
	fmt.Fprintf(w, "onejob bench — %s, %v/%v, %v CPUs, %v, node %v\n", r.GeneratedAt, r.Host["goos"], r.Host["goarch"],
		r.Host["cpus"], r.Host["go"], r.Host["node"])
	if r.Throttling != nil && r.Throttling.Failed != "" {
		fmt.Fprintf(w, "FAILED: throttling drill: %s (its figures below are of what it saw)\n", r.Throttling.Failed)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED: %s: %s (its tables are missing or partial)\n", f.Section, f.Error)
	}

	if len(r.Throughput) > 0 {
		printThroughput(w, r)
	}
	if len(r.PerJob) > 0 {
		printPerJob(w, r)
	}

	if len(r.Tracing) > 0 {
		printTracing(w, r.Tracing)
	}

	if d := r.Throttling; d != nil {
		printThrottling(w, *d)
	}

	if len(r.CostPerMillionJobs) > 0 {
		printCost(w, r)
	}

	if len(r.Functions) > 0 {
		section(w, "Functions: size (make build, linux/arm64) and cold init under aws-lambda-rie (host-arch build), medians")
		tw := table(w)
		fmt.Fprintln(tw, "function\tarm64 bytes\t×empty\tamd64 bytes\tcold start ms\t×empty\tinit ms\t×empty\tfirst invoke ms\twarm invoke ms\t")
		for _, f := range r.Functions {
			arm := "missing (run make build)"
			if f.ARM64Bytes > 0 {
				arm = fmt.Sprintf("%d", f.ARM64Bytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%d\t%.1f\t%.2f\t%.1f\t%.2f\t%.2f\t%.2f\t\n", f.Name, arm, f.SizeRatio, f.AMD64Bytes,
				f.ColdMS, f.ColdRatio, f.InitMS, f.InitRatio, f.FirstMS, f.WarmMS)
		}
		tw.Flush()
	}

	section(w, "Notes")
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

func printThroughput(w io.Writer, r report) {
	section(w, "POST /v1/jobs vs dynalite conditional PutItem of the same job item, same concurrency (closed loop)")
	tw := table(w)
	fmt.Fprintln(tw, "clients\tstarter\tPutItem/s\tp50 ms\tp99 ms\tAPI/s\tp50 ms\tp99 ms\tthroughput ×PutItem\tp50 ×PutItem\tp99 ×PutItem\tdrain after\t")
	for _, t := range r.Throughput {
		drain := "-"
		if t.Drain != nil {
			drain = t.Drain.String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.2f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", t.Concurrency, t.Starter,
			t.Raw.PerSecond, t.Raw.P50Millis, t.Raw.P99Millis, t.API.PerSecond, t.API.P50Millis, t.API.P99Millis,
			t.ThroughputRatio, t.P50Ratio, t.P99Ratio, drain)
	}
	tw.Flush()

	section(w, "Idempotency storm: N concurrent creates with one key vs N with distinct keys")
	tw = table(w)
	fmt.Fprintln(tw, "starter\trequests\tdistinct keys s\tsame key s\tsame ×distinct\t201\t200 replayed\tjob IDs\terrors\tStartExecution accepted (same key)\tdrain after\t")
	for _, s := range r.Storms {
		drain := "-"
		if s.Drain != nil {
			drain = s.Drain.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%s\t\n", s.Starter, s.Requests, s.DistinctSeconds,
			s.SameKeySeconds, s.Ratio, s.Created, s.Replayed, s.JobIDs, s.Errors, s.StartExecutionCalls, drain)
	}
	tw.Flush()

	if len(r.Bodies) > 0 {
		section(w, "Worst-case create bodies vs a plain create padded to 256 KiB (sequential, alternating rounds)")
		tw = table(w)
		fmt.Fprintln(tw, "body\tbytes\tanswered\tmean ms\t×plain\tjobs written\t")
		for _, b := range r.Bodies {
			answered := fmt.Sprint(b.Status)
			if b.Code != "" {
				answered += " " + b.Code
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.2f\t%d\t\n", b.Body, b.Bytes, answered, b.Millis, b.Ratio, b.Written)
		}
		tw.Flush()
	}
}

func printPerJob(w io.Writer, r report) {
	section(w, "Per job (averages): DynamoDB, Step Functions, Lambda, API Gateway")
	tw := table(w)
	fmt.Fprintln(tw, "scenario\tjobs\tDDB requests\tby operation\tRRU\tWRU\t+index WRU\tcond. failed\ttransitions\tLambda invocations\tLambda billed ms\tAPI requests\t")
	for _, p := range r.PerJob {
		var ops []string
		for _, k := range sortedKeys(p.DynamoByOp) {
			ops = append(ops, fmt.Sprintf("%s %.4g", k, p.DynamoByOp[k]))
		}
		var inv, billed []string
		for _, k := range sortedKeys(p.LambdaInvocations) {
			inv = append(inv, fmt.Sprintf("%s %.3g", k, p.LambdaInvocations[k]))
			billed = append(billed, fmt.Sprintf("%s %.0f", k, p.LambdaBilledMS[k]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.0f\t\n", p.Scenario, p.Jobs, p.DynamoRequests,
			strings.Join(ops, ", "), p.ReadUnits, p.WriteUnits, p.IndexWriteUnits, p.CondFailed, p.StateTransitions,
			strings.Join(inv, ", "), strings.Join(billed, ", "), p.APIRequests)
	}
	tw.Flush()

	// Issue 28: webhook events, by the schedule alone and handed off.
	costOf := map[string]float64{}
	for _, c := range r.CostPerMillionJobs {
		costOf[c.Scenario] = c.Total
	}
	section(w, "Webhook events: first try after the job's end, and cost per delivered event (the row less the same jobs without an endpoint)")
	tw = table(w)
	fmt.Fprintln(tw, "scenario\tfirst try p50 ms\tp99 ms\tUSD per million events\t")
	for _, p := range r.PerJob {
		if p.FirstTryP50MS == 0 && p.FirstTryP99MS == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t\n", p.Scenario, p.FirstTryP50MS, p.FirstTryP99MS,
			costOf[p.Scenario]-costOf["happy path, quotas on"])
	}
	tw.Flush()

	if b := r.Baseline; b != nil {
		section(w, "Per job against the previous layout ("+b.Layout+"; "+b.Measured+")")
		tw = table(w)
		fmt.Fprintln(tw, "scenario\ttransitions\tDDB requests\tLambda invocations\tUSD per million jobs\t")
		cost := map[string]float64{}
		for _, c := range r.CostPerMillionJobs {
			cost[c.Scenario] = c.Total
		}
		for _, p := range r.PerJob {
			was := b.PerJob[p.Scenario]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", p.Scenario, change(was.StateTransitions, p.StateTransitions),
				change(was.DynamoRequests, p.DynamoRequests), change(was.LambdaInvocations, p.lambdaInvocations()),
				change(was.CostPerMillion, cost[p.Scenario]))
		}
		tw.Flush()
	}
}

func printCost(w io.Writer, r report) {
	section(w, "Prices used (us-east-1, on-demand, first tier; looked up "+r.PricesCheckedOn+")")
	tw := table(w)
	fmt.Fprintln(tw, "item\tUSD\tper\teffective\tnumber on an AWS page\tsource\t")
	for _, k := range sortedKeys(r.Prices) {
		p := r.Prices[k]
		conf := "no (secondary sources; UNCONFIRMED on aws.amazon.com)"
		if p.Confirmed {
			conf = "yes"
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%s\t\n", p.Item, p.USD, p.Per, p.Effective, conf, p.Sources[0])
	}
	tw.Flush()

	section(w, "AWS cost per million jobs (USD) implied by the per-job counts")
	tw = table(w)
	fmt.Fprintln(tw, "scenario\tDynamoDB\tStep Functions\tLambda requests\tLambda duration\tAPI Gateway\ttotal\t×happy path\t")
	for _, c := range r.CostPerMillionJobs {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.Scenario, c.DynamoDB, c.StepFunctions,
			c.LambdaReq, c.LambdaGBs, c.APIGateway, c.Total, c.RatioToHappy)
	}
	tw.Flush()

	if r.LongJobs != nil {
		printLongJobs(w, *r.LongJobs)
	}

	section(w, "Waiting for a job over 20 s: one held GET (Prefer: wait=20) vs polling; USD per million 20-second windows")
	tw = table(w)
	fmt.Fprintln(tw, "mode\tAPI requests\tLambda billed ms\tDDB reads\tRRU\tAPI Gateway\tLambda requests\tLambda duration\tDynamoDB\ttotal\t×held\tchange seen within ms\t")
	for _, x := range r.WaitVsPoll {
		c := x.CostPerMillion
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t\n", x.Mode, x.APIRequests, x.LambdaBilledMS,
			x.DynamoReads, x.ReadUnits, c.APIGateway, c.LambdaReq, c.LambdaGBs, c.DynamoDB, c.Total, x.RatioToHeld, x.LatencyAtMostMS)
	}
	tw.Flush()
}

func printThrottling(w io.Writer, d throttleDrill) {
	title := fmt.Sprintf("Starts under throttling: %d creates (%d clients) while %.0f%% of StartExecution calls are throttled",
		d.Jobs, d.Concurrency, 100*d.ThrottleShare)
	if d.Failed != "" {
		title += " — FAILED: " + d.Failed
	}
	section(w, title)
	tw := table(w)
	fmt.Fprintln(tw, "settled\tstarted\tstarted twice\tsucceeded\tthrottled calls\thanded off\tstarted by hand-off\tby sweep\tcreate→start p50 ms\tp99 ms\tmax ms\tcreate p99 ms\tlocal sweep\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\tevery %s, grace %s\t\n", d.Settled, d.Started,
		d.StartedTwice, d.Succeeded, d.ThrottledStarts, d.HandedOff, d.ByHandoff, d.BySweeper, d.P50Millis, d.P99Millis, d.MaxMillis,
		d.CreateP99MS, d.SweepInterval, d.SweepGrace)
	tw.Flush()
	fmt.Fprintf(w, "baseline (the same burst just before, nothing throttled): create→start p50 %.1f ms, p99 %.1f ms, max %.1f ms; drill p99 ×baseline %.2f\n",
		d.BaselineP50Millis, d.BaselineP99Millis, d.BaselineMaxMillis, d.P99Ratio)
	if d.HandedOff > 0 {
		fmt.Fprintf(w, "a hand-off: the sweeper function billed %.0f ms; USD %.2f per million handed-off jobs (its invocation, that time at 256 MB, one read); jobs started by the API pay nothing\n",
			d.HandoffBilledMS, d.HandoffUSDPerMillion)
	}
	if len(d.Slowest) > 0 {
		var slow []string
		for _, x := range d.Slowest[:min(len(d.Slowest), 5)] {
			slow = append(slow, fmt.Sprintf("%.0f ms (%s)", x.DelayMS, x.By))
		}
		fmt.Fprintf(w, "slowest starts: %s\n", strings.Join(slow, ", "))
	}
}

func section(w io.Writer, title string) {
	fmt.Fprintf(w, "\n== %s\n", title)
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func (d drained) String() string {
	s := fmt.Sprintf("%.1f s", d.Seconds)
	if d.Stuck > 0 || d.Unknown > 0 {
		s += fmt.Sprintf(" (%d stuck, %d jobs unknown)", d.Stuck, d.Unknown)
	}
	return s
}
