package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Trace writes everything the history holds about one task, in time
// order: its writes, handler runs, operator calls and notices. Use it to
// read a violation's story.
func Trace(out io.Writer, h *History, id string) {
	type line struct {
		at  time.Time
		seq int64
		s   string
	}
	var lines []line
	rel := func(t time.Time) string { return "+" + t.Sub(h.Start).Truncate(time.Millisecond).String() }
	x := newIndex(h)
	for _, w := range x.records[id] {
		lines = append(lines, line{w.Time, w.Seq, fmt.Sprintf("%s write by %s: %s -> %s", w.Method, w.Proc, describe(x.prevRecord(w)), describeWrite(w)) + recordDetail(w)})
	}
	for i := range h.Writes {
		w := &h.Writes[i]
		if w.TaskID(h.Prefix) == id && !strings.HasSuffix(w.Key, "/status.json") || strings.HasPrefix(w.Key, h.Prefix+"active/") && markerTask(strings.TrimPrefix(w.Key, h.Prefix+"active/")) == id {
			lines = append(lines, line{w.Time, w.Seq, fmt.Sprintf("%s %s by %s", w.Method, strings.TrimPrefix(w.Key, h.Prefix), w.Proc)})
		}
	}
	for _, r := range x.runs[id] {
		lines = append(lines, line{r.Start, r.StartSeq, fmt.Sprintf("run of attempt %d on %s starts: %s", r.Attempt, r.Worker, r.Plan)})
		if r.CtxEndSeq > 0 {
			lines = append(lines, line{r.CtxEnd, r.CtxEndSeq, fmt.Sprintf("run of attempt %d on %s: context ends (%s)", r.Attempt, r.Worker, r.Cause)})
		}
		if r.Returned {
			lines = append(lines, line{r.Return, r.ReturnSeq, fmt.Sprintf("run of attempt %d on %s returns: ok=%v err=%q dead=%v wrote=%v late=%v %s", r.Attempt, r.Worker, r.OK, r.Err, r.Dead, r.Wrote, r.Late, r.LateErr)})
		}
	}
	for _, c := range h.Calls {
		if c.TaskID == id || strings.Contains(c.Note, id) {
			lines = append(lines, line{c.Start, c.StartSeq, fmt.Sprintf("%s %s starts", c.Proc, c.Kind)})
			lines = append(lines, line{c.End, c.EndSeq, fmt.Sprintf("%s %s returns: %s err=%q unknown=%v %s", c.Proc, c.Kind, describe(asRecord(c.Task)), c.Err, c.OutcomeUnknown, c.Note)})
		}
	}
	for _, n := range h.Notices {
		if n.TaskID == id {
			lines = append(lines, line{n.Start, n.StartSeq, fmt.Sprintf("%s OnTerminal(%s, attempt %d) until %s: ok=%v", n.Proc, n.Status, n.Attempt, rel(n.End), n.OK)})
		}
	}
	for _, d := range h.Deliveries {
		if strings.Contains(d.Key, id) {
			what := "written"
			if d.Removed {
				what = "deleted"
			}
			lines = append(lines, line{d.Time, d.Seq, fmt.Sprintf("event to %s: %s %s", d.Worker, strings.TrimPrefix(d.Key, h.Prefix), what)})
		}
	}
	for _, q := range h.Requests {
		if strings.Contains(q.Key, id) || q.Op == "LIST" || strings.HasSuffix(q.Key, "/_wake") {
			lines = append(lines, line{q.Sent, 0, fmt.Sprintf("  %s %s %s -> %d %s (answered %s)", q.Proc, q.Op, strings.TrimPrefix(q.Key, "/tasks/"+h.Prefix), q.Status, q.Err, rel(q.Done))})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	for _, l := range lines {
		fmt.Fprintf(out, "%12s %s\n", rel(l.at), l.s)
	}
}

// recordDetail adds the fields of a record write that tell its story.
func recordDetail(w *Write) string {
	t := w.Record
	if t == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " max=%d", t.MaxAttempts)
	if w.Released > 0 {
		fmt.Fprintf(&b, " released=%d", w.Released)
	}
	if !t.LeaseExpiresAt.IsZero() {
		fmt.Fprintf(&b, " lease=%s", t.LeaseExpiresAt.Format("15:04:05.000"))
	}
	if !t.RetryAt.IsZero() {
		fmt.Fprintf(&b, " retry_at=%s", t.RetryAt.Format("15:04:05.000"))
	}
	if t.NotifyPending {
		b.WriteString(" notify_pending")
	}
	if t.Purging {
		b.WriteString(" purging")
	}
	if t.OutputPath != "" {
		fmt.Fprintf(&b, " output=%s", t.OutputPath[strings.LastIndex(t.OutputPath, "/")+1:])
	}
	return b.String()
}

// Summary counts violations by kind, e.g. "overlap=2 transition=5".
func Summary(vs []Violation) string {
	n := map[Kind]int{}
	for _, v := range vs {
		n[v.Kind]++
	}
	var parts []string
	for _, k := range Kinds() {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
		}
	}
	return strings.Join(parts, " ")
}
