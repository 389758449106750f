package main

import (
	"context"
	"net/http"
	"path"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// startIngest runs an Ingester of the -ingest folder: each file put there
// (by a partner, an export, `aws s3 cp`) becomes a task of -ingest-type, one
// per version, named after the file. It learns of files from the webhook
// (-events-token) and from a listing every -ingest-sweep.
func (a *app) startIngest(ctx context.Context) error {
	if a.cfg.ingestPrefix == "" {
		return nil
	}
	in, err := s3task.NewIngester(a.store, &s3task.IngestOptions{
		Prefix:        a.cfg.ingestPrefix,
		SweepInterval: a.cfg.ingestSweep,
		Logger:        a.log,
		Params: func(o s3task.Object) s3task.CreateParams {
			return s3task.CreateParams{Name: path.Base(o.Key), Type: a.cfg.ingestType, CreatedBy: "ingest"}
		},
	})
	if err != nil {
		return err
	}
	ictx, cancel := context.WithCancel(ctx)
	a.ingester, a.stopIngest, a.ingestDone = in, cancel, make(chan struct{})
	go func() {
		defer close(a.ingestDone)
		_ = in.Run(ictx)
	}()
	return nil
}

// registerEvents serves POST /s3-events, the webhook of the S3 server's
// event notifications, with -events-token: each delivery wakes this
// process's worker for the task it names and feeds its Ingester. It
// answers with s3event's status codes; the API's own tokens do not apply.
func (a *app) registerEvents(mux *http.ServeMux) error {
	if a.cfg.eventsToken == "" {
		return nil
	}
	var to []s3event.Notifier
	if a.worker != nil {
		to = append(to, a.worker)
	}
	if a.ingester != nil {
		to = append(to, a.ingester)
	}
	h, err := s3event.NewHandler(s3event.All(to...), &s3event.HandlerOptions{Token: a.cfg.eventsToken})
	if err != nil {
		return err
	}
	mux.Handle("POST /s3-events", h)
	return nil
}
