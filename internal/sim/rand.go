package sim

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// Rand is a PCG generator safe for concurrent use. Each process of the
// world has its own, so its decisions do not depend on what other processes
// drew.
type Rand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// NewRand returns the generator of stream name under seed.
func NewRand(seed uint64, name string) *Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &Rand{r: rand.New(rand.NewPCG(seed, h.Sum64()))}
}

// Float64 returns a number in [0, 1).
func (r *Rand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64()
}

// IntN returns a number in [0, n).
func (r *Rand) IntN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}

// Chance reports true with probability p.
func (r *Rand) Chance(p float64) bool { return r.Float64() < p }

// Dur returns a duration in [lo, hi), to the millisecond (lo itself if the
// range is narrower than that).
func (r *Rand) Dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return (lo + time.Duration(r.r.Int64N(int64(hi-lo)))).Truncate(time.Millisecond)
}

// Exp returns an exponentially distributed duration with the given mean.
func (r *Rand) Exp(mean time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.r.ExpFloat64() * float64(mean)).Truncate(time.Millisecond)
}

// Pick returns an index drawn with the given weights.
func (r *Rand) Pick(weights ...float64) int {
	sum := 0.0
	for _, w := range weights {
		sum += w
	}
	u := r.Float64() * sum
	for i, w := range weights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(weights) - 1
}
