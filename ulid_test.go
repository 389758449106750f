package s3task

import (
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/quick"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/oklog/ulid/v2"
)

// knownGoodID is a canonical task ID written out by hand: its time field
// "7YC4B614QZ" is (2^48-1) - unix_ms of knownGoodTime, followed by 16
// characters of random part.
const knownGoodID = "7YC4B614QZABCDEFGHJKMNPQRS"

var knownGoodTime = time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)

// crockfordAlphabet is every character a canonical ID may contain.
const crockfordAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// maxIDMilli is the last millisecond an ID can encode (2^48-1 ms after the
// epoch, in the year 10889).
var maxIDMilli = int64(ulid.MaxTime())

// quickTimes makes testing/quick generate instants between the Unix epoch
// and the last millisecond an ID can hold, with random sub-millisecond
// nanoseconds so truncation is exercised too.
func quickTimes(n int) *quick.Config {
	return &quick.Config{
		MaxCount: n,
		Values: func(args []reflect.Value, r *rand.Rand) {
			for i := range args {
				ms := r.Int63n(maxIDMilli + 1)
				ns := r.Int63n(int64(time.Millisecond))
				args[i] = reflect.ValueOf(time.UnixMilli(ms).Add(time.Duration(ns)))
			}
		},
	}
}

func TestNewIDIsCanonical(t *testing.T) {
	t.Parallel()

	for _, id := range []string{NewID(), NewIDAt(time.Unix(0, 0)), NewIDAt(time.UnixMilli(maxIDMilli))} {
		if len(id) != IDLength || IDLength != 26 {
			t.Errorf("ID %q has length %d, want 26 (IDLength = %d)", id, len(id), IDLength)
		}
		if strings.Trim(id, crockfordAlphabet) != "" {
			t.Errorf("ID %q has characters outside %q", id, crockfordAlphabet)
		}
		if err := ParseID(id); err != nil {
			t.Errorf("ParseID(%q) = %v, want nil", id, err)
		}
	}
}

func TestNewIDAtRoundTripsTime(t *testing.T) {
	t.Parallel()

	roundTrip := func(at time.Time) bool {
		id := NewIDAt(at)
		if err := ParseID(id); err != nil {
			t.Logf("ParseID(NewIDAt(%v)) = %v", at, err)
			return false
		}
		got, err := IDTime(id)
		if err != nil {
			t.Logf("IDTime(%q) = %v", id, err)
			return false
		}
		want := time.UnixMilli(at.UnixMilli()).UTC()
		if !got.Equal(want) || got.Location() != time.UTC {
			t.Logf("IDTime(NewIDAt(%v)) = %v, want %v in UTC", at, got, want)
			return false
		}
		return true
	}
	if err := quick.Check(roundTrip, quickTimes(2000)); err != nil {
		t.Error(err)
	}
}

func TestNewIDAtBeforeEpochClampsToEpoch(t *testing.T) {
	t.Parallel()

	epoch := time.Unix(0, 0).UTC()
	check := func(at time.Time) bool {
		got, err := IDTime(NewIDAt(at))
		if err != nil || !got.Equal(epoch) {
			t.Logf("IDTime(NewIDAt(%v)) = %v, %v; want %v", at, got, err, epoch)
			return false
		}
		return true
	}
	beforeEpoch := func(back uint64) bool {
		// 1ns up to about 292 years before the epoch.
		return check(epoch.Add(-time.Duration(back%math.MaxInt64 + 1)))
	}
	if err := quick.Check(beforeEpoch, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
	for _, at := range []time.Time{
		epoch.Add(-time.Nanosecond),
		epoch.Add(-time.Millisecond + time.Nanosecond),
		epoch.Add(-time.Millisecond),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		{},
	} {
		if !check(at) {
			t.Errorf("NewIDAt(%v) did not clamp to the epoch", at)
		}
	}
}

func TestNewIDAtEncodesInvertedTime(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		at         time.Time
		wantPrefix string // the 10-character time field
		wantTime   time.Time
		reason     string
	}{
		{
			name:       "epoch",
			at:         time.Unix(0, 0),
			wantPrefix: "7ZZZZZZZZZ",
			wantTime:   time.Unix(0, 0).UTC(),
			reason:     "(2^48-1) - 0 is all ones, the largest time field",
		},
		{
			name:       "last representable millisecond",
			at:         time.UnixMilli(maxIDMilli),
			wantPrefix: "0000000000",
			wantTime:   time.UnixMilli(maxIDMilli).UTC(),
			reason:     "(2^48-1) - (2^48-1) is zero, the smallest time field",
		},
		{
			name:       "beyond year 10889",
			at:         time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC),
			wantPrefix: "0000000000",
			wantTime:   time.UnixMilli(maxIDMilli).UTC(),
			reason:     "times past the 48-bit range clamp to its end instead of wrapping around",
		},
		{
			name:       "one millisecond after the epoch",
			at:         time.UnixMilli(1),
			wantPrefix: "7ZZZZZZZZY",
			wantTime:   time.UnixMilli(1).UTC(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			id := NewIDAt(tt.at)
			if got := id[:10]; got != tt.wantPrefix {
				t.Errorf("NewIDAt(%v) time field = %q, want %q (%s)", tt.at, got, tt.wantPrefix, tt.reason)
			}
			got, err := IDTime(id)
			if err != nil {
				t.Fatalf("IDTime(%q) = %v", id, err)
			}
			if !got.Equal(tt.wantTime) {
				t.Errorf("IDTime(%q) = %v, want %v (%s)", id, got, tt.wantTime, tt.reason)
			}
		})
	}
}

