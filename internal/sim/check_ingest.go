package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/s3task/s3task"
)

// checkIngest, in a world with Config.Ingest: every version of a file
// under the folder (a body S3 applied there) has at most one task whose
// metadata names it as the source (one key per version: no duplicate
// however the events came); the current version of every file at the end
// has one, unless the run was capped; and a task's input, once written, is
// the version its metadata names.
func checkIngest(x *index) []Violation {
	type version struct{ key, etag string }
	tasks := map[version][]string{} // by source, in order of first record
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
				break
			}
		}
	}
	var vs []Violation
	for v, ids := range tasks {
		if len(ids) > 1 {
			vs = append(vs, Violation{Kind: KindIngest, Task: ids[1], Time: x.h.End, Msg: fmt.Sprintf(
				"version %s of %s has %d tasks: %s", v.etag, v.key, len(ids), strings.Join(ids, ", "))})
		}
	}
	current := map[string]*Write{} // file -> its last write
	for i := range x.h.Writes {
		w := &x.h.Writes[i]
		if strings.HasPrefix(w.Key, ingestFolder) {
			current[w.Key] = w
		}
	}
	if !x.h.Capped {
		for key, w := range current {
			if w.Method == "DELETE" {
				continue
			}
			if v := (version{key, md5hex(w.Body)}); len(tasks[v]) == 0 {
				vs = append(vs, Violation{Kind: KindIngest, Time: x.h.End, Msg: fmt.Sprintf(
					"%s, written at %s (version %s), had no task at the end", key, x.at(w.Time), v.etag)})
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
