package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/s3client"
)

// defaultTimeout bounds every command but watch unless -timeout says
// otherwise.
const defaultTimeout = time.Minute

// settings are the flags every command takes, before or after its name.
type settings struct {
	bucket  string
	s3      s3client.Config
	prefix  string
	json    bool
	timeout time.Duration
}

// register adds the settings to fs with their current values as defaults,
// so a second FlagSet (the command's) keeps what the first one parsed.
func (s *settings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.bucket, "bucket", s.bucket, "the `bucket` holding the tasks (required)")
	s.s3.RegisterFlags(fs)
	fs.StringVar(&s.prefix, "prefix", s.prefix, "key `prefix` of the tasks in the bucket")
	fs.BoolVar(&s.json, "json", s.json, "print one JSON document instead of tables (errors too: {\"error\": {...}})")
	fs.DurationVar(&s.timeout, "timeout", s.timeout, "give up after this `duration` (watch: default no limit)")
}

// envPrefixes name the environment variables that set a flag, in order of
// precedence: S3TASKCTL_BUCKET, then CSVBATCH_BUCKET, so the environment
// of a csvbatch deployment works as it is. A flag on the command line wins
// over both.
var envPrefixes = []string{"S3TASKCTL_", "CSVBATCH_"}

// fromEnv sets every flag of fs that is not yet set on the command line
// from the environment.
func fromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		for _, p := range envPrefixes {
			name := p + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			v, ok := lookup(name)
			if !ok || err != nil {
				continue
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				err = usageErr(fmt.Errorf("environment variable %s=%q: %w", name, v, serr))
			}
			return
		}
	})
	return err
}

// cli is one run of the command.
type cli struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	set            settings
	timeoutSet     bool // -timeout given, on the command line or in the environment
	// periodic are the fleet's periodic tasks, as the periodics command's
	// -periodic declares them, for the Store open makes.
	periodic []s3task.Periodic

	client   *s3.Client
	store    *s3task.Store
	endpoint string // for check's report; "" means AWS
}

// command is a subcommand.
type command struct {
	name     string
	synopsis string   // arguments and flags, for the usage line
	summary  string   // one line for the command list
	help     string   // what the command does, for its -h
	args     []string // names of the positional arguments it takes
	// variadic: the command takes any number of its one argument, zero
	// included ("retry ID..."); each is checked as args are.
	variadic bool
	// setup registers the command's flags and returns what runs it with
	// the positional arguments once they are parsed.
	setup func(fs *flag.FlagSet) runFunc
}

type runFunc func(ctx context.Context, c *cli, args []string) error

var commands []*command // filled in by init in commands.go

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// errHelp is returned after -h printed the usage: exit 0.
var errHelp = errors.New("help requested")

// run is the whole program: it parses args, runs the command, prints its
// result to stdout and problems to stderr, and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, stdout, stderr, os.LookupEnv)
}

func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	return newCLI(stdout, stderr, lookup).run(ctx, args)
}

func newCLI(stdout, stderr io.Writer, lookup func(string) (string, bool)) *cli {
	return &cli{stdout: stdout, stderr: stderr, lookupEnv: lookup,
		set: settings{prefix: s3task.DefaultPrefix, timeout: defaultTimeout}}
}

// run runs the command args and returns its exit code.
func (c *cli) run(ctx context.Context, args []string) int { return c.finish(c.dispatch(ctx, args)) }

func (c *cli) dispatch(ctx context.Context, args []string) error {
	fs := c.flagSet("s3taskctl")
	if err := fromEnv(fs, c.lookupEnv); err != nil {
		return err
	}
	if err := c.parse(fs, args, false); err != nil {
		if errors.Is(err, errHelp) {
			c.usage(c.stdout)
		}
		return err
	}
	if fs.NArg() == 0 {
		c.usage(c.stderr)
		return &cmdError{exit: exitUsage, code: "usage", err: errors.New("no command given"), quiet: true}
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		if len(rest) > 0 && lookupCommand(rest[0]) != nil {
			c.commandUsage(lookupCommand(rest[0]), c.stdout)
		} else {
			c.usage(c.stdout)
		}
		return nil
	}
	cmd := lookupCommand(name)
	if cmd == nil {
		_ = fs.Parse(rest) // only to honour a -json among the rest
		return usageErr(fmt.Errorf("unknown command %q (see s3taskctl -h)", name))
	}
	fs = c.flagSet(cmd.name)
	exec := cmd.setup(fs)
	pos, err := c.positional(fs, cmd, rest)
	if err != nil {
		return err
	}
	// watch follows a task for as long as it takes unless told otherwise.
	if (cmd.name != "watch" || c.timeoutSet) && c.set.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.set.timeout)
		defer cancel()
	}
	return exec(ctx, c, pos)
}

// flagSet returns a FlagSet with the settings registered. It prints
// nothing itself: finish reports errors and the callers print help.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by finish, help by usage
	fs.Usage = func() {}
	c.set.register(fs)
	return fs
}

// parse parses args into fs. With interspersed, flags may follow
// positional arguments ("show ID -json"); the positional ones are left in
// fs.Args().
func (c *cli) parse(fs *flag.FlagSet, args []string, interspersed bool) error {
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return errHelp
		case err != nil:
			return usageErr(err)
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "timeout" {
				c.timeoutSet = true
			}
		})
		if !interspersed || fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if interspersed {
		// Leave the positional arguments where callers look for them.
		_ = fs.Parse(append([]string{"--"}, pos...))
	}
	return nil
}

