// Package s3event feeds S3 event notifications to s3task workers, so that a
// worker starts a new task within a round trip of its Submit instead of at
// its next poll.
//
// An S3 bucket (or a self-hosted server: versitygw, MinIO, Ceph RGW) sends a
// notification when an object is written or deleted. Pointed at a worker,
// the notifications of the Store's marker folder and records tell it which
// task to visit; the worker reads the record and claims the task if it is
// due, with no LIST. Events are hints only: the record decides, so a
// duplicate, late, out-of-order, foreign or forged event costs a GET at
// most, never a wrong start.
//
// Ways in:
//
//   - [Handler] is an http.Handler for webhook deliveries (versitygw's
//     --event-webhook-url, MinIO's notify_webhook, and others);
//   - [Parse] and [Deliver] serve any other transport: a message broker's
//     subscriber, a queue's consumer, a function invoked with the event.
//
// A worker that gets events can poll slowly: with PollInterval of two
// minutes and MaxPollInterval of ten, an idle worker sends under one request
// a minute and still finds, within those ten minutes, anything an event
// missed. See s3task.Worker.Notify.
//
// # Keys
//
// AWS sends object keys form-encoded (a space as "+", other bytes
// percent-encoded); some servers (versitygw among them) send the key as it
// is. Deliver tries the decoded key first, and the key as sent if the
// decoded one names nothing the worker knows; the library's own keys (IDs,
// timestamps, the prefix) decode to themselves either way unless the
// Store's prefix holds "+" or "%".
//
// # Floods
//
// A delivery the [Handler] accepts passes on at most
// [HandlerOptions.MaxRecords] events (default 10); one with more is
// refused whole. Each event costs its Notifier at most this much: a worker,
// one GET of the record the event names (none for a key that is not a
// marker or a record of its Store); an [s3task.Ingester], nothing for a
// key outside its folder, one HEAD for a key in it that names no object,
// which makes no task (two when the key reads two ways, see Keys), and
// for an object that is there what [s3task.Store.Ingest] costs, which
// makes at most one task per version.
// So N accepted deliveries of events for objects that do not exist cost at
// most 10·N requests, or 20·N, and make nothing. What waits is bounded too:
// a worker and an Ingester each keep at most 4,096 events they have not
// acted on, and drop the rest for one listing (the worker's LIST of the
// markers, the Ingester's sweep of its folder). Nothing bounds how many
// deliveries come but the sender: the token keeps out everyone else, and
// a delivery without it is refused before its body is read. Behind a
// webhook others can reach without the token (Unauthenticated), limit the
// rate in front of the handler.
package s3event

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/s3task/s3task"
)

// A Record is one object's event, as the notification says it.
type Record struct {
	// Name is the event's name without its "s3:" prefix, e.g.
	// "ObjectCreated:Put" or "ObjectRemoved:Delete".
	Name string
	// Bucket is the bucket's name.
	Bucket string
	// Key is the object's key as sent: form-encoded by AWS, as it is by
	// some other servers. See [DecodeKey].
	Key string
	// ETag, VersionID and Sequencer are as sent, "" when absent.
	ETag, VersionID, Sequencer string
	// Size is the object's size in bytes, as sent; -1 if absent.
	Size int64
}

// Created reports whether the record says an object was written.
func (r Record) Created() bool { return strings.HasPrefix(r.Name, "ObjectCreated:") }

// Removed reports whether the record says an object was deleted, by a
// request or by a lifecycle rule.
func (r Record) Removed() bool {
	return strings.HasPrefix(r.Name, "ObjectRemoved:") || strings.HasPrefix(r.Name, "LifecycleExpiration:")
}

// ErrNotEvent is returned by [Parse] for a body that is not an S3 event
// notification.
var ErrNotEvent = errors.New("s3event: not an S3 event notification")

