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
func (w *World) goCancel(id string, d time.Duration) {
	w.wg.Go(func() {
		if !w.sleep(d) {
			return
		}
		p := w.impatientP
		_, _ = p.callCtx(context.Background(), Call{Kind: CallCancel, TaskID: id}, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Cancel(ctx, id, fmt.Sprintf("sim: impatient after %s", d))
		}, nil)
	})
}
