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
//   - a timing adversary at the ClockMargin boundary delivers answers late
//     after S3 stamped their Date, spreads the servers' clocks, freezes a
//     whole process (its requests, handlers and timers) across a lease's
//     deadline, and applies writes after their client was told they failed
//     (see Params for the limits, which are those the library documents);
//   - workers crash (their client is cut for good and their handlers die)
//     or are stopped gracefully, some with a Stop deadline of seconds, and
//     are replaced by new ones; some serve only some of the task types;
//   - operators create and submit tasks (a third with idempotency keys,
//     some of them reused; some scheduled seconds, minutes, hours or days
//     ahead) and race Cancel, Retry, Schedule and Purge against the
//     workers;
//   - some worlds plant unreadable records at the head of the queue, or a
//     burst of tasks longer than a listing page, or last four hours, in
//     which the reconciler's lease changes hands and markers are deleted
//     behind the fleet's back, among them those of tasks waiting for a
//     start over two reconciler intervals after they were created; in
//     those long runs the moves of old tasks' far starts are struck: after
//     S3 applied the Schedule's record write the operator is cut off, and
//     half the time the answer is lost and its requests then hang past the
//     call's rereads, so that the old marker, due days ahead, stays behind
//     for the reconciler's watch to remove;
//   - handlers take from a second to a few minutes, succeed with or without
//     an output, fail, fail for good, ask for a later retry, panic, ignore
//     their context for a while, or try to write an output after it ended;
//   - OnTerminal hooks succeed, fail, fail for a long while, or are slow
//     (some ignoring their context);
//   - in half the worlds a pauser pauses task types (Store.Pause) and
//     resumes them at random moments, at most two at once, while the
//     operators' Submits announce new tasks in the same wake object,
//     which the adversary crowds (3 in 10 of its conditional writes
//     refused with a 409) so that Pauses and Resumes fall back to the
//     blind write now and then; at the end of the turbulence it resumes
//     them all;
//   - in a quarter of the worlds, a rush: four more operator processes
//     each submit four tasks at one moment, from four goroutines on the
//     process's one Store, sixteen Submits racing for the wake object;
//     every Submit that returns success must have had its task announced
//     by its process, whatever the others wrote (checkAnnounced);
//   - in a quarter of the worlds (none of them long), a tidier purges
//     every finished task as soon as Purge allows it, every one to four
//     seconds, while one output write in five lands up to MaxZombieDelay
//     after its worker was told it failed: no output may come back into
//     a folder Purge emptied (checkCompletion counts its writes);
//   - in a quarter of the worlds, periodic tasks (StoreOptions.Periodic):
//     one every 2 to 6 minutes, skipped when later than its Within or run
//     once however late, and in half of them a daily one in a time zone
//     east of UTC; the reconciler runs every 2 to 5 minutes, so that its
//     lease, and with it the making of the runs, moves as the adversary
//     crashes, stops, freezes and cuts off its holders, while clocks are
//     skewed and answers lost; each period must have exactly one run, in
//     the time its policy allows, whenever a holder was up
//     (checkPeriodic);
//   - in a third of the worlds the workers are fed S3 event notifications
//     of what S3 applied (Worker.Notify), lost, repeated, late by up to a
//     minute and so out of order, to every worker or to one; half of
//     those workers poll only every MaxPollInterval and must start a task
//     they are told of within the pickup bound; in half of those worlds a
//     partner puts files under incoming/ (new ones, new versions,
//     deletions, the same bytes put back, files that vanish between an
//     ingest's look and its copy, names longer than a task's, and events
//     for files that never existed) while two Ingesters, restarted now and
//     then (and after purges of what they made), fed the same events and
//     sweeping, and two direct callers of Ingest must make exactly one
//     submitted task of each version that stays, in time, through a
//     brownout of S3 longer than two sweeps;
//   - an impatient operator cancels the longest runs (one in thirty, of
//     five to eight minutes) while they run, its change held up for
//     minutes while the worker renews its lease more times than the
//     record keeps revisions of: the Cancel must settle its doubt itself;
//   - in one world in six, functions run beside the fleet as on AWS
//     Lambda: chains of short invocations, each stopped after a minute or
//     two, the only workers of type "c", some of whose tasks are longer
//     than any invocation and must fail for timeout at the give-back past
//     the release limit; once the turbulence ends, two chains invoke one
//     function after the other, as a backlog scales a function up.
//
// [Check] is a pure function of the [History] and returns every
// [Violation] it finds; see the Kind constants for what is checked.
//
// A seed replays exactly ([History.Encode] gives the same bytes): the
// world's decisions come from PCG generators seeded from the seed, each
// request's from what it is and when it is sent, the library's through
// internal/entropy, keyed by what each draw is for; and every request
// takes a moment of its own, so that nothing two goroutines do at the same
// instant of virtual time is ordered by the Go scheduler; and the fleet is
// stopped a moment after the run's last instant, so that nothing due at
// that instant races with the stop. Each process's
// Store also reports the branches of internal/probe it takes
// (History.Reached); [Required] lists those a run of many seeds must
// reach.
//
// The root package's TestSimulation runs it:
//
//	go test -run 'TestSimulation$' -v .                  # seeds 1..200, about 70 task lives each
//	go test -run 'TestSimulation$' -sim.seed=17 -v .     # replay one seed
//	go test -run 'TestSimulation$' -sim.seed=17 -sim.trace=all -sim.requests -v .  # and tell the story of its tasks
//	go test -run 'TestSimulation$' -sim.seeds=7150 -sim.from=7151 -timeout 0 .     # one shard of a soak
//
// [Trace] writes everything the history holds about one task.
package sim