// positional parses a command's flags and returns its positional
// arguments, exactly as many as it takes, or a usage error naming them.
func (c *cli) positional(fs *flag.FlagSet, cmd *command, args []string) ([]string, error) {
	names := cmd.args
	if err := c.parse(fs, args, true); err != nil {
		if errors.Is(err, errHelp) {
			c.commandUsage(cmd, c.stdout)
		}
		return nil, err
	}
	if cmd.variadic {
		names = slices.Repeat(names, fs.NArg())
	}
	if fs.NArg() != len(names) {
		return nil, usageErr(fmt.Errorf("%s takes %d argument(s) (%s), got %d: usage: s3taskctl %s %s",
			cmd.name, len(names), strings.Join(names, ", "), fs.NArg(), cmd.name, cmd.synopsis))
	}
	// A task ID is checked here, before anything reaches the store.
	for i, name := range names {
		if name == "ID" {
			if err := s3task.ParseID(fs.Arg(i)); err != nil {
				return nil, err
			}
		}
	}
	return fs.Args(), nil
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `Usage: s3taskctl [flags] <command> [command flags] [arguments]

See and repair the tasks of an s3task bucket.

Commands:
`)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
"s3taskctl <command> -h" (or "s3taskctl help <command>") describes one.

Flags, accepted before or after the command (-flag and --flag both work):
`)
	fs := flag.NewFlagSet("s3taskctl", flag.ContinueOnError)
	defaults := settings{prefix: s3task.DefaultPrefix, timeout: defaultTimeout}
	defaults.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Every flag can also be set in the environment: S3TASKCTL_<FLAG> (e.g.
S3TASKCTL_BUCKET, S3TASKCTL_S3_ENDPOINT), or else CSVBATCH_<FLAG>, so the
settings of a csvbatch deployment work unchanged. Credentials come from the
standard AWS configuration: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
AWS_PROFILE, instance roles.

`+exitCodes)
}

func (c *cli) commandUsage(cmd *command, w io.Writer) {
	fmt.Fprintf(w, "Usage: s3taskctl %s %s\n\n%s\n", cmd.name, cmd.synopsis, strings.TrimSpace(cmd.help))
	fmt.Fprint(w, "\nRun \"s3taskctl -h\" for the flags every command takes and the exit codes.\n")
}

// open builds the S3 client (see s3client) and the Store from the
// settings.
func (c *cli) open(ctx context.Context) (*s3task.Store, error) {
	if c.store != nil {
		return c.store, nil
	}
	if c.set.bucket == "" {
		return nil, usageErr(errors.New("no bucket: set -bucket or S3TASKCTL_BUCKET"))
	}
	cfg := c.set.s3
	cfg.LookupEnv = c.lookupEnv
	client, _, err := s3client.New(ctx, cfg)
	if err != nil {
		return nil, &cmdError{exit: exitUnavailable, code: "config", err: err}
	}
	if deadline, ok := ctx.Deadline(); ok {
		opts := client.Options()
		opts.APIOptions = append(opts.APIOptions, boundCalls(ctx, deadline))
		client = s3.New(opts)
	}
	opts := &s3task.StoreOptions{
		Prefix: c.set.prefix,
		Logger: slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if len(c.periodic) > 0 {
		// A periodic task's type takes no input, and the Store checks it:
		// this Store only reads their runs.
		opts.Periodic, opts.Files = c.periodic, map[string]s3task.FileOptions{}
		for _, p := range c.periodic {
			opts.Files[p.Params.Type] = s3task.FileOptions{NoInput: true}
		}
	}
	store, err := s3task.NewStore(client, c.set.bucket, opts)
	if err != nil {
		return nil, usageErr(err)
	}
	c.client, c.store, c.endpoint = client, store, s3client.Endpoint(client)
	return store, nil
}

// finish reports err and returns the exit code.
func (c *cli) finish(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	code, name := classify(err)
	var ce *cmdError
	quiet := errors.As(err, &ce) && ce.quiet
	documented := errors.As(err, &ce) && ce.documented
	if !quiet {
		fmt.Fprintf(c.stderr, "s3taskctl: %v\n", err)
		if code == exitUsage {
			fmt.Fprintln(c.stderr, "s3taskctl: run \"s3taskctl -h\" for usage")
		}
	}
	if c.set.json && !documented {
		c.writeJSON(map[string]errorBody{"error": {Code: name, Message: err.Error(), ExitCode: code}})
	}
	return code
}

func (c *cli) writeJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // stdout closed: nothing left to tell anyone
}

// parseAge reads a duration: Go's form ("36h", "90m") or whole days ("30d").
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 && n <= 100*365 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 36h, 90m or 30d", s)
	}
	return d, nil
}

// parseSince reads -since: a duration back from now, or an RFC 3339 time.
// Empty is the zero time (no limit).
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := parseAge(s); err == nil {
		if d <= 0 {
			return time.Time{}, errors.New("want a positive duration")
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errors.New("want a duration (24h, 7d) or an RFC 3339 time (2025-06-01T00:00:00Z)")
	}
	return t, nil
}

// boundCalls gives every S3 call of the client the command's deadline,
// whatever context the library makes the call with: a call made after
// cmd ended (the library gives some clean-ups a context of their own, as
// CheckBackend does its deletes) ends by the deadline too, so that
// -timeout bounds the whole command whatever S3 does. Each context it
// derives is released when cmd ends.
func boundCalls(cmd context.Context, deadline time.Time) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("s3taskctlDeadline",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				// Not cancelled when the call returns: a GetObject's body
				// is read after it.
				ctx, cancel := context.WithDeadline(ctx, deadline)
				context.AfterFunc(cmd, cancel)
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}
