package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/s3task/s3task"
)

// A rush (Config.Rush) is rushProcs operator processes that each submit
// rushCalls tasks at one moment, from as many goroutines on the one Store
// of the process: many Submits at once, racing one another for the wake
// object within a process (where they gather into one write) and across
// processes (where the compare-and-set sorts them out). Every one of them
// must be announced (checkAnnounced).
const (
	rushProcs = 4
	rushCalls = 4
)

// rush plays the rush of processes ps: each goroutine creates its task and
// uploads its input in the minute before at, then submits it at at. Their
// lives are numbered from first.
func (w *World) rush(ps []*proc, at time.Time, first int) {
	if d := time.Until(at.Add(-time.Minute)); d > 0 && !w.sleep(d) {
		return
	}
	var wg sync.WaitGroup
	for i, p := range ps {
		// A process's lives create their tasks one after another: a
		// failed Create names no task, and checkAPI tells a process's
		// Creates apart by time only.
		turn := make(chan struct{})
		close(turn)
		for j := range rushCalls {
			slot, mine, next := i*rushCalls+j, turn, make(chan struct{})
			turn = next
			wg.Go(func() { w.rushLife(p, first+slot, at, slot, mine, next) })
		}
	}
	wg.Wait()
}

// rushBackoff is the wait before try (from 1) of a rush's call. It draws
// nothing: the goroutines of a process share its random stream.
func rushBackoff(try int) time.Duration { return time.Second << min(try, 5) }

// rushLife is one life of a rush: create and upload, once the life before
// it in its process has (turn; done when this one has), and, at at,
// submit; each step retried as a service would. The task is known to the world (see
// settled) once submitted.
//
// Each life of the rush begins its calls, and ends them, at an instant of
// its own (slot tenths of a millisecond after the others'): goroutines of
// one process that went on at the same instant of virtual time would draw
// the Store's randomness (task IDs, revisions) and the history's sequence
// numbers in the order the Go scheduler ran them, and a seed would not
// replay. The calls of one Store whose announcements one write carried
// learn that at the same instant.
func (w *World) rushLife(p *proc, n int, at time.Time, slot int, turn <-chan struct{}, done chan<- struct{}) {
	ctx := context.Background()
	apart := time.Duration(slot) * 100 * time.Microsecond
	at = at.Add(apart)
	created := false
	defer func() {
		if !created {
			close(done)
		}
	}()
	<-turn
	if !w.sleep(apart) {
		return
	}
	params := s3task.CreateParams{
		Name:      fmt.Sprintf("t%d", n),
		Type:      simTypes[n%len(simTypes)],
		Payload:   json.RawMessage(fmt.Sprintf(`{"life":%d}`, n)),
		CreatedBy: p.name,
	}
	var t *s3task.Task
	for try := 0; try < 30 && t == nil; try++ {
		if try > 0 && !w.sleep(rushBackoff(try)+apart) {
			return
		}
		t, _ = p.callCtx(ctx, Call{Kind: CallCreate}, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Create(ctx, params)
		}, nil)
	}
	if t == nil {
		return
	}
	id := t.ID
	uploaded := false
	for try := 0; try < 30 && !uploaded; try++ {
		if try > 0 && !w.sleep(rushBackoff(try)+apart) {
			return
		}
		_, err := p.callCtx(ctx, Call{Kind: CallUploadInput, TaskID: id}, func(ctx context.Context) (*s3task.Task, error) {
			return nil, p.store.UploadInput(ctx, id, strings.NewReader(fmt.Sprintf("input of life %d", n)))
		}, nil)
		// The input is there: a resend of ours put it (an answer lost).
		uploaded = err == nil || errors.Is(err, s3task.ErrInputExists)
	}
	if !uploaded {
		w.rushCancel(p, id, apart)
		return
	}
	created = true
	close(done)
	if d := time.Until(at); d > 0 && !w.sleep(d) {
		return
	}
	for try := 0; try < 30; try++ {
		if try > 0 && !w.sleep(rushBackoff(try)+apart) {
			return
		}
		_, err := p.callCtx(ctx, Call{Kind: CallSubmit, TaskID: id}, func(ctx context.Context) (*s3task.Task, error) {
			t, err := p.store.Submit(ctx, id)
			time.Sleep(apart + time.Microsecond) // see above
			return t, err
		}, nil)
		if err == nil || errors.Is(err, s3task.ErrInvalidTransition) {
			w.mu.Lock()
			w.index[id] = n
			w.mu.Unlock()
			return
		}
	}
	w.rushCancel(p, id, apart)
}

// rushCancel abandons a rush's task that could not be submitted, as a
// service would, retrying until the call succeeds or the task is beyond
// cancelling.
func (w *World) rushCancel(p *proc, id string, apart time.Duration) {
	for try := 0; try < 30; try++ {
		if try > 0 && !w.sleep(rushBackoff(try)+apart) {
			return
		}
		_, err := p.callCtx(context.Background(), Call{Kind: CallCancel, TaskID: id}, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Cancel(ctx, id, "not submitted")
		}, nil)
		if err == nil || errors.Is(err, s3task.ErrInvalidTransition) || errors.Is(err, s3task.ErrNotFound) {
			return
		}
	}
}
