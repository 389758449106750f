// Command cpuhog keeps CPU cores busy, so that anyone can run the tests on
// a machine as loaded as a shared CI runner or a laptop mid-build, where
// the scheduler may leave a goroutine waiting for tens of milliseconds and a
// test that hopes something happens "soon" fails.
//
// It starts -n goroutines (default: one per core) that each spin without
// pause, each on an OS thread of its own at the normal priority, so that
// they compete for the cores as another build would.
//
// Given a command after its flags, it runs the command while the cores are
// kept busy, stops spinning when the command exits, reports how long it
// took, and exits with the command's status. The root package's tests on a
// 2-core machine with both cores busy:
//
//	go run ./internal/cmd/cpuhog -n 2 -- go test -race -count=1 .
//
// and CI's whole test command, likewise:
//
//	go run ./internal/cmd/cpuhog -- go run ./internal/cmd/s3gw -- go test -race -count=1 -timeout 30m ./... ./examples/... ./s3taskotel/... ./s3tasknats/... ./s3tasklambda/...
//
// Without a command, it spins until it is stopped (SIGINT, SIGTERM), until
// -d has passed if -d is set, or until the process that started it goes
// away, so that a hog started in the background of a script or by `go
// run` does not outlive them:
//
//	go run ./internal/cmd/cpuhog -n 2 -d 15m &
//
// SIGINT or SIGTERM to a hog running a command are passed on to the
// command (SIGINT first: a go test then prints what it was running). The
// hog prints one line to stderr when it starts and one when it stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", runtime.NumCPU(), "how many cores to keep busy (goroutines that spin, each on a thread of its own)")
	d := flag.Duration("d", 0, "stop after this long (0: run until stopped, or until the command exits)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: cpuhog [-n cores] [-d duration] [--] [command [args...]]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *n < 1 || *d < 0 {
		fmt.Fprintln(os.Stderr, "cpuhog: -n must be at least 1 and -d not negative")
		flag.Usage()
		os.Exit(2)
	}
	// The spinners, the clock, the signals and the command's wait each
	// need a thread.
	runtime.GOMAXPROCS(*n + 1)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, *d, fmt.Errorf("-d %s passed", *d))
		defer cancel()
	}
	ctx, end := context.WithCancelCause(ctx)
	go watchParent(ctx, end)

	var cmd *exec.Cmd
	waited := make(chan struct{}) // closed once the command has exited
	if flag.NArg() > 0 {
		cmd = exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "cpuhog: %v\n", err)
			os.Exit(2)
		}
		go func() {
			err := cmd.Wait()
			close(waited)
			if err == nil {
				err = errCommandDone
			}
			end(fmt.Errorf("command %w", err))
		}()
	}

	fmt.Fprintf(os.Stderr, "cpuhog: %d spinning goroutines (pid %d)\n", *n, os.Getpid())
	start := time.Now()
	var (
		quit  atomic.Bool
		spins atomic.Uint64
		wg    sync.WaitGroup
	)
	for range *n {
		wg.Go(func() {
			runtime.LockOSThread()
			spins.Add(spin(&quit))
		})
	}
	<-ctx.Done()
	quit.Store(true)
	wg.Wait()
	why := "stopped"
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
		why = cause.Error()
	}
	if cmd != nil {
		// Stopped, or -d passed, while the command runs: it stops too.
		stopCommand(cmd, waited)
	}
	fmt.Fprintf(os.Stderr, "cpuhog: %s after %s, %d spins\n", why, time.Since(start).Round(time.Millisecond), spins.Load())
	if cmd != nil {
		code := cmd.ProcessState.ExitCode()
		if code < 0 { // killed by a signal
			code = 1
		}
		os.Exit(code)
	}
}

// errCommandDone is the cause of the end when the command exits with 0.
var errCommandDone = errors.New("exited with status 0")

// stopCommand returns once cmd has exited (waited is closed): if it runs
// still, it is interrupted, then terminated, then killed, 10 seconds
// apart.
func stopCommand(cmd *exec.Cmd, waited <-chan struct{}) {
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, os.Kill} {
		select {
		case <-waited:
			return
		default:
		}
		_ = cmd.Process.Signal(sig) // fails only if it has exited meanwhile
		select {
		case <-waited:
			return
		case <-time.After(10 * time.Second):
		}
	}
	<-waited
}

// spin does work the compiler cannot drop until quit is set, and returns
// how many rounds it did.
func spin(quit *atomic.Bool) uint64 {
	var rounds uint64
	x := uint64(88172645463325252)
	for !quit.Load() {
		for range 1 << 16 { // a xorshift, so each round is real work
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		rounds++
	}
	if x == 0 { // never: xorshift never reaches 0 from a non-zero seed
		rounds = 0
	}
	return rounds
}

// watchParent ends the hog, with a cause that says so, once the process
// that started it has gone (the hog is re-parented).
func watchParent(ctx context.Context, end context.CancelCauseFunc) {
	parent := os.Getppid()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if os.Getppid() != parent {
				end(fmt.Errorf("parent process %d gone", parent))
				return
			}
		}
	}
}