// wire is the JSON of a notification: S3's own ("Records"), wrapped in an
// SNS message ("Type": "Notification", "Message": the event as a string),
// or S3's test event ("Event": "s3:TestEvent").
type wire struct {
	Records *[]struct {
		EventName string `json:"eventName"`
		S3        struct {
			Bucket struct {
				Name string `json:"name"`
			} `json:"bucket"`
			Object struct {
				Key       string `json:"key"`
				Size      *int64 `json:"size"`
				ETag      string `json:"eTag"`
				VersionID string `json:"versionId"`
				Sequencer string `json:"sequencer"`
			} `json:"object"`
		} `json:"s3"`
	} `json:"Records"`
	Type    string `json:"Type"`
	Message string `json:"Message"`
	Event   string `json:"Event"`
}

// Parse reads an S3 event notification: S3's JSON (a "Records" array), the
// same wrapped in an SNS notification, or S3's test event, which has no
// records. It returns ErrNotEvent, wrapped, for anything else, and for a
// record without an event name, bucket or key.
func Parse(body []byte) ([]Record, error) {
	return parse(body, true)
}

func parse(body []byte, unwrap bool) ([]Record, error) {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEvent, err)
	}
	switch {
	case w.Records != nil:
	case w.Event == "s3:TestEvent":
		return nil, nil
	case unwrap && w.Type == "Notification" && w.Message != "":
		return parse([]byte(w.Message), false)
	default:
		return nil, fmt.Errorf("%w: no Records", ErrNotEvent)
	}
	out := make([]Record, 0, len(*w.Records))
	for i, r := range *w.Records {
		o := r.S3.Object
		if r.EventName == "" || r.S3.Bucket.Name == "" || o.Key == "" {
			return nil, fmt.Errorf("%w: record %d has no event name, bucket or key", ErrNotEvent, i)
		}
		size := int64(-1)
		if o.Size != nil {
			size = *o.Size
		}
		out = append(out, Record{
			Name:      strings.TrimPrefix(r.EventName, "s3:"),
			Bucket:    r.S3.Bucket.Name,
			Key:       o.Key,
			ETag:      strings.Trim(o.ETag, `"`),
			VersionID: o.VersionID,
			Sequencer: o.Sequencer,
			Size:      size,
		})
	}
	return out, nil
}

// DecodeKey decodes an object key as AWS sends it in event notifications:
// "+" stands for a space, then percent-decoding. It reports false for a key
// that is not validly encoded.
func DecodeKey(key string) (string, bool) {
	k, err := url.QueryUnescape(key)
	return k, err == nil
}

// A Notifier takes what an event says about an object and reports whether
// it concerned it. *s3task.Worker is one.
type Notifier interface {
	// Notify takes one object's event and reports whether it concerned
	// the Notifier.
	Notify(s3task.ObjectEvent) bool
}

// Deliver passes the records that say an object was written or deleted to
// n, with the key decoded (see [DecodeKey]), and as sent if n took no
// interest in the decoded one; it returns how many concerned n.
func Deliver(n Notifier, records []Record) int {
	took := 0
	for _, r := range records {
		if !r.Created() && !r.Removed() {
			continue
		}
		e := s3task.ObjectEvent{Bucket: r.Bucket, Key: r.Key, Removed: r.Removed(), VersionID: r.VersionID, ETag: r.ETag, Size: r.Size}
		if k, ok := DecodeKey(r.Key); ok && k != r.Key {
			d := e
			d.Key, d.RawKey = k, r.Key
			if n.Notify(d) {
				took++
				continue
			}
		}
		if n.Notify(e) {
			took++
		}
	}
	return took
}

// All returns a Notifier that passes every event to each of ns, in order,
// and reports whether any of them took an interest: one webhook or
// subscription then feeds a worker and an s3task.Ingester alike.
func All(ns ...Notifier) Notifier { return all(ns) }

type all []Notifier

func (a all) Notify(e s3task.ObjectEvent) bool {
	took := false
	for _, n := range a {
		took = n.Notify(e) || took
	}
	return took
}
