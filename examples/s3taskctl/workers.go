package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

func workersCmd(fs *flag.FlagSet) runFunc {
	liveOnly := fs.Bool("live", false, "show only the live workers")
	return func(ctx context.Context, c *cli, _ []string) error {
		store, err := c.open(ctx)
		if err != nil {
			return err
		}
		list, err := store.Workers(ctx)
		if err != nil {
			return err
		}
		doc := taskview.WorkersOf(list, *liveOnly)
		if c.set.json {
			c.writeJSON(doc)
			return nil
		}
		now := list.At
		fmt.Fprintf(c.stdout, "%s listed, %d live (by the S3 server's clock, %s)\n", plural(len(doc.Workers), "worker"), doc.Live, now.UTC().Format("2006-01-02 15:04:05Z"))
		if list.Truncated {
			fmt.Fprintf(c.stdout, "note: more than %d presence objects: only the first %d were read\n", s3task.MaxWorkers, s3task.MaxWorkers)
		}
		if len(doc.Workers) > 0 {
			fmt.Fprintln(c.stdout, "BUSY, LAST POLL and RUNNING are each worker's word as of its LAST SEEN write; one that stops writing stays live for two of its presence intervals and its clock margin after it (live_until in -json)")
			tw := newTable(c.stdout)
			tw.row("WORKER", "LIVE", "HOST", "BUSY", "TYPES", "LAST SEEN", "LAST POLL", "STARTED", "VERSION", "RUNNING")
			for _, w := range doc.Workers {
				poll := "never"
				if w.LastPollAt != nil {
					poll = agoUpTo(*w.LastPollAt, now)
				}
				tw.row(clean(w.ID, 48), yesNo(w.Live), orDash(clean(w.Host, 32)), fmt.Sprintf("%d/%d", len(w.Running), w.Concurrency),
					typesText(w.Types), agoUpTo(w.LastSeen, now), poll, agoUpTo(w.StartedAt, now), orDash(clean(w.Version, 24)), orDash(strings.Join(w.Running, ",")))
			}
			tw.flush()
		}
		for _, b := range doc.Broken {
			fmt.Fprintf(c.stdout, "UNREADABLE %s: %s\n", clean(b.Key, 300), clean(b.Error, 300))
		}
		return nil
	}
}

// typesText is the types a worker claims, for a table: "*" for every type,
// "(none)" for none, "(no type)" for the empty type.
func typesText(types []string) string {
	switch {
	case types == nil:
		return "*"
	case len(types) == 0:
		return "(none)"
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = clean(t, 24)
		if t == "" {
			names[i] = "(no type)"
		}
	}
	s := strings.Join(names, ",")
	if len(types) > 4 {
		s = strings.Join(names[:4], ",") + ",+" + strconv.Itoa(len(types)-4)
	}
	return s
}

// agoUpTo is ago for a time a worker wrote by its own estimate of the
// server's clock, which may lead this one's a little: never in the future.
func agoUpTo(t, now time.Time) string {
	if t.After(now) {
		t = now
	}
	return ago(t, now)
}
