package sim

import "time"

// Config describes the world of one run. Zero fields take the defaults
// given, some of them drawn from the seed.
type Config struct {
	// Seed selects the world; every random decision derives from it.
	Seed uint64
	// Tasks is how many task lives the operators start. Default 50.
	Tasks int
	// Workers is the size of the fleet, kept by replacing crashed and
	// stopped workers. Default: 2 or 3, from the seed; 2 more with a Burst.
	Workers int
	// Operators is how many operator processes create tasks and race
	// Cancel, Retry and Purge. Default 2.
	Operators int
	// Arrivals is the time over which task creations are spread. Default:
	// 6 to 10 minutes, from the seed.
	Arrivals time.Duration
	// Turbulence is how long after the last arrival operators keep
	// cancelling, retrying and purging and the adversary keeps crashing,
	// stopping and pausing processes. Default: 2 to 8 minutes, from the
	// seed.
	Turbulence time.Duration
	// Long spreads the arrivals over 4 hours, in which the fleet's
	// reconciler runs, renews its lease and hands it over, and, in the first
	// 90 minutes, the adversary deletes the markers of pending tasks for
	// Reconcile to restore; two more lives, created in the first minutes,
	// wait over three hours for their start and lose their markers once
	// they are older than two reconciler intervals. Some lives of its
	// first hour wait days ahead, untouched until the calm, when their
	// start is moved nearer and the far-move adversary strikes the move.
	// The first worker is never crashed or stopped, so that a holder lives
	// to renew. Default: one seed in 15.
	Long bool
	// Planted is how many unreadable records (corrupt JSON, or a schema
	// version from the future) are planted at the start, each with a
	// marker due at once, at the head of the queue. Default: none in three
	// seeds of four, 20 to 150 in the rest; negative: none.
	Planted int
	// Burst is how many more task lives are created within one minute, so
	// that more tasks are due than one listing page holds. Default: none in
	// six seeds of seven, 120 to 250 in the rest; negative: none.
	Burst int
	// Events feeds the workers S3 event notifications (Worker.Notify) of
	// every write and delete S3 applies: lost (one in ten), repeated,
	// delayed from a millisecond to a minute and so reordered, and handed
	// either to every live worker (a broker) or to one of them (a
	// webhook). Half of the workers then poll only every MaxPollInterval,
	// relying on the events (WorkerInfo.Events). Default: one seed in
	// three.
	Events bool
	// Ingest, in a world with Events, has a partner process put files
	// under incoming/ (new ones, new versions of them, deletions) and two
	// Ingesters, fed the same events and sweeping the folder every two
	// minutes, make tasks of them. Default: half the worlds with Events.
	Ingest bool
	// Pause has a pauser process pause and resume task types at random
	// moments (Store.Pause, Store.Resume) until the turbulence ends, then
	// resume them all. Default: half the worlds.
	Pause bool
	// Functions runs, beside the fleet, one or two functions as on AWS
	// Lambda: a chain of short invocations, each a fresh worker process
	// (WorkerOptions.ReleaseLimit = FunctionReleaseLimit, presence and
	// reconciler off) that runs for 30 seconds to 2 minutes and is then
	// stopped with a few seconds' grace, so that a task longer than an
	// invocation is given back, invocation after invocation, until the
	// limit fails it. The fleet does not serve type "c": its tasks are the
	// functions' alone. Default: one seed in six.
	Functions bool
	// Rush has four more operator processes each submit four tasks at one
	// moment of the arrivals, from four goroutines on the process's one
	// Store: sixteen Submits at once, whose announcements race for the
	// wake object. Default: a quarter of the worlds.
	Rush bool
	// Tidy has a tidier process purge every finished task as soon as
	// Purge allows it (cutoff: now), every 1 to 4 seconds until the
	// turbulence ends, while the adversary lets one output write in 5
	// land late, after its client was told it failed (a zombie): a write
	// that lands after Purge emptied the folder would leave an orphan.
	// Default: one seed in four, but for Long worlds.
	Tidy bool
	// Periodic declares periodic tasks (StoreOptions.Periodic) in every
	// process's Store: one of type "p" (declared without input, served by
	// every worker) every 2 to 6 minutes, made late by no more than 60 s
	// to half the period or, in half the worlds, run once however late;
	// and in half the worlds a daily one at a minute of the run's first
	// half hour, in a time zone east of UTC. The workers' reconciler runs
	// every 2 to 5 minutes, so that its lease, and the making of the runs,
	// moves from worker to worker as the adversary crashes, stops, pauses
	// and cuts them off. Default: one seed in four.
	Periodic bool
	// Cap is how long after the turbulence the run waits for every task to
	// finish before it reports the rest as stuck. Default 90 minutes, and
	// 20 seconds more per task of a Burst and per task over 50.
	Cap time.Duration
	// Faults scales the per-request fault and latency probabilities; 0
	// means 1, negative means none.
	Faults float64
	// NoChaos turns off crashes, stops, pauses and outages.
	NoChaos bool
	// Requests records every request in History.Requests, to read what a
	// process did between the writes.
	Requests bool
}

// withDefaults fills in the defaults, drawing from rng where the default
// depends on the seed.
func (c Config) withDefaults(rng *Rand) Config {
	if c.Tasks <= 0 {
		c.Tasks = 50
	}
	workers := 2 + rng.IntN(2)
	if c.Operators <= 0 {
		c.Operators = 2
	}
	long := rng.Chance(1.0 / 15)
	planted := rng.Chance(0.25)
	nPlanted := rng.IntN(131) + 20
	burst := rng.Chance(1.0 / 7)
	nBurst := rng.IntN(131) + 120
	c.Long = c.Long || long
	// Drawn apart, so that the worlds without events stay as they were.
	c.Events = c.Events || NewRand(c.Seed, "events").Chance(1.0/3)
	c.Ingest = c.Ingest || c.Events && NewRand(c.Seed, "ingest").Chance(0.5)
	c.Events = c.Events || c.Ingest
	c.Pause = c.Pause || NewRand(c.Seed, "pause").Chance(0.5)
	c.Functions = c.Functions || NewRand(c.Seed, "functions").Chance(1.0/6)
	c.Rush = c.Rush || NewRand(c.Seed, "rush").Chance(0.25)
	c.Periodic = c.Periodic || NewRand(c.Seed, "periodic").Chance(0.25)
	c.Tidy = c.Tidy || !c.Long && NewRand(c.Seed, "tidy").Chance(0.25)
	if c.Planted == 0 && planted {
		c.Planted = nPlanted
	}
	if c.Burst == 0 && burst {
		c.Burst = nBurst
	}
	c.Planted, c.Burst = max(c.Planted, 0), max(c.Burst, 0)
	if c.Workers <= 0 {
		c.Workers = workers
		if c.Burst > 0 {
			c.Workers += 2
		}
	}
	if c.Arrivals <= 0 {
		c.Arrivals = rng.Dur(6*time.Minute, 10*time.Minute)
		if c.Long {
			c.Arrivals = 4 * time.Hour
		}
	}
	if c.Turbulence <= 0 {
		c.Turbulence = rng.Dur(2*time.Minute, 8*time.Minute)
	}
	if c.Cap <= 0 {
		c.Cap = 90*time.Minute + time.Duration(max(c.Tasks-50, 0)+c.Burst)*20*time.Second
	}
	switch {
	case c.Faults == 0:
		c.Faults = 1
	case c.Faults < 0:
		c.Faults = 0
	}
	return c
}
