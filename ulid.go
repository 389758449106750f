package s3task

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// IDLength is the length of every task ID: 26 Crockford base32 characters.
const IDLength = ulid.EncodedSize

// Task IDs are ULIDs whose 48-bit time field holds (2^48-1) - unix_ms instead
// of unix_ms. S3 lists keys in ascending byte order, so under this encoding a
// listing of the task prefix starts with the newest task.
//
// Guarantees:
//   - IDs for different milliseconds order strictly newest-first.
//   - Within one process, each ID made for a millisecond sorts strictly
//     before every ID made earlier for the same millisecond: the generator
//     remembers the last random part of the most recent milliseconds it was
//     asked for (see idGenMemory) and steps it down by a random amount.
//   - IDs made by different processes within the same millisecond are unique
//     (80 random bits) but their relative order is arbitrary.

// idGenMemory is how many distinct milliseconds the generator remembers.
// Callers with skewed clocks (NewIDAt with several clocks) interleave a few
// milliseconds at most; 64 is plenty.
const idGenMemory = 64

// idGen makes IDs.
type idGen struct {
	mu   sync.Mutex
	last map[uint64]randPart // millisecond -> last random part used for it
	ring [idGenMemory]uint64 // the remembered milliseconds, oldest replaced first
	next int                 // ring position to replace next
	read func([]byte)        // the source of the random parts; nil: crypto/rand
}

// randPart is the 80-bit random part of an ID.
type randPart struct {
	hi uint16
	lo uint64
}

var defaultIDs idGen

// NewID returns a new task ID for the current time. It is safe for concurrent
// use; a later call never returns an ID that sorts after an earlier call's.
func NewID() string {
	var id ulid.ULID
	defaultIDs.make(time.Now, &id)
	return id.String()
}

// NewIDAt returns a new task ID for time t. IDs for later times sort before
// IDs for earlier times; IDs made in one process for the same millisecond are
// unique and each sorts before the ones made before it. Times before the Unix
// epoch are treated as the epoch. It is safe for concurrent use.
func NewIDAt(t time.Time) string { return defaultIDs.at(t) }

// at returns a new ID for time t.
func (g *idGen) at(t time.Time) string {
	var id ulid.ULID
	g.make(func() time.Time { return t }, &id)
	return id.String()
}

// random fills b with random bytes.
func (g *idGen) random(b []byte) {
	if g.read != nil {
		g.read(b)
		return
	}
	_, _ = rand.Read(b) // crypto/rand.Read never fails
}

// make fills id for the time now returns. now is called under the lock, so
// NewID's clock readings are in the same order as its IDs.
func (g *idGen) make(now func() time.Time, id *ulid.ULID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := min(uint64(max(now().UnixMilli(), 0)), ulid.MaxTime())

	r, seen := g.last[ms]
	if seen {
		// Step the random part down by a random amount in [1, 2^32] so the
		// new ID sorts first and stays hard to guess.
		var b [4]byte
		g.random(b[:])
		lo, borrow := bits.Sub64(r.lo, uint64(binary.BigEndian.Uint32(b[:]))+1, 0)
		if r.hi >= uint16(borrow) {
			r = randPart{hi: r.hi - uint16(borrow), lo: lo}
		} else {
			// About once in 2^48 IDs within one millisecond the random
			// part runs out: start afresh.
			seen = false
		}
	}
	if !seen {
		var b [10]byte
		g.random(b[:])
		r = randPart{hi: binary.BigEndian.Uint16(b[:2]), lo: binary.BigEndian.Uint64(b[2:])}
	}
	if _, ok := g.last[ms]; !ok {
		if g.last == nil {
			g.last = make(map[uint64]randPart, idGenMemory)
		}
		if len(g.last) == idGenMemory {
			delete(g.last, g.ring[g.next])
		}
		g.ring[g.next] = ms
		g.next = (g.next + 1) % idGenMemory
	}
	g.last[ms] = r

	// SetTime only fails above MaxTime, which the inversion rules out.
	_ = id.SetTime(ulid.MaxTime() - ms)
	binary.BigEndian.PutUint16(id[6:8], r.hi)
	binary.BigEndian.PutUint64(id[8:16], r.lo)
}

// ParseID checks that id is a task ID in canonical form: exactly 26
// upper-case Crockford base32 characters. It returns an error wrapping
// [ErrInvalidID] otherwise. Every ID that comes from outside the library
// passes through it before it becomes part of an object key, so no input can
// address an object outside its task's folder.
func ParseID(id string) error {
	_, err := parseID(id)
	return err
}

func parseID(id string) (ulid.ULID, error) {
	if len(id) != IDLength {
		return ulid.ULID{}, &IDError{ID: id, Reason: fmt.Sprintf("length %d, want %d", len(id), IDLength)}
	}
	u, err := ulid.ParseStrict(id)
	if err != nil {
		return ulid.ULID{}, &IDError{ID: id, Reason: "not Crockford base32"}
	}
	if u.String() != id {
		// Lower case and the aliases I, L and O decode, but they are not the
		// key the task was stored under.
		return ulid.ULID{}, &IDError{ID: id, Reason: "not in canonical upper-case form"}
	}
	return u, nil
}

// IDTime returns the creation time encoded in a task ID, to the millisecond,
// in UTC. It returns an error wrapping [ErrInvalidID] for an invalid ID.
func IDTime(id string) (time.Time, error) {
	u, err := parseID(id)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(ulid.MaxTime() - u.Time())).UTC(), nil
}
