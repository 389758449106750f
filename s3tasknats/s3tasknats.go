// Package s3tasknats feeds the S3 event notifications an S3 server
// publishes on NATS to s3task workers, so that a worker starts a task a
// round trip after its Submit instead of at its next poll.
//
// versitygw publishes them with --event-nats-url nats://HOST:PORT
// --event-nats-topic SUBJECT; MinIO and others with their NATS targets.
// Each message is one notification in S3's JSON (see package s3event),
// which Subscribe parses and passes to the worker's Notify:
//
//	nc, err := nats.Connect(url)
//	sub, err := s3tasknats.Subscribe(nc, "s3-events", worker, nil)
//	defer sub.Drain()
//
// Events are hints, checked against the task's record, so NATS's
// at-most-once delivery is enough: a notification lost while the worker
// was disconnected is made up for by its next poll (see
// s3task.WorkerOptions.PollInterval). Every subscriber hears of every
// task, and the first to claim it wins; the others spend a GET each. With
// Options.Queue, the workers share the notifications instead, each going
// to one of them, as a webhook's would; a busy one then leaves the task to
// the others' polling.
//
// This package is a module of its own, so that the library's go.mod names
// no NATS client.
package s3tasknats

import (
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/s3task/s3task/s3event"
)

// Options configure [Subscribe].
type Options struct {
	// Queue, if set, subscribes in that queue group: each notification
	// goes to one member of the group rather than to every subscriber.
	Queue string

	// OnError, if set, is called with each message that is not an S3
	// event notification (it is dropped either way). It runs on the
	// subscription's goroutine: keep it fast.
	OnError func(msg *nats.Msg, err error)
}

// Subscribe subscribes to subject on nc and passes every S3 event
// notification it receives to n (see [s3event.Deliver]); a *s3task.Worker
// is a Notifier. Stop it with the subscription's Unsubscribe or Drain.
// It returns an error for a nil connection or notifier, an empty subject,
// and NATS's own.
func Subscribe(nc *nats.Conn, subject string, n s3event.Notifier, opts *Options) (*nats.Subscription, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case nc == nil:
		return nil, errors.New("s3tasknats: nil connection")
	case n == nil:
		return nil, errors.New("s3tasknats: nil Notifier")
	case subject == "":
		return nil, errors.New("s3tasknats: empty subject")
	}
	handle := func(msg *nats.Msg) {
		records, err := s3event.Parse(msg.Data)
		if err != nil {
			if o.OnError != nil {
				o.OnError(msg, err)
			}
			return
		}
		s3event.Deliver(n, records)
	}
	if o.Queue != "" {
		return nc.QueueSubscribe(subject, o.Queue, handle)
	}
	return nc.Subscribe(subject, handle)
}
