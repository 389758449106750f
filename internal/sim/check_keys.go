package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/s3task/s3task"
)

// life is a stretch of sequence numbers, [from, to), in which a task's
// record existed and was not marked for purging, nor, for a task of an
// ingest's key, abandoned before it was submitted: Ingest makes a new task
// of the key then, once its source is back (see Store.Ingest).
type life struct{ from, to int64 }

// lives returns the stretches in which task id was live.
func (x *index) lives(id string) []life {
	var out []life
	var from int64 = -1
	for _, w := range x.records[id] {
		r := w.Record
		live := r != nil && !r.Purging &&
			!(strings.HasPrefix(r.IdempotencyKey, "ingest:") && r.Status == s3task.StatusAbandoned && !submitted(r))
		switch {
		case live && from < 0:
			from = w.Seq
		case !live && from >= 0:
			out = append(out, life{from, w.Seq})
			from = -1
		}
	}
	if from >= 0 {
		out = append(out, life{from, 1<<63 - 1})
	}
	return out
}

// checkKeys: at no moment do two live tasks carry one idempotency key, and
// a Create with a key that succeeded returned the key's task as it was live
// at some moment of the call. A successful Create that said it made its
// task (Call.Found false) wrote the record's first version itself, during
// the call; so no two calls made one task.
func checkKeys(x *index) []Violation {
	byKey := map[string][]string{}
	for _, id := range x.tasks {
		if t := x.last(id); t != nil && t.IdempotencyKey != "" {
			byKey[t.IdempotencyKey] = append(byKey[t.IdempotencyKey], id)
		}
	}
	var vs []Violation
	for _, key := range sortedKeys(byKey) {
		ids := byKey[key]
		for i, a := range ids {
			for _, b := range ids[i+1:] {
				for _, la := range x.lives(a) {
					for _, lb := range x.lives(b) {
						from, to := max(la.from, lb.from), min(la.to, lb.to)
						if from >= to {
							continue
						}
						w := x.writeAt(from)
						vs = append(vs, Violation{Kind: KindKey, Task: b, Time: w.Time, Msg: fmt.Sprintf(
							"tasks %s and %s both carried key %q, live at once from %s", a, b, key, x.at(w.Time))})
					}
				}
			}
		}
	}
	for i := range x.h.Calls {
		c := &x.h.Calls[i]
		if !isCreateCall(c.Kind) || c.Key == "" || c.Err != "" {
			continue
		}
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Kind: KindKey, Task: c.TaskID, Time: c.End, Msg: fmt.Sprintf(
				"%s %s with key %q from %s to %s returned %s: ", c.Proc, c.Kind, c.Key, x.at(c.Start), x.at(c.End), c.TaskID) + fmt.Sprintf(format, args...)})
		}
		if c.Task == nil || c.Task.IdempotencyKey != c.Key {
			bad("a task without that key")
			continue
		}
		if !slices.ContainsFunc(x.lives(c.TaskID), func(l life) bool { return l.from < c.EndSeq && l.to > c.StartSeq }) {
			bad("it was not live at any moment of the call (%s)", describe(x.lastPutBefore(c.TaskID, c.EndSeq)))
		}
		if first := x.firstRecord(c.TaskID); !c.Found && (first == nil || first.Proc != c.Proc || first.Seq < c.StartSeq || first.Seq > c.EndSeq) {
			by := "nobody"
			if first != nil {
				by = fmt.Sprintf("%s at %s", first.Proc, x.at(first.Time))
			}
			bad("it said it made the task (Found false), but the record was first written by %s", by)
		}
	}
	return vs
}

// firstRecord returns the write that created task id's record, nil if
// none is known.
func (x *index) firstRecord(id string) *Write {
	for _, w := range x.records[id] {
		if w.Record != nil {
			return w
		}
	}
	return nil
}

// writeAt returns the write with sequence number seq.
func (x *index) writeAt(seq int64) *Write {
	i, _ := slices.BinarySearchFunc(x.h.Writes, seq, func(w Write, s int64) int { return int(w.Seq - s) })
	return &x.h.Writes[min(i, len(x.h.Writes)-1)]
}
