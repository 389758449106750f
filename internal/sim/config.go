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
	// stopped workers. Default: 2 or 3, from the seed.
	Workers int
	// Operators is how many operator processes create tasks and race
	// Cancel, Retry and Purge. Default 2.
	Operators int
	// Arrivals is the time over which task creations are spread. Default:
	// 6 to 10 minutes, from the seed.
	Arrivals time.Duration
	// Turbulence is how long after the last arrival operators keep
	// cancelling, retrying and purging and the adversary keeps crashing,
	// stopping and pausing processes. Default 2 minutes.
	Turbulence time.Duration
	// Cap is how long after the turbulence the run waits for every task to
	// finish before it reports the rest as stuck. Default 90 minutes.
	Cap time.Duration
	// Faults scales the per-request fault and latency probabilities; 0
	// means 1, negative means none.
	Faults float64
	// NoChaos turns off crashes, stops, pauses and outages.
	NoChaos bool
}

// withDefaults fills in the defaults, drawing from rng where the default
// depends on the seed.
func (c Config) withDefaults(rng *Rand) Config {
	if c.Tasks <= 0 {
		c.Tasks = 50
	}
	if c.Workers <= 0 {
		c.Workers = 2 + rng.IntN(2)
	}
	if c.Operators <= 0 {
		c.Operators = 2
	}
	if c.Arrivals <= 0 {
		c.Arrivals = rng.Dur(6*time.Minute, 10*time.Minute)
	}
	if c.Turbulence <= 0 {
		c.Turbulence = 2 * time.Minute
	}
	if c.Cap <= 0 {
		c.Cap = 90 * time.Minute
	}
	switch {
	case c.Faults == 0:
		c.Faults = 1
	case c.Faults < 0:
		c.Faults = 0
	}
	return c
}
