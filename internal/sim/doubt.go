package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/s3task/s3task"
)

// impatientProc is the operator process that cancels long runs (see
// goCancel), whose record writes the adversary holds up for minutes.
const impatientProc = "opx"

// goCancel has the impatient operator cancel task id after d: a long run
// it gave up on. Its change is held up for minutes (see link.roundTrip)
// while the task's worker renews its lease every HeartbeatInterval, more
// times than the record keeps revisions of, as the Cancel of a running task
// racing its heartbeats on a slow connection: the call must settle its
// doubt, and may return ErrOutcomeUnknown only when S3 does not answer.
// It cancels a task once at a time, as one operator would: checkAPI tells
// a process's calls on a task apart by their time, and two of them at once
// could not be (a later run of the task cancelled while the Cancel of an
// earlier one is still held up is not cancelled again).
func (w *World) goCancel(id string, d time.Duration) {
	w.wg.Go(func() {
		if !w.sleep(d) {
			return
		}
		w.mu.Lock()
		busy := w.cancelling[id]
		if !busy {
			if w.cancelling == nil {
				w.cancelling = map[string]bool{}
			}
			w.cancelling[id] = true
		}
		w.mu.Unlock()
		if busy {
			return
		}
		defer func() {
			w.mu.Lock()
			delete(w.cancelling, id)
			w.mu.Unlock()
		}()
		p := w.impatientP
		_, _ = p.callCtx(context.Background(), Call{Kind: CallCancel, TaskID: id}, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Cancel(ctx, id, fmt.Sprintf("sim: impatient after %s", d))
		}, nil)
	})
}
