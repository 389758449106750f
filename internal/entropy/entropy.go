// Package entropy lets the simulation replay a seed exactly: it replaces
// the randomness of a Store, and of the Workers on it, with a seeded one.
// The library's randomness is its record revisions, the random part of
// task IDs, the jitter of its waits and backoffs, and the order in which a
// poll visits the markers due first. By default a Store draws revisions
// and IDs from crypto/rand and the rest from math/rand/v2's global source;
// a Store given a Source draws everything from it.
//
// Several goroutines of one Store draw at once, in an order that is up to
// the Go scheduler, so a single stream would hand out its numbers in a
// different order on every run. Every draw therefore names what it is for
// (a label such as "rev/<object key>" or "poll"), and the n-th draw of a
// label is the same number on every run, whoever draws first.
//
// Only code inside this module can reach it. Hosts never need it: a seeded
// Store's revisions and IDs are predictable, which is what a replay wants
// and what production must not have.
package entropy

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// Source is seeded randomness, safe for concurrent use.
type Source struct {
	seed uint64

	mu    sync.Mutex
	drawn map[string]uint64 // label -> draws so far
}

// New returns the source named name under seed: different names give
// independent sources.
func New(seed uint64, name string) *Source {
	return &Source{seed: seed ^ hash(name), drawn: map[string]uint64{}}
}

// Rand returns the generator of the next draw of label: the n-th call for
// a label returns the same generator on every run.
func (s *Source) Rand(label string) *rand.Rand {
	s.mu.Lock()
	n := s.drawn[label]
	s.drawn[label] = n + 1
	s.mu.Unlock()
	return rand.New(rand.NewPCG(s.seed, hash(label)^(n*0x9e3779b97f4a7c15)))
}

// At returns the generator of label at time t, for draws that are told
// apart by when they are made rather than by how many came before: the
// same on every run for the same label and instant, and no state kept.
func (s *Source) At(label string, t time.Time) *rand.Rand {
	return rand.New(rand.NewPCG(s.seed^uint64(t.UnixNano()), hash(label)))
}

// Read fills p with the next random bytes of label.
func (s *Source) Read(label string, p []byte) {
	r := s.Rand(label)
	for i := 0; i < len(p); i += 8 {
		v := r.Uint64()
		for j := i; j < len(p) && j < i+8; j++ {
			p[j] = byte(v)
			v >>= 8
		}
	}
}

// Int64N returns the next number of label in [0, n); n must be positive.
func (s *Source) Int64N(label string, n int64) int64 { return s.Rand(label).Int64N(n) }

// Shuffle shuffles n elements with swap, as the next draw of label.
func (s *Source) Shuffle(label string, n int, swap func(i, j int)) { s.Rand(label).Shuffle(n, swap) }

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Use makes store, a *s3task.Store, draw all its randomness from src. It
// must be called before the Store (or a Worker on it) is used. Package
// s3task sets it when it is initialised.
var Use func(store any, src *Source)
