package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
)

// SharedQueue keeps every pending task ID in one JSON object that producers
// and workers rewrite by read-modify-write. With Conditional false the write
// is unconditional, the design the seed article 001 warns against; with
// Conditional true it carries If-Match and a lost race is re-read and
// redone.
type SharedQueue struct {
	Client *s3.Client
	Bucket string
	Key    string // e.g. "baseline/queue.json"

	// Conditional makes every rewrite an If-Match on the ETag that was read.
	Conditional bool
}

// queueFile is the stored form of the queue.
type queueFile struct {
	Pending []string `json:"pending"`
}

var _ Queue = (*SharedQueue)(nil)

// Init writes an empty queue. Requests: one PUT.
func (q *SharedQueue) Init(ctx context.Context) error {
	return q.write(ctx, queueFile{Pending: []string{}}, "")
}

// read returns the queue and its ETag. A missing object is an empty queue.
func (q *SharedQueue) read(ctx context.Context) (queueFile, string, error) {
	data, etag, err := s3test.Objects{Client: q.Client, Bucket: q.Bucket}.Get(ctx, q.Key)
	if s3x.NotFound(err) {
		return queueFile{}, "", nil
	}
	if err != nil {
		return queueFile{}, "", fmt.Errorf("baseline: read %s: %w", q.Key, err)
	}
	var f queueFile
	if err := json.Unmarshal(data, &f); err != nil {
		return queueFile{}, "", fmt.Errorf("baseline: decode %s: %w", q.Key, err)
	}
	return f, etag, nil
}

// write stores f. In conditional mode it needs the ETag read with it: an
// empty etag then means "create", with If-None-Match: *.
func (q *SharedQueue) write(ctx context.Context, f queueFile, etag string) error {
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	in := &s3.PutObjectInput{
		Bucket: &q.Bucket, Key: &q.Key, Body: bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json"),
	}
	if q.Conditional {
		if etag == "" {
			in.IfNoneMatch = aws.String("*")
		} else {
			in.IfMatch = aws.String(etag)
		}
	}
	_, err = q.Client.PutObject(ctx, in)
	return err
}

// update reads the queue, applies change and writes it back. Without
// Conditional it writes whatever it read, changed, and so overwrites
// anything written in between. With Conditional it starts over after a lost
// race until it wins or ctx ends.
func (q *SharedQueue) update(ctx context.Context, change func(*queueFile) bool) error {
	for {
		f, etag, err := q.read(ctx)
		if err != nil {
			return err
		}
		if !change(&f) {
			return nil
		}
		err = q.write(ctx, f, etag)
		if err == nil {
			return nil
		}
		if !q.Conditional || !s3x.Lost(err) {
			return fmt.Errorf("baseline: write %s: %w", q.Key, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Push appends id to the queue. Requests: GET, PUT (again after each lost
// race in conditional mode).
func (q *SharedQueue) Push(ctx context.Context, id string) error {
	return q.update(ctx, func(f *queueFile) bool {
		f.Pending = append(f.Pending, id)
		return true
	})
}

// Pop removes the first ID from the queue and returns it, or "" if the
// queue is empty. Requests: GET, and a PUT unless the queue was empty.
func (q *SharedQueue) Pop(ctx context.Context) (string, error) {
	var id string
	err := q.update(ctx, func(f *queueFile) bool {
		id = ""
		if len(f.Pending) == 0 {
			return false
		}
		id, f.Pending = f.Pending[0], f.Pending[1:]
		return true
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Done does nothing: the task left the queue when it was popped.
func (q *SharedQueue) Done(context.Context, string) error { return nil }
