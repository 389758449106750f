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

import "context"

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
