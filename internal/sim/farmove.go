package sim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/faults"
)

// The far-move adversary. A task scheduled days ahead has a marker due
// then; when an operator moves its start nearer, the Schedule writes the
// new marker, the record, and deletes the old marker. Should that DELETE
// fail, or the call lose its answer and not learn in time that its write
// landed (ErrOutcomeUnknown: both markers stay), the old marker stays
// behind, due days ahead: no poll visits it before then, so only the
// reconciler removes it, and when the task is older than the span its
// turns walk (two intervals), only its watch of the older waiting tasks,
// which must not take a marker not yet due for a sign that the record is
// as it was (soak seed 4712). Such moves are rare by chance: the
// adversary strikes them on purpose.

// farStrike is the chance that the move of a task older than two
// reconciler intervals is struck.
const farStrike = 0.75

// farMove is the fault planned for one move of a far start: after S3
// applied the Schedule's record write, the operator's link is cut off for
// cut, long enough for the SDK's resends of the request it sends next
// (three tries, a few seconds) to fail. If lose, the write's answer is lost
// too, and once the cut ends the process's requests hang for hang, past
// the call's rereads of the record (settleWithin, 30 s): the call returns
// ErrOutcomeUnknown, leaving both markers, and its retries find the start
// moved and change nothing. Otherwise the call learns that its write
// landed, and its DELETE of the old marker fails.
type farMove struct {
	lose      bool
	cut, hang time.Duration

	mu    sync.Mutex
	taken bool // struck already: a call retried after the strike goes through
}

// farMoveKey is the context key of the *farMove of a Schedule call.
type farMoveKey struct{}

// planFarMove returns the fault for operator p's move of task id's far
// start, or nil if the move is spared: a task younger than two reconciler
// intervals is spared, whose stale marker any turn's walk removes.
func (p *proc) planFarMove(id string) *farMove {
	created, err := s3task.IDTime(id)
	if err != nil || time.Since(created) <= 2*p.w.h.Params.ReconcileInterval || !p.rng.Chance(farStrike) {
		return nil
	}
	m := &farMove{lose: p.rng.Chance(0.5), cut: p.rng.Dur(5*time.Second, 15*time.Second)}
	if m.lose {
		m.hang = p.rng.Dur(time.Minute, 2*time.Minute)
	}
	return m
}

// strike reports, once, whether r, whose answer resp says S3 applied it,
// is the record write of a far move to strike.
func (m *farMove) strike(r *http.Request, resp *http.Response) bool {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/status.json") || resp.StatusCode != http.StatusOK {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.taken {
		return false
	}
	m.taken = true
	return true
}

// farMoved is roundTrip's end for a request S3 answered with resp: if r
// is the record write of a far move to strike, it cuts the link off and
// loses the answer or hands it on (as answer does); struck says whether it
// did, and then what the client gets.
func (n *link) farMoved(ctx context.Context, rng *Rand, r *http.Request, resp *http.Response) (struck bool, _ *http.Response, _ error) {
	m, _ := ctx.Value(farMoveKey{}).(*farMove)
	if m == nil || !m.strike(r, resp) {
		return false, nil, nil
	}
	n.w.count("far-move-struck")
	if m.lose {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n.outage(m.cut)
		n.w.wg.Go(func() {
			if pause(m.cut, n.w.over) == 0 {
				n.pause(m.hang)
			}
		})
		return true, nil, &faults.Error{Kind: faults.LostResponse}
	}
	resp, _, err := n.answer(ctx, rng, resp, true)
	n.outage(m.cut)
	return true, resp, err
}