func TestNewIDAtLaterSortsFirst(t *testing.T) {
	t.Parallel()

	newerFirst := func(a, b time.Time) bool {
		if a.UnixMilli() == b.UnixMilli() {
			return true // same millisecond: covered by the same-millisecond tests
		}
		older, newer := a, b
		if newer.Before(older) {
			older, newer = newer, older
		}
		idOld, idNew := NewIDAt(older), NewIDAt(newer)
		if idNew >= idOld {
			t.Logf("NewIDAt(%v) = %q does not sort before NewIDAt(%v) = %q", newer, idNew, older, idOld)
			return false
		}
		return true
	}
	if err := quick.Check(newerFirst, quickTimes(2000)); err != nil {
		t.Error(err)
	}

	// Neighbouring milliseconds are where an off-by-one would hide.
	for _, ms := range []int64{0, 1, 1_750_000_000_000, maxIDMilli - 1} {
		older, newer := NewIDAt(time.UnixMilli(ms)), NewIDAt(time.UnixMilli(ms+1))
		if newer >= older {
			t.Errorf("ID for ms %d (%q) does not sort before ID for ms %d (%q)", ms+1, newer, ms, older)
		}
	}
}

func TestIDGenSameMillisecondStepsDown(t *testing.T) {
	t.Parallel()

	// A private generator: the package-wide one is shared with every other
	// parallel test, and an ID they make for another millisecond restarts
	// its sequence.
	var g idGen
	at := time.Date(2026, 6, 21, 10, 0, 0, 0, time.UTC)
	const n = 10_000
	seen := make(map[string]bool, n)
	prev := ""
	for i := range n {
		var u ulid.ULID
		g.make(fixedClock(at), &u)
		id := u.String()
		if seen[id] {
			t.Fatalf("ID %d: %q repeats an earlier ID", i, id)
		}
		seen[id] = true
		if prev != "" && id >= prev {
			t.Fatalf("ID %d: %q does not sort before the previous ID %q", i, id, prev)
		}
		if got, err := IDTime(id); err != nil || !got.Equal(at) {
			t.Fatalf("IDTime(%q) = %v, %v; want %v", id, got, err, at)
		}
		prev = id
	}
}

