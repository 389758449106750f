// Package baseline holds deliberately naive ways of keeping a task queue in
// S3, so that the benchmark program (internal/cmd/bench) can run them next to
// s3task on the same server and count what they cost and what they break.
//
// They are NOT features of s3task and must never be offered as such: two of
// them lose or duplicate tasks under concurrency, which is the point of
// measuring them. Nothing outside the benchmark and its tests uses them.
//
// The designs:
//
//   - [SharedQueue] with Conditional false: one JSON object listing the
//     pending task IDs, rewritten by every producer and worker with a plain
//     read-modify-write. The last writer wins, so a worker's stale copy can
//     put a taken task back (a duplicate) or drop one a producer just added
//     (a lost task).
//   - [SharedQueue] with Conditional true: the same object, written with
//     If-Match on the ETag that was read. Correct, but every producer and
//     worker contends for one object, and each lost race costs a GET and a
//     PUT.
//   - [RenameQueue]: one object per pending task, "renamed" into a
//     processing folder by a copy and a delete. S3 has no rename, and two
//     workers that copy before either deletes both believe they won.
package baseline

import (
	"context"
	"errors"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// Queue is the interface every design offers the benchmark. A Queue value
// belongs to one producer or one worker (it holds that machine's S3 client);
// make one per goroutine that plays a machine.
type Queue interface {
	// Init prepares an empty queue. Call it once, before anything else.
	Init(ctx context.Context) error
	// Push adds a task ID: the producer side.
	Push(ctx context.Context, id string) error
	// Pop takes a task for this worker and returns its ID, or "" when the
	// queue looked empty.
	Pop(ctx context.Context) (string, error)
	// Done tells the queue the worker finished the task.
	Done(ctx context.Context, id string) error
}

// errorCode returns the S3 error code of err, if any.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// httpStatus returns the HTTP status of a failed S3 call, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// isMissing reports whether err says the key does not exist.
func isMissing(err error) bool {
	c := errorCode(err)
	return c == "NoSuchKey" || c == "NotFound" || (c != "NoSuchBucket" && httpStatus(err) == 404)
}

// isConflict reports whether a conditional write was refused because the
// object changed (412), or a concurrent conditional write was in flight (409).
func isConflict(err error) bool {
	switch errorCode(err) {
	case "PreconditionFailed", "ConditionalRequestConflict":
		return true
	}
	s := httpStatus(err)
	return s == 412 || s == 409
}
