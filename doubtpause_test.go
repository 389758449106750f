package s3task

// Doubts settled inside Pause and Resume: a write of the paused object or
// of the wake object whose answer was lost is settled by reading both
// again, and the call hands the doubt to its caller (ErrOutcomeUnknown)
// only when S3 cannot be read back in time. In synctest bubbles against
// the socketless in-memory S3 (see bubble_test.go).

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/s3task/s3task/internal/s3test"
)

// The limit Pause and Resume document: a write whose answer is lost while
// S3 stays unreachable cannot be settled, and the call says
// ErrOutcomeUnknown once it has tried to read back for settleWithin; one
// cut off before it wrote anything returns the plain error.
func TestDoubtPauseUnreachable(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{true, false} {
		name := "Pause"
		if !pause {
			name = "Resume"
		}
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, e *advEnv) {
				if !pause {
					if err := e.admin.Pause(e.ctx, "csv"); err != nil {
						t.Fatal(err)
					}
				}
				link := newAdvLink()
				isPaused := func(r *http.Request) bool {
					return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_paused")
				}
				lose := &advLoseAnswer{match: isPaused, nth: 1, after: func() { link.down(false) }}
				st := e.store(nil, advWrap(link.roundTrip), lose.wrap)
				call := func() error {
					if pause {
						return st.Pause(e.ctx, "csv")
					}
					return st.Resume(e.ctx, "csv")
				}
				start := time.Now()
				err := call()
				if !errors.Is(err, ErrOutcomeUnknown) {
					t.Fatalf("%s cut off after its write: %v, want ErrOutcomeUnknown", name, err)
				}
				if took := time.Since(start); took < settleWithin {
					t.Errorf("%s gave up after %s, want %s of re-reads", name, took, settleWithin)
				}
				// Cut off before it wrote anything: nothing changed.
				if err := call(); err == nil || errors.Is(err, ErrOutcomeUnknown) {
					t.Errorf("%s cut off before any write: %v, want a plain error", name, err)
				}
			})
		})
	}
}

// Pause and Resume: the paused object's write loses its answer (landed or
// not), and the read that should settle it fails once. The call reads
// again and finishes the change, instead of returning the read's error
// for a change it may have made.
func TestDoubtPauseLostAnswer(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{true, false} {
		for _, landed := range []bool{true, false} {
			name := map[bool]string{true: "Pause", false: "Resume"}[pause] + map[bool]string{true: "/landed", false: "/not landed"}[landed]
			t.Run(name, func(t *testing.T) {
				inBubble(t, func(t *testing.T, e *advEnv) {
					if !pause {
						if err := e.admin.Pause(e.ctx, "csv"); err != nil {
							t.Fatal(err)
						}
					}
					var mu sync.Mutex
					lost, cutRead := false, false
					var reached s3test.Counter // the requests that reach S3
					st := e.store(nil, reached.Wrap, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
						mu.Lock()
						defer mu.Unlock()
						switch {
						case !lost && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_paused"):
							lost = true
							if landed {
								resp, err := next.RoundTrip(r)
								if err != nil {
									return nil, err
								}
								resp.Body.Close()
							}
							return nil, s3test.ErrCut
						case lost && !cutRead && r.Method == http.MethodGet:
							cutRead = true // the next read fails too
							return nil, s3test.ErrCut
						}
						return next.RoundTrip(r)
					}))
					var err error
					if pause {
						err = st.Pause(e.ctx, "csv")
					} else {
						err = st.Resume(e.ctx, "csv")
					}
					if !cutRead {
						t.Fatal("setup: no read after the lost answer")
					}
					if err != nil {
						t.Fatalf("%v; want the doubt settled", err)
					}
					advWantPaused(t, e, pause)
					// Both objects read twice, the paused object and the
					// wake object written once each.
					if c := reached.Counts(); c["GET"] != 4 || c["PUT"] != 2 || reached.Total() != 6 {
						t.Errorf("requests that reached S3: %s; want GET=4 PUT=2", &reached)
					}
				})
			})
		}
	}
}

// Pause whose announcements keep losing their compare-and-set, so that it
// falls back to its blind write of the wake object, whose answer is then
// lost although it landed: Pause reads the wake object again, sees the
// write there, and succeeds.
func TestDoubtPauseFallbackLost(t *testing.T) {
	inBubble(t, func(t *testing.T, e *advEnv) {
		var refused atomic.Int32
		var blind atomic.Bool
		st := e.store(nil, advWrap(func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
			if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/_wake") {
				return next.RoundTrip(r)
			}
			if r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "" {
				refused.Add(1)
				return advErrResp(r, http.StatusPreconditionFailed, "PreconditionFailed"), nil
			}
			resp, err := next.RoundTrip(r)
			if err != nil || blind.Swap(true) {
				return resp, err
			}
			resp.Body.Close()
			return nil, s3test.ErrCut
		}))
		if err := st.Pause(e.ctx, "csv"); err != nil {
			t.Fatalf("Pause: %v; want its blind write, landed, seen", err)
		}
		if !blind.Load() || refused.Load() != wakeTries {
			t.Fatalf("setup: %d announcements refused, blind write made %t; want %d and true", refused.Load(), blind.Load(), wakeTries)
		}
		types, err := e.admin.Paused(e.ctx)
		if err != nil || !slices.Equal(types, []string{"csv"}) {
			t.Errorf("Paused = %v, %v; want [csv]", types, err)
		}
		body, _ := e.mem.Object(DefaultPrefix + "_wake")
		if b, ok := parseWakeBody(body); !ok || b.paused.known {
			t.Errorf("the wake object says %q; want the blind write's, which sends workers to the paused object", body)
		}
	})
}

// advWantPaused checks that the paused object and the wake object both
// name csv as paused (paused) or neither does.
func advWantPaused(t *testing.T, e *advEnv, paused bool) {
	t.Helper()
	var want []string
	if paused {
		want = []string{"csv"}
	}
	types, err := e.admin.Paused(e.ctx)
	if err != nil || !slices.Equal(types, want) {
		t.Errorf("Paused = %v, %v; want %v", types, err, want)
	}
	body, _ := e.mem.Object(DefaultPrefix + "_wake")
	if b, ok := parseWakeBody(body); !ok || !b.paused.known || !slices.Equal(b.paused.types, want) {
		t.Errorf("the wake object tells the workers %q; want paused %v", body, want)
	}
}
