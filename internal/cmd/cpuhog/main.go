// Command cpuhog keeps CPU cores busy, so that anyone can run the tests on
// a machine as loaded as a shared CI runner or a laptop mid-build, where
// the scheduler may leave a goroutine waiting for tens of milliseconds and a
// test that hopes something happens "soon" fails.
//
// It starts -n goroutines (default: one per core) that each spin without
// pause, and runs until it is stopped (SIGINT, SIGTERM), until -d has
// passed if -d is set, or until the process that started it goes away, so
// that a hog started in the background of a script or by `go run` does not
// outlive them. Typical use, both cores of a 2-core machine busy while the
// root package's tests run:
//
//	go build -o /tmp/cpuhog ./internal/cmd/cpuhog
//	/tmp/cpuhog -n 2 & hog=$!
//	go test -race -count=1 .
//	kill $hog
//
// or, with a bound instead of a kill: go run ./internal/cmd/cpuhog -n 2 -d 15m &
//
// Each goroutine holds an OS thread of its own and runs at the normal
// priority, so it competes for the cores as another build would. The hog
// prints one line when it starts and one when it stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", runtime.NumCPU(), "how many cores to keep busy (goroutines that spin, each on a thread of its own)")
	d := flag.Duration("d", 0, "stop after this long (0: run until stopped)")
	flag.Parse()
	if *n < 1 || *d < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: cpuhog [-n cores] [-d duration]: -n at least 1, -d not negative, no arguments")
		os.Exit(2)
	}
	// The spinners, the clock and the signal handling each need a thread.
	runtime.GOMAXPROCS(*n + 1)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, *d, fmt.Errorf("-d %s passed", *d))
		defer cancel()
	}
	ctx, orphaned := context.WithCancelCause(ctx)
	go watchParent(ctx, orphaned)

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
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		why = err.Error()
	}
	fmt.Fprintf(os.Stderr, "cpuhog: %s after %s, %d spins\n", why, time.Since(start).Round(time.Millisecond), spins.Load())
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
func watchParent(ctx context.Context, orphaned context.CancelCauseFunc) {
	parent := os.Getppid()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if os.Getppid() != parent {
				orphaned(fmt.Errorf("parent process %d gone", parent))
				return
			}
		}
	}
}
