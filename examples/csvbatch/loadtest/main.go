// Command loadtest puts csvbatch under load against a real S3 server
// (versitygw) on this machine and reports what it saw.
//
//	go run ./examples/csvbatch/loadtest -clients 8 -duration 30s
//	go run ./examples/csvbatch/loadtest -clients 64 -duration 30s -stall 10s
//
// It builds csvbatch into a temporary folder, starts versitygw on
// 127.0.0.1 with a fresh bucket, puts a counting reverse proxy in front of
// it, and starts three csvbatch processes that talk to S3 through that
// proxy: one API (-mode api) and two workers (-mode worker). Then -clients
// clients each loop the whole flow for -duration: create a csv_enrich task,
// upload a generated CSV of -rows rows with the presigned PUT, submit, poll
// until the task is finished, fetch the presigned download and compare the
// output with what it must be. When the time is up no new flow starts; the
// ones under way get -drain to finish.
//
// With -stall D, S3 stops answering for D in the middle of the run: by
// default versitygw is stopped with SIGSTOP and resumed with SIGCONT (the
// scenario of a store that hangs); -stall-mode proxy makes the proxy hold
// new requests instead. Clients treat 503 s3_unavailable as the API says
// (wait Retry-After, read before repeating a change) and count it apart
// from errors.
//
// At the end every task in the bucket is read back through the library and
// checked: completed, with the output the client verified, and completed
// once (the workers' completion counters add up to the number of tasks).
//
// The report gives tasks per second, the latency of each API endpoint and
// of the S3 transfers (p50, p99, max), errors by kind (the goal is none),
// the API process's resident memory before and after the load, and the S3
// requests per task, by who sent them and what they were. -json prints the
// same as JSON.
//
// Everything listens on 127.0.0.1 and everything started is stopped at the
// end, also on Ctrl-C. versitygw is found as internal/s3test says:
// $S3TASK_VERSITYGW_BIN, versitygw on PATH, or .cache/bin/versitygw.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, asJSON, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg.Progress = stderr
	res, err := Run(ctx, cfg)
	if res != nil {
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(res); jerr != nil {
				return jerr
			}
		} else {
			res.WriteTable(stdout)
		}
	}
	if err != nil {
		return err
	}
	if n := res.ErrorCount(); n > 0 {
		return fmt.Errorf("%d errors (see the report)", n)
	}
	return nil
}

func parseFlags(args []string, out io.Writer) (Config, bool, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent `clients`, each looping the whole flow")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long clients start new flows")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "how long the flows under way at the end may take to finish")
	fs.DurationVar(&cfg.Stall, "stall", cfg.Stall, "stop S3 answering for this `long` in the middle of the run (0: no stall)")
	fs.StringVar(&cfg.StallMode, "stall-mode", cfg.StallMode, "how to stall S3: `stop` (SIGSTOP/SIGCONT versitygw) or proxy (the proxy holds new requests)")
	fs.IntVar(&cfg.Rows, "rows", cfg.Rows, "data `rows` of each generated CSV")
	fs.DurationVar(&cfg.PollInterval, "poll", cfg.PollInterval, "how often a client reads its task while it waits")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "before the load, count the S3 requests of the idle processes this `long` (0: skip)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker `processes`")
	fs.IntVar(&cfg.WorkerConcurrency, "worker-concurrency", cfg.WorkerConcurrency, "csvbatch -concurrency of each worker (0: csvbatch's default)")
	fs.StringVar(&cfg.Csvbatch, "csvbatch", "", "use this csvbatch `binary` instead of building one")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary folder (logs, versitygw's data) and print its path")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: loadtest [flags]\n\n"+
			"Runs csvbatch (one API, workers) against versitygw on 127.0.0.1 under\n"+
			"concurrent clients and reports throughput, latency, errors, memory and\n"+
			"S3 requests per task.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, *asJSON, cfg.validate()
}

// since rounds a duration for progress lines.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
