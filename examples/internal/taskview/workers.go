package taskview

import (
	"time"

	"github.com/s3task/s3task"
)

// Workers is a listing of the workers that announce themselves, as the
// example service's GET /workers and "s3taskctl workers -json" show it.
type Workers struct {
	ReadAt    time.Time `json:"read_at"` // the S3 server's time, by which live was judged
	Workers   []Worker  `json:"workers"`
	Live      int       `json:"live"`      // how many of Workers are live
	Broken    []Broken  `json:"broken"`    // presence objects that cannot be read
	Truncated bool      `json:"truncated"` // more than s3task.MaxWorkers objects: only the first were read
}

// Worker is one worker as its presence object tells it.
type Worker struct {
	ID                      string     `json:"worker_id"`
	Live                    bool       `json:"live"`
	Host                    string     `json:"host"`
	Concurrency             int        `json:"concurrency"`
	Types                   []string   `json:"types"` // null: every type
	Version                 string     `json:"library_version"`
	StartedAt               time.Time  `json:"started_at"`
	LastPollAt              *time.Time `json:"last_poll_at"` // null: not yet
	LastSeen                time.Time  `json:"last_seen"`
	LiveUntil               time.Time  `json:"live_until"` // when it turns not live if it reports nothing more
	Running                 []string   `json:"running"`    // the IDs of the tasks it held at its latest write
	PresenceIntervalSeconds float64    `json:"presence_interval_seconds"`
}

// WorkersOf returns the view of list, its times in UTC; liveOnly leaves
// out the workers that are not live (Live still counts them all).
func WorkersOf(list *s3task.WorkerList, liveOnly bool) Workers {
	doc := Workers{ReadAt: list.At.UTC(), Workers: []Worker{}, Broken: []Broken{}, Truncated: list.Truncated}
	for _, w := range list.Workers {
		if w.Err != nil {
			doc.Broken = append(doc.Broken, Broken{Key: w.Key, Error: w.Err.Error()})
			continue
		}
		if w.Live {
			doc.Live++
		}
		if liveOnly && !w.Live {
			continue
		}
		v := Worker{
			ID: w.ID, Live: w.Live, Host: w.Host, Concurrency: w.Concurrency, Types: w.Types, Version: w.Version,
			StartedAt: w.StartedAt.UTC(), LastSeen: w.LastSeen.UTC(), LiveUntil: w.LiveUntil.UTC(), Running: w.Running,
			PresenceIntervalSeconds: w.PresenceInterval.Seconds(),
		}
		if v.Running == nil {
			v.Running = []string{}
		}
		if !w.LastPollAt.IsZero() {
			at := w.LastPollAt.UTC()
			v.LastPollAt = &at
		}
		doc.Workers = append(doc.Workers, v)
	}
	return doc
}
