package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// Event paths. With -events-token the process serves POST /s3-events, the
// webhook of the S3 server's event notifications, and passes what it takes
// to whatever it runs that can use it:
//
//   - its worker, for an event of a task's marker or record: the worker
//     visits that task at once, without waiting for its next poll;
//   - its Ingester (-ingest), for an object written under the folder: the
//     object becomes a task at once, without waiting for the next sweep.
//
// A process that runs neither would take deliveries and drop them, so the
// configuration refuses it (see validateEvents): -mode api needs -ingest,
// and -mode worker, which has no API listener, needs -events-listen.
// Marker events reaching a -mode api process are not passed on: the Store
// call that wrote the marker (Submit, Retry, Schedule) has announced it in
// the bucket's wake object already, which the workers check every -poll;
// copying the event there would cost a GET and a PUT per event and tell
// the workers nothing new.

// eventRelay is the webhook's Notifier. Until start has made the worker
// and the Ingester it drops events: the worker's first listing and the
// Ingester's first sweep, which come after, find whatever those events
// named. That lets the webhook answer (versitygw posts a test event when it
// starts, and will not start if nobody listens) while csvbatch still waits
// for S3.
type eventRelay struct {
	to      atomic.Pointer[[]eventTarget]
	metrics *metrics
}

// eventTarget is one of the process's event paths: a worker or an
// Ingester, named for the metrics.
type eventTarget struct {
	name string // "worker" or "ingest"
	n    s3event.Notifier
}

// set makes ts the targets of every event from now on.
func (r *eventRelay) set(ts []eventTarget) { r.to.Store(&ts) }

// Notify passes e to every target, as s3event.All does, and counts the
// targets it concerned.
func (r *eventRelay) Notify(e s3task.ObjectEvent) bool {
	ts := r.to.Load()
	if ts == nil {
		return false
	}
	took := false
	for _, t := range *ts {
		if t.n.Notify(e) {
			r.metrics.events.WithLabelValues(t.name).Inc()
			took = true
		}
	}
	return took
}

// startEvents makes the webhook's handler, with -events-token. With
// -events-listen it serves it there at once, before start waits for S3;
// otherwise startHTTP serves it on the API listener.
func (a *app) startEvents() error {
	if a.cfg.eventsToken == "" {
		return nil
	}
	a.events = &eventRelay{metrics: a.metrics}
	h, err := s3event.NewHandler(a.events, &s3event.HandlerOptions{Token: a.cfg.eventsToken})
	if err != nil {
		return err
	}
	a.eventsHandler = h
	if a.cfg.eventsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.cfg.eventsListen)
	if err != nil {
		return fmt.Errorf("-events-listen %s: %w", a.cfg.eventsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/s3-events", h) // it answers 405 to anything but POST
	a.eventsURL = "http://" + ln.Addr().String() + "/s3-events"
	a.eventsSrv, a.eventsErr = a.serve(ln, mux)
	return nil
}

// connectEvents makes the worker and the Ingester, whichever this process
// runs, the targets of the webhook's events. It is called before either
// starts, so that no event between their first look at the bucket and
// this is lost.
func (a *app) connectEvents() {
	if a.events == nil {
		return
	}
	var ts []eventTarget
	if a.worker != nil {
		ts = append(ts, eventTarget{"worker", a.worker})
	}
	if a.ingester != nil {
		ts = append(ts, eventTarget{"ingest", a.ingester})
	}
	a.events.set(ts)
}

// eventPaths says, for the banner, where the webhook is and what its events
// do in this process, or that there is none and what takes its place.
func (a *app) eventPaths() string {
	if a.events == nil {
		var s []string
		if a.worker != nil {
			s = append(s, fmt.Sprintf("the worker finds new tasks by polling (-poll %s, -poll-max %s)", a.cfg.pollInterval, a.cfg.maxPollInterval))
		}
		if a.ingester != nil {
			s = append(s, fmt.Sprintf("the ingest finds files by sweeping %s (-ingest-sweep %s)", a.cfg.ingestPrefix, a.cfg.ingestSweep))
		}
		if len(s) == 0 {
			return "none (no -events-token)"
		}
		return "none (no -events-token): " + strings.Join(s, "; ")
	}
	where := a.eventsURL + " (its own listener)"
	if a.eventsURL == "" {
		where = a.baseURL + "/s3-events"
	}
	var does []string
	if a.worker != nil {
		does = append(does, "wake this worker for the tasks they name")
	}
	if a.ingester != nil {
		does = append(does, "make tasks of the files under "+a.cfg.ingestPrefix)
	}
	s := "POST " + where + ", token required: " + strings.Join(does, "; ")
	if a.worker == nil {
		s += "; no worker here: the workers learn of new tasks from the bucket's wake object, every -poll"
	}
	return s
}