func TestNewIDAtSameMillisecondUnique(t *testing.T) {
	t.Parallel()

	at := time.Date(2031, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	const n = 10_000
	seen := make(map[string]bool, n)
	for i := range n {
		id := NewIDAt(at)
		if seen[id] {
			t.Fatalf("ID %d: %q repeats an earlier ID", i, id)
		}
		seen[id] = true
	}
}

func TestIDGenStepBorrowsFromHighBits(t *testing.T) {
	t.Parallel()

	// The random part is 16 high bits and 64 low bits. A step that
	// underflows the low bits must borrow from the high ones, not wrap.
	at := time.UnixMilli(1_750_000_000_000)
	ms := uint64(at.UnixMilli())
	g := idGen{last: map[uint64]randPart{ms: {hi: 1, lo: 0}}}
	var before ulid.ULID
	_ = before.SetTime(ulid.MaxTime() - ms)
	before[7] = 1 // hi = 1, lo = 0

	var u ulid.ULID
	g.make(fixedClock(at), &u)
	if g.last[ms].hi != 0 {
		t.Errorf("after the borrow hi = %d, want 0", g.last[ms].hi)
	}
	if g.last[ms].lo == 0 {
		t.Errorf("after the borrow lo = 0, want 2^64 - step")
	}
	if u.String() >= before.String() {
		t.Errorf("ID after the borrow %q does not sort before %q", u, before)
	}
}

func TestIDGenSameMillisecondOrderSurvivesInterleaving(t *testing.T) {
	t.Parallel()

	// The promise is that IDs one process makes for the same millisecond
	// each sort before the ones made before it. An ID for another
	// millisecond can come in between two of them: callers of NewIDAt with
	// different clocks (Stores with skewed Clock options) share the one
	// package generator, and a caller may pass an older time.
	m := time.UnixMilli(1_750_000_000_001)
	tests := []struct {
		name    string
		between time.Time
	}{
		{name: "late caller from the previous millisecond", between: m.Add(-time.Millisecond)},
		{name: "caller with a clock 4s ahead", between: m.Add(4 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			const rounds = 64 // an unordered restart passes by luck half the time
			failures := 0
			var example string
			for range rounds {
				var g idGen
				var first, between, second ulid.ULID
				g.make(fixedClock(m), &first)
				g.make(fixedClock(tt.between), &between)
				g.make(fixedClock(m), &second)
				if second.String() >= first.String() {
					failures++
					example = second.String() + " >= " + first.String()
				}
			}
			if failures > 0 {
				t.Errorf("in %d of %d rounds the second ID for a millisecond sorted after the first (e.g. %s)", failures, rounds, example)
			}
		})
	}
}

func TestNewIDAtConcurrent(t *testing.T) {
	t.Parallel()

	const goroutines, perGoroutine = 16, 1000
	at := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	// generate has goroutines each make perGoroutine IDs at once and fails
	// t if any ID is made twice; it returns each goroutine's IDs in order.
	generate := func(t *testing.T, newID func() string) [][]string {
		ids := make([][]string, goroutines)
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Go(func() {
				for range perGoroutine {
					ids[i] = append(ids[i], newID())
				}
			})
		}
		wg.Wait()
		seen := make(map[string]bool, goroutines*perGoroutine)
		for _, id := range slices.Concat(ids...) {
			if seen[id] {
				t.Fatalf("ID %q was made twice", id)
			}
			seen[id] = true
		}
		if len(seen) != goroutines*perGoroutine {
			t.Errorf("got %d IDs, want %d", len(seen), goroutines*perGoroutine)
		}
		return ids
	}

	t.Run("package generator: unique", func(t *testing.T) {
		t.Parallel()
		generate(t, func() string { return NewIDAt(at) })
	})

	t.Run("one generator: each goroutine's IDs step down", func(t *testing.T) {
		t.Parallel()

		var g idGen
		ids := generate(t, func() string {
			var u ulid.ULID
			g.make(fixedClock(at), &u)
			return u.String()
		})
		for i, batch := range ids {
			for j, id := range batch[1:] {
				if id >= batch[j] {
					t.Fatalf("goroutine %d: ID %q does not sort before its previous %q", i, id, batch[j])
				}
			}
		}
	})
}

func TestParseIDValid(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		id       string
		wantTime time.Time
	}{
		{name: "hand-written", id: knownGoodID, wantTime: knownGoodTime},
		{name: "largest time field", id: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", wantTime: time.Unix(0, 0).UTC()},
		{name: "all zeros", id: "00000000000000000000000000", wantTime: time.UnixMilli(maxIDMilli).UTC()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if err := ParseID(tt.id); err != nil {
				t.Fatalf("ParseID(%q) = %v, want nil", tt.id, err)
			}
			got, err := IDTime(tt.id)
			if err != nil {
				t.Fatalf("IDTime(%q) = %v", tt.id, err)
			}
			if !got.Equal(tt.wantTime) {
				t.Errorf("IDTime(%q) = %v, want %v", tt.id, got, tt.wantTime)
			}
		})
	}
}

