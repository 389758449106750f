package baseline

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
)

// RenameQueue keeps one empty object per pending task under Prefix+"pending/"
// and claims a task by "renaming" it to Prefix+"processing/": a CopyObject
// followed by a DeleteObject, since S3 has no rename. A copy whose source
// is already gone fails, and the worker tries the next task; but two workers
// that both copy before either deletes both think they hold the task, and a
// worker that dies between copy and delete leaves the task in both folders.
type RenameQueue struct {
	Client *s3.Client
	Bucket string
	Prefix string // ends in "/", e.g. "baseline/rename/"
}

var _ Queue = (*RenameQueue)(nil)

func (q *RenameQueue) objects() s3test.Objects {
	return s3test.Objects{Client: q.Client, Bucket: q.Bucket}
}

func (q *RenameQueue) pending(id string) string    { return q.Prefix + "pending/" + id }
func (q *RenameQueue) processing(id string) string { return q.Prefix + "processing/" + id }

// Init does nothing: an empty folder needs no object.
func (q *RenameQueue) Init(context.Context) error { return nil }

// Push writes the task's pending object. Requests: one PUT.
func (q *RenameQueue) Push(ctx context.Context, id string) error {
	key := q.pending(id)
	if _, err := q.objects().Put(ctx, key, nil); err != nil {
		return fmt.Errorf("baseline: push %s: %w", key, err)
	}
	return nil
}

// Pop lists the pending folder (one page, oldest key first) and renames the
// first task it can. Requests: a LIST, then a copy (billed as a PUT) per
// task tried and a DELETE for the one taken.
func (q *RenameQueue) Pop(ctx context.Context) (string, error) {
	dir := q.Prefix + "pending/"
	out, err := q.Client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &q.Bucket, Prefix: &dir})
	if err != nil {
		return "", fmt.Errorf("baseline: list %s: %w", dir, err)
	}
	for _, obj := range out.Contents {
		id := strings.TrimPrefix(aws.ToString(obj.Key), dir)
		src, dst := q.pending(id), q.processing(id)
		_, err := q.Client.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket: &q.Bucket, Key: &dst, CopySource: aws.String(q.Bucket + "/" + src), // keys here need no escaping
		})
		if s3x.NotFound(err) {
			continue // another worker renamed it first
		}
		if err != nil {
			return "", fmt.Errorf("baseline: copy %s: %w", src, err)
		}
		if err := q.objects().Delete(ctx, src); err != nil {
			return "", fmt.Errorf("baseline: delete %s: %w", src, err)
		}
		return id, nil
	}
	return "", nil
}

// Done deletes the task's processing object. Requests: one DELETE.
func (q *RenameQueue) Done(ctx context.Context, id string) error {
	key := q.processing(id)
	if err := q.objects().Delete(ctx, key); err != nil {
		return fmt.Errorf("baseline: done %s: %w", key, err)
	}
	return nil
}
