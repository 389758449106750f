package sim

import (
	"fmt"
	"strings"

	"github.com/s3task/s3task"
)

// checkReleases holds the function invocations (processes "f…", whose
// WorkerOptions.ReleaseLimit is Params.ReleaseLimit) to the limit: an
// invocation gives a task back only while fewer than ReleaseLimit attempts
// right before the running one were given back, and, when that many were,
// fails the task for good with category timeout instead. So a task too
// long for any invocation ends, after ReleaseLimit+1 starts at most in a
// row, rather than being handed on forever.
func checkReleases(x *index) []Violation {
	limit := x.p.ReleaseLimit
	if limit == 0 {
		return nil
	}
	var vs []Violation
	for _, id := range x.tasks {
		writes := x.records[id]
		for i := 1; i < len(writes); i++ {
			w, p, n := writes[i], writes[i-1].Record, writes[i].Record
			if p == nil || n == nil || !strings.HasPrefix(w.Proc, "f") || p.Status != s3task.StatusRunning || n.Attempt != p.Attempt {
				continue
			}
			run := releasedRun(p)
			switch {
			case n.Status == s3task.StatusQueued && w.Released == writes[i-1].Released+1 && run >= limit:
				vs = append(vs, Violation{Kind: KindRelease, Task: id, Time: w.Time, Msg: fmt.Sprintf(
					"%s gave task %s back at attempt %d, after %d attempts in a row given back (the limit is %d): it should have failed it",
					w.Proc, id, p.Attempt, run, limit)})
			case n.Status == s3task.StatusFailed && n.ErrorCategory == s3task.CategoryTimeout && run < limit:
				vs = append(vs, Violation{Kind: KindRelease, Task: id, Time: w.Time, Msg: fmt.Sprintf(
					"%s failed task %s for timeout at attempt %d, after only %d attempts in a row given back (the limit is %d)",
					w.Proc, id, p.Attempt, run, limit)})
			}
		}
	}
	return vs
}

// releasedRun counts the attempts right before r's running one that were
// given back, as its attempt history shows them: the run ends at an
// attempt of another outcome, or at a gap.
func releasedRun(r *Record) int {
	run, want := 0, r.Attempt-1
	for i := len(r.History) - 1; i >= 0; i-- {
		a := r.History[i]
		if a.Number == r.Attempt {
			continue
		}
		if a.Number != want || a.Outcome != s3task.OutcomeReleased {
			break
		}
		run++
		want--
	}
	return run
}