func TestParseIDInvalid(t *testing.T) {
	t.Parallel()

	ids := map[string]string{ // by what is wrong with them
		"empty":                 "",
		"25 characters":         knownGoodID[:25],
		"27 characters":         knownGoodID + "0",
		"seed article ID":       "7ZZZZZZZY1F801XTH00MY7XF09K", // 27 characters
		"parent directory":      "../x",
		"dot dot":               "..",
		"marker folder":         "active",
		"lower case":            strings.ToLower(knownGoodID), // decodes to the same ULID but is a different key
		"mixed case":            knownGoodID[:20] + strings.ToLower(knownGoodID[20:]),
		"contains I":            "I" + knownGoodID[1:],                     // I is an alias of 1, not canonical
		"contains L":            knownGoodID[:25] + "L",                    // L is an alias of 1, not canonical
		"contains O":            knownGoodID[:12] + "O" + knownGoodID[13:], // O is an alias of 0, not canonical
		"contains U":            knownGoodID[:12] + "U" + knownGoodID[13:], // U is not in the alphabet
		"starts with 8":         "8" + knownGoodID[1:],                     // 130 bits of text, the top two would overflow 128
		"all Z":                 strings.Repeat("Z", 26),                   // overflow
		"slash":                 knownGoodID[:25] + "/",
		"slash prefix":          "/" + knownGoodID[1:],
		"escaped slash":         knownGoodID[:23] + "%2F",
		"26 bytes with unicode": knownGoodID[:24] + "é", // 26 bytes, 25 runes
		"26 runes with unicode": knownGoodID[:25] + "Ω", // 26 runes, 27 bytes
		"NUL byte":              knownGoodID[:25] + "\x00",
		"leading space":         " " + knownGoodID[1:],
		"trailing newline":      knownGoodID + "\n",
		"hyphenated":            knownGoodID[:13] + "-" + knownGoodID[14:],
	}
	for name, id := range ids {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			err := ParseID(id)
			checkIDError(t, "ParseID", id, err)

			got, err := IDTime(id)
			checkIDError(t, "IDTime", id, err)
			if !got.IsZero() {
				t.Errorf("IDTime(%q) time = %v, want the zero time", id, got)
			}
		})
	}
}

// checkIDError fails t unless err is an *IDError for id wrapping
// ErrInvalidID.
func checkIDError(t *testing.T, fn, id string, err error) {
	t.Helper()

	if !errors.Is(err, ErrInvalidID) {
		t.Errorf("%s(%q) = %v, want an error wrapping ErrInvalidID", fn, id, err)
		return
	}
	var idErr *IDError
	if !errors.As(err, &idErr) {
		t.Errorf("%s(%q) = %T, want *IDError", fn, id, err)
		return
	}
	if diff := gocmp.Diff(id, idErr.ID); diff != "" {
		t.Errorf("%s(%q): IDError.ID differs (-want +got):\n%s", fn, id, diff)
	}
	if idErr.Reason == "" {
		t.Errorf("%s(%q): IDError.Reason is empty", fn, id)
	}
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		knownGoodID,
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		"00000000000000000000000000",
		"8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
		strings.ToLower(knownGoodID),
		"../x",
		"active",
		"",
		knownGoodID[:23] + "%2F",
		knownGoodID[:25] + "\x00",
		knownGoodID[:24] + "é",
	} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, s string) {
		err := ParseID(s)
		at, timeErr := IDTime(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) = %v, want an error wrapping ErrInvalidID", s, err)
			}
			if timeErr == nil {
				t.Fatalf("ParseID(%q) failed but IDTime accepted it", s)
			}
			return
		}
		if len(s) != IDLength {
			t.Fatalf("ParseID accepted %q of length %d", s, len(s))
		}
		if strings.Trim(s, crockfordAlphabet) != "" {
			t.Fatalf("ParseID accepted %q with characters outside the alphabet", s)
		}
		if timeErr != nil {
			t.Fatalf("ParseID accepted %q but IDTime = %v", s, timeErr)
		}
		if at.Before(time.Unix(0, 0)) || at.After(time.UnixMilli(maxIDMilli)) {
			t.Fatalf("IDTime(%q) = %v, outside the ID range", s, at)
		}
	})
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewID()
	}
}

// fixedClock returns a clock that always reads t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }
