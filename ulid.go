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
//   - IDs from different milliseconds order strictly newest-first.
//   - IDs that one process makes within the same millisecond order strictly
//     newest-first too: the generator steps the random part down for each one.
//   - IDs made by different processes within the same millisecond are unique
//     (80 random bits) but their relative order is arbitrary.

// idGen makes IDs. It remembers the last ID's millisecond and random part so
// that IDs within one millisecond can be stepped down.
type idGen struct {
	mu     sync.Mutex
	lastMS uint64
	hi     uint16 // top 16 bits of the last 80-bit random part
	lo     uint64 // low 64 bits
	used   bool
}

var defaultIDs idGen

// NewID returns a new task ID for the current time. It is safe for concurrent
// use; see [NewIDAt] for the ordering it guarantees.
func NewID() string { return NewIDAt(time.Now()) }

// NewIDAt returns a new task ID for time t. IDs for later times sort before
// IDs for earlier times; IDs made in one process for the same millisecond are
// unique and each sorts before the ones made before it. Times before the Unix
// epoch are treated as the epoch. It is safe for concurrent use.
func NewIDAt(t time.Time) string {
	var id ulid.ULID
	defaultIDs.next(t, &id)
	return id.String()
}

func (g *idGen) next(t time.Time, id *ulid.ULID) {
	ms := uint64(max(t.UnixMilli(), 0))
	ms = min(ms, ulid.MaxTime())

	g.mu.Lock()
	defer g.mu.Unlock()

	fresh := true
	if g.used && ms == g.lastMS {
		// Same millisecond as the last ID: step the random part down by a
		// random amount in [1, 2^32] so the new ID sorts first and stays
		// hard to guess.
		var b [4]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		step := uint64(binary.BigEndian.Uint32(b[:])) + 1
		lo, borrow := bits.Sub64(g.lo, step, 0)
		if g.hi >= uint16(borrow) {
			g.lo, g.hi = lo, g.hi-uint16(borrow)
			fresh = false
		}
		// Otherwise (about once in 2^48 IDs within one millisecond) the
		// random part ran out: start afresh below.
	}
	if fresh {
		var b [10]byte
		_, _ = rand.Read(b[:])
		g.hi = binary.BigEndian.Uint16(b[:2])
		g.lo = binary.BigEndian.Uint64(b[2:])
	}
	g.lastMS, g.used = ms, true

	// SetTime only fails above MaxTime, which the inversion rules out.
	_ = id.SetTime(ulid.MaxTime() - ms)
	binary.BigEndian.PutUint16(id[6:8], g.hi)
	binary.BigEndian.PutUint64(id[8:16], g.lo)
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
