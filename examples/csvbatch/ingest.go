package main

import (
	"path"
	"unicode/utf8"

	"github.com/s3task/s3task"
)

// newIngester makes the Ingester of the -ingest folder, if any: each file
// put there (by a partner, an export, `aws s3 cp`) becomes a task of
// -ingest-type, one per version, named after the file. It learns of files
// from the webhook (-events-token) and from a listing every -ingest-sweep.
// It runs in any mode: ingest needs only the Store, so the process that
// takes the events can run it whether or not it runs a worker. Several
// processes may run one on the same folder: a version still makes one
// task, and each sweep costs a LIST. start runs it.
func (a *app) newIngester() error {
	if a.cfg.ingestPrefix == "" {
		return nil
	}
	in, err := s3task.NewIngester(a.store, &s3task.IngestOptions{
		Prefix:        a.cfg.ingestPrefix,
		SweepInterval: a.cfg.ingestSweep,
		Logger:        a.log,
		Params: func(o s3task.Object) s3task.CreateParams {
			return s3task.CreateParams{Name: fileName(o.Key), Type: a.cfg.ingestType, CreatedBy: "ingest"}
		},
	})
	if err != nil {
		return err
	}
	a.ingester = in
	a.metrics.watchIngester(in)
	return nil
}

// fileName names the task of the object key: its last path element, cut
// to the longest task name at a character boundary, since an S3 key may
// be four times as long. The record's metadata keeps the whole key.
func fileName(key string) string {
	name := path.Base(key)
	if len(name) <= maxNameBytes {
		return name
	}
	n := maxNameBytes
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}
