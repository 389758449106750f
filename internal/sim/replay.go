package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"
)

// Encode writes h as text, one line per item, the same bytes for the same
// run: a seed played twice gives identical encodings (see [Run]). Items of
// each kind are in a canonical order (by time, then by content), and every
// sequence number of an item other than a write is given as its window:
// the number of writes S3 had applied before it. Two items recorded by
// different goroutines at the same instant of virtual time, between the same
// two writes, are not ordered by anything the run decided, so the
// encoding does not order them either.
func (h *History) Encode(out io.Writer) error {
	bw := bufio.NewWriter(out)
	seqs := make([]int64, len(h.Writes))
	for i := range h.Writes {
		seqs[i] = h.Writes[i].Seq
	}
	window := func(seq int64) int {
		return sort.Search(len(seqs), func(i int) bool { return seqs[i] >= seq })
	}
	at := func(t time.Time) string { // fixed width: lines sort by time
		if t.IsZero() {
			return "-"
		}
		d := t.Sub(h.Start)
		return fmt.Sprintf("+%06d.%09d", d/time.Second, d%time.Second)
	}
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprintf("!%v", err)
		}
		return string(b)
	}
	fmt.Fprintf(bw, "seed %d prefix %s hooked %v start %s end %s capped %v\n", h.Seed, h.Prefix, h.Hooked, h.Start.UTC().Format(time.RFC3339Nano), at(h.End), h.Capped)
	fmt.Fprintf(bw, "params %s\n", js(h.Params))
	fmt.Fprintf(bw, "planted %s\n", js(h.Planted))
	for i := range h.Writes {
		w := &h.Writes[i]
		fmt.Fprintf(bw, "write %d %s %s %s %s began=%s released=%d body=%q record=%s\n", i, at(w.Time), w.Proc, w.Method, w.Key, at(w.Began), w.Released, w.Body, js(w.Record))
	}
	var lines []string
	for _, r := range h.Runs {
		lines = append(lines, fmt.Sprintf("run %s w%d %s %s attempt=%d plan=%q ctxend=%s w%d cause=%s returned=%v return=%s w%d ok=%v err=%q dead=%v output=%q wrote=%v late=%v lateerr=%q",
			at(r.Start), window(r.StartSeq), r.Worker, r.Task, r.Attempt, r.Plan, at(r.CtxEnd), window(r.CtxEndSeq), r.Cause,
			r.Returned, at(r.Return), window(r.ReturnSeq), r.OK, r.Err, r.Dead, r.Output, r.Wrote, r.Late, r.LateErr))
	}
	for _, c := range h.Calls {
		lines = append(lines, fmt.Sprintf("call %s w%d %s %s %s type=%q end=%s w%d err=%q unknown=%v note=%q task=%s",
			at(c.Start), window(c.StartSeq), c.Proc, c.Kind, c.TaskID, c.Type, at(c.End), window(c.EndSeq), c.Err, c.OutcomeUnknown, c.Note, js(c.Task)))
	}
	for _, n := range h.Notices {
		lines = append(lines, fmt.Sprintf("notice %s w%d %s %s %s attempt=%d end=%s ok=%v",
			at(n.Start), window(n.StartSeq), n.Proc, n.TaskID, n.Status, n.Attempt, at(n.End), n.OK))
	}
	for _, e := range h.Events {
		lines = append(lines, fmt.Sprintf("event %s %s %s end=%s", at(e.Start), e.Proc, e.Kind, at(e.End)))
	}
	for _, wi := range h.Workers {
		lines = append(lines, fmt.Sprintf("worker %s concurrency=%d", wi.Name, wi.Concurrency))
	}
	slices.Sort(lines)
	for _, l := range lines {
		bw.WriteString(l)
		bw.WriteByte('\n')
	}
	for _, s := range h.Snapshots {
		fmt.Fprintf(bw, "snapshot %s tasks=%s markers=%s\n", at(s.Time), js(s.Tasks), js(s.Markers))
	}
	fmt.Fprintf(bw, "stats %s\n", js(h.Stats))
	fmt.Fprintf(bw, "gone reads %s\n", js(h.GoneReads))
	fmt.Fprintf(bw, "reached %s\n", js(h.Reached))
	return bw.Flush()
}
