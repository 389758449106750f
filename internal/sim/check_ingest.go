package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// checkIngest, in a world with Config.Ingest, holds the Ingesters and the
// direct callers of Ingest to [s3task.Ingester]'s promise, version by
// version of each file under the folder (a body S3 applied there):
//
//   - at most one task of a version is ever submitted (a task abandoned
//     before it was submitted, its source gone before the copy, does not
//     count): no duplicate however the events came, however often the
//     Ingesters restarted, and whatever was purged;
//   - no task is made of a version S3 never held (an event for a missing
//     object makes none);
//   - a version that stays in place for IngestBound after it appears (or
//     after the brownout it appeared in ends) has a task submitted by
//     then, and the current version of every file at the end has one,
//     unless the run was capped;
//   - a task's input, once written, is the version its metadata names;
//   - a direct Ingest never fails with a *TransitionError: Ingests of one
//     version at once all return its task.
func checkIngest(x *index) []Violation {
	type version struct{ key, etag string }
	type span struct {
		from, to time.Time
		current  bool
	}
	held := map[version][]span{}
	open := map[string]*Write{} // file -> the write of the version in place
	closeSpan := func(key string, to time.Time, current bool) {
		if w := open[key]; w != nil {
			v := version{key, md5hex(w.Body)}
			held[v] = append(held[v], span{w.Time, to, current})
			delete(open, key)
		}
	}
	for i := range x.h.Writes {
		w := &x.h.Writes[i]
		if !strings.HasPrefix(w.Key, ingestFolder) {
			continue
		}
		closeSpan(w.Key, w.Time, false)
		if w.Method != "DELETE" {
			open[w.Key] = w
		}
	}
	for key := range open {
		closeSpan(key, x.h.End, true)
	}

	tasks := map[version][]string{}    // by source, in order of first record
	firstSubmit := map[string]*Write{} // task -> its first record write past created
	sourceOf := map[string]version{}
	for _, id := range x.tasks {
		for _, w := range x.records[id] {
			if w.Record == nil {
				continue
			}
			m := w.Record.Metadata
			if key := m[s3task.MetaSourceKey]; key != "" {
				v := version{key, m[s3task.MetaSourceETag]}
				if !slices.Contains(tasks[v], id) {
					tasks[v] = append(tasks[v], id)
				}
				sourceOf[id] = v
			}
			if _, ok := sourceOf[id]; ok && firstSubmit[id] == nil && submitted(w.Record) {
				firstSubmit[id] = w
			}
		}
	}
	var vs []Violation
	for v, ids := range tasks {
		var ran []string
		for _, id := range ids {
			if firstSubmit[id] != nil {
				ran = append(ran, id)
			}
		}
		if len(ran) > 1 {
			vs = append(vs, Violation{Kind: KindIngest, Task: ran[1], Time: firstSubmit[ran[1]].Time, Msg: fmt.Sprintf(
				"version %s of %s has %d tasks submitted: %s", v.etag, v.key, len(ran), strings.Join(ran, ", "))})
		}
		if len(held[v]) == 0 {
			vs = append(vs, Violation{Kind: KindIngest, Task: ids[0], Time: x.h.End, Msg: fmt.Sprintf(
				"task %s was made of version %s of %s, which S3 never held", ids[0], v.etag, v.key)})
		}
	}
	// When the first task of a version was submitted.
	submittedAt := func(v version) (time.Time, bool) {
		var first time.Time
		for _, id := range tasks[v] {
			if w := firstSubmit[id]; w != nil && (first.IsZero() || w.Time.Before(first)) {
				first = w.Time
			}
		}
		return first, !first.IsZero()
	}
	var brownouts []ProcEvent
	for _, e := range x.h.Events {
		if e.Kind == EventBrownout {
			brownouts = append(brownouts, e)
		}
	}
	slices.SortFunc(brownouts, func(a, b ProcEvent) int { return a.Start.Compare(b.Start) })
	// dueAfter returns when IngestBound of time outside the brownouts has
	// passed since from.
	dueAfter := func(from time.Time) time.Time {
		due := from.Add(IngestBound)
		for _, b := range brownouts {
			if b.End.After(from) && b.Start.Before(due) {
				due = due.Add(b.End.Sub(later(b.Start, from)))
			}
		}
		return due
	}
	for v, spans := range held {
		for _, sp := range spans {
			from := sp.from
			due := dueAfter(from)
			at, ok := submittedAt(v)
			switch {
			case sp.current && !x.h.Capped && !ok:
				vs = append(vs, Violation{Kind: KindIngest, Time: x.h.End, Msg: fmt.Sprintf(
					"%s, written at %s (version %s), had no task submitted at the end", v.key, x.at(sp.from), v.etag)})
			case sp.to.Before(due) || due.After(x.h.End):
			case !ok || at.After(due):
				vs = append(vs, Violation{Kind: KindIngest, Time: due, Msg: fmt.Sprintf(
					"%s, written at %s (version %s), was there until %s, and had no task submitted by %s (IngestBound of time outside the brownouts after it was written)",
					v.key, x.at(sp.from), v.etag, x.at(sp.to), x.at(due))})
			}
		}
	}
	for id, v := range sourceOf {
		inputs := x.inputsOf(id)
		if len(inputs) == 0 {
			continue
		}
		if w := inputs[0]; md5hex(w.Body) != v.etag {
			vs = append(vs, Violation{Kind: KindIngest, Task: id, Time: w.Time, Msg: fmt.Sprintf(
				"task %s, made of version %s of %s, got an input of version %s", id, v.etag, v.key, md5hex(w.Body))})
		}
	}
	for _, c := range x.h.Calls {
		if c.Kind == CallIngest && c.Transition {
			vs = append(vs, Violation{Kind: KindIngest, Task: c.TaskID, Time: c.End, Msg: fmt.Sprintf(
				"%s's Ingest of %s failed with a transition error: %s", c.Proc, c.Key, c.Err)})
		}
	}
	return vs
}

// checkInputOnce: S3 applied at most one write of each task's input. A
// presigned PUT and UploadInput create it with If-None-Match, and a
// presigned POST form, which S3 lets replace its object until it expires,
// addresses the task's upload object, which Submit copies to the input
// create-only: so neither a resend nor a form posted again after Submit,
// or after the task completed, can replace the input Submit verified.
func checkInputOnce(x *index) []Violation {
	var vs []Violation
	for _, id := range x.tasks {
		in := x.inputsOf(id)
		if len(in) < 2 {
			continue
		}
		vs = append(vs, Violation{Kind: KindInput, Task: id, Time: in[1].Time, Msg: fmt.Sprintf(
			"task %s's input was written %d times: by %s at %s (%q), then by %s at %s (%q)",
			id, len(in), in[0].Proc, x.at(in[0].Time), clip(in[0].Body), in[1].Proc, x.at(in[1].Time), clip(in[1].Body))})
	}
	return vs
}

// clip returns body as text for a message, cut to 40 bytes.
func clip(body []byte) string {
	if len(body) > 40 {
		return string(body[:40]) + "…"
	}
	return string(body)
}

// inputsOf returns the PUTs of task id's input, in order.
func (x *index) inputsOf(id string) []*Write {
	var out []*Write
	key := x.h.Prefix + id + "/input"
	for i := range x.h.Writes {
		if w := &x.h.Writes[i]; w.Key == key && w.Method == "PUT" {
			out = append(out, w)
		}
	}
	return out
}
