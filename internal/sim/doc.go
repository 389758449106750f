// Package sim is a deterministic simulation of the whole s3task protocol:
// a fleet of workers and operators sharing one in-process S3 bucket
// ([s3test.Memory]) under a seeded adversary, with virtual time, a recorded
// history of everything that happened, and a checker that finds the
// violations of the design's guarantees in that history.
//
// [Run] plays one seed. It must be called inside a testing/synctest bubble
// (synctest.Test), where time.Now, timers and sleeps are virtual: an hour of
// leases, heartbeats and polls takes well under a second. Every worker runs
// with the production default WorkerOptions and StoreOptions; only the
// clock (a per-process skew), the logger, the hooks and the world around
// them are simulated:
//
//   - each process has its own S3 client whose transport tags its requests
//     with the process name and lets the adversary lose answers after the
//     write was applied, make up 500, 503 and 409 answers, add latency, pause
//     the process (its requests hang) or cut it off for a few seconds;
//   - workers crash (their client is cut for good and their handlers die)
//     or are stopped gracefully, and are replaced by new ones;
//   - operators create and submit tasks and race Cancel, Retry and Purge
//     against the workers;
//   - handlers take from a second to a few minutes, succeed with or without
//     an output, fail, fail for good, ask for a later retry, panic, ignore
//     their context for a while, or try to write an output after it ended;
//   - OnTerminal hooks succeed, fail, fail for a long while, or are slow.
//
// [Check] is a pure function of the [History] and returns every
// [Violation] it finds; see the Kind constants for what is checked. The
// decisions of the world come from math/rand/v2 PCG generators seeded from
// the seed, one per process, so a seed replays the same world as far as the
// scheduler and the library's own randomness allow.
//
// The root package's TestSimulation runs it:
//
//	go test -run 'TestSimulation$' -v .                  # seeds 1..200, 50 task lives each
//	go test -run 'TestSimulation$' -sim.seed=17 -v .     # replay one seed
//	go test -run 'TestSimulation$' -sim.seed=17 -sim.trace=all -v .   # and tell the story of its tasks
//	S3TASK_SIM_SOAK=1000000 go test -run 'TestSimulation$' -timeout 0 .  # a long soak
//
// [Trace] writes everything the history holds about one task.
package sim
