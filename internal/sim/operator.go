package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3x"
)

// OutcomeUnknown reports whether err says a Store call does not know
// whether its write landed ([s3task.ErrOutcomeUnknown]).
func OutcomeUnknown(err error) bool { return errors.Is(err, s3task.ErrOutcomeUnknown) }

// creation is a task life an operator starts at a given time.
type creation struct {
	at      time.Time
	life    int
	sleeper bool // a long run's life that waits hours for its start (see Run)
}

// errand is a step of a task life that comes minutes after the life's
// calls (a browser posting the form again, a start moved nearer): the
// operator does it when its time comes, between its other calls, rather
// than wait for it and start its next lives late.
type errand struct {
	at time.Time
	do func()
}

// later plans do for d from now.
func (p *proc) later(d time.Duration, do func()) {
	e := errand{at: time.Now().Add(d), do: do}
	i, _ := slices.BinarySearchFunc(p.errands, e.at, func(a errand, at time.Time) int {
		return cmp.Or(a.at.Compare(at), -1) // after those planned for the same time
	})
	p.errands = slices.Insert(p.errands, i, e)
}

// operate is the life of operator p: it starts its task lives when they
// are due, does their errands, and meddles with random tasks until the
// turbulence ends, one call at a time.
func (w *World) operate(p *proc, creations []creation, until time.Time) {
	p.calm = until
	nextMeddle := time.Now().Add(p.rng.Exp(50 * time.Second))
	for len(creations) > 0 || len(p.errands) > 0 || nextMeddle.Before(until) {
		const create, run, meddle = 1, 2, 3
		var at time.Time
		next := 0
		if len(creations) > 0 {
			at, next = creations[0].at, create
		}
		if len(p.errands) > 0 && (next == 0 || p.errands[0].at.Before(at)) {
			at, next = p.errands[0].at, run
		}
		if nextMeddle.Before(until) && (next == 0 || nextMeddle.Before(at)) {
			at, next = nextMeddle, meddle
		}
		if d := time.Until(at); d > 0 && !w.sleep(d) {
			return
		}
		switch next {
		case create:
			c := creations[0]
			creations = creations[1:]
			p.create(c)
		case run:
			e := p.errands[0]
			p.errands = p.errands[1:]
			e.do()
		default:
			p.meddle()
			nextMeddle = time.Now().Add(p.rng.Exp(50 * time.Second))
		}
	}
}

// call makes one recorded operator call, sometimes with a deadline.
func (p *proc) call(kind CallKind, id string, f func(ctx context.Context) (*s3task.Task, error)) (*s3task.Task, error) {
	return p.callWith(Call{Kind: kind, TaskID: id}, f, nil)
}

// callWith is call for the call c (its Kind, TaskID and Key filled in),
// whose record after runs once f returned, to add what f learnt.
func (p *proc) callWith(c Call, f func(ctx context.Context) (*s3task.Task, error), after func(c *Call)) (*s3task.Task, error) {
	ctx := context.Background()
	if p.rng.Chance(0.15) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.rng.Dur(2*time.Second, 30*time.Second))
		defer cancel()
		c.Deadline = true
	}
	return p.callCtx(ctx, c, f, after)
}

// callCtx is callWith with the call's context given: it draws nothing from
// the process's stream, so that goroutines of one process may make calls
// at once.
func (p *proc) callCtx(ctx context.Context, c Call, f func(ctx context.Context) (*s3task.Task, error), after func(c *Call)) (*s3task.Task, error) {
	w := p.w
	found := new(bool)
	ctx = context.WithValue(ctx, foundKey{}, found)
	start, startSeq := w.now()
	t, err := f(ctx)
	end, endSeq := w.now()
	c.Proc, c.Start, c.End, c.StartSeq, c.EndSeq = p.name, start, end, startSeq, endSeq
	c.Found = *found
	if t != nil {
		cp := *t
		c.Task = &cp
		if c.TaskID == "" {
			c.TaskID = t.ID
		}
	}
	if err != nil {
		c.Err = err.Error()
		c.OutcomeUnknown = OutcomeUnknown(err)
		var te *s3task.TransitionError
		c.Transition = errors.As(err, &te)
	}
	if after != nil {
		after(&c)
	}
	w.mu.Lock()
	w.h.Calls = append(w.h.Calls, c)
	w.mu.Unlock()
	return t, err
}

// foundKey is the context key of the *bool in which tellFound reports
// Call.Found to callWith.
type foundKey struct{}

// tellFound is the store middleware of every process: it passes what an
// OpCreate's Call.Found said to the call that made it, through ctx.
func tellFound(next s3task.CallFunc) s3task.CallFunc {
	return func(ctx context.Context, c *s3task.Call) (*s3task.Task, error) {
		t, err := next(ctx, c)
		if found, ok := ctx.Value(foundKey{}).(*bool); ok && c.Op == s3task.OpCreate && err == nil {
			*found = c.Found
		}
		return t, err
	}
}

// create starts task life n: create, upload, submit, as a service would,
// retrying what fails for a quarter of an hour; some lives are abandoned
// before they are submitted. A third of the lives are created with an
// idempotency key, half of them one that an earlier life used: its task
// may be live (then the Create returns it, and this life, a resent
// request, ends there), in flight, or purged.
func (p *proc) create(c creation) {
	w, n := p.w, c.life
	params := s3task.CreateParams{
		Name:      fmt.Sprintf("t%d", n),
		Type:      simTypes[p.rng.IntN(len(simTypes))],
		Payload:   json.RawMessage(fmt.Sprintf(`{"life":%d}`, n)),
		CreatedBy: p.name,
	}
	params.MaxAttempts = []int{0, 1, 2, 4}[p.rng.Pick(60, 10, 15, 15)]
	switch p.rng.Pick(76, 12, 8, 4) {
	case 1: // the bubble's clock is the server's
		params.RunAt = time.Now().Add(p.rng.Dur(0, 4*time.Minute))
	case 2: // about now: a little before, or seconds ahead
		params.RunAt = time.Now().Add(p.rng.Dur(-3*time.Second, 10*time.Second))
	case 3: // days ahead: it will be moved nearer, or cancelled
		params.RunAt = time.Now().Add(p.rng.Dur(24*time.Hour, 7*24*time.Hour))
	}
	later := w.cfg.Long && time.Since(w.h.Start) < 90*time.Minute && p.rng.Chance(0.15)
	if later {
		// Hours ahead: it waits, marked, while the vandal is about, and
		// only Reconcile can bring its marker back; no operator touches
		// it.
		params.RunAt = time.Now().Add(p.rng.Dur(time.Hour, 150*time.Minute))
	}
	if c.sleeper {
		later = true
		params.RunAt = time.Now().Add(p.rng.Dur(3*time.Hour, 3*time.Hour+40*time.Minute))
	}
	// Some lives of a long run's first hour wait days ahead, and no
	// operator touches them until the calm, when their start is moved
	// nearer: they are older than two reconciler intervals by then, and
	// the far-move adversary strikes the move (see farMove).
	aside := w.cfg.Long && !later && time.Since(w.h.Start) < time.Hour && p.rng.Chance(0.3)
	if aside {
		params.RunAt = time.Now().Add(p.rng.Dur(24*time.Hour, 7*24*time.Hour))
	}
	if p.rng.Chance(0.35) && !c.sleeper && !aside {
		params.Key = w.key(p.rng)
	}
	forUpload := p.rng.Chance(0.4)
	var t *s3task.Task
	for try := 0; try < 30 && t == nil; try++ {
		if try > 0 && !w.sleep(p.backoff(try)) {
			return
		}
		kind := CallCreate
		if forUpload {
			kind = CallCreateForUpload
		}
		t, _ = p.callWith(Call{Kind: kind, Key: params.Key}, func(ctx context.Context) (*s3task.Task, error) {
			if forUpload {
				t, _, err := p.store.CreateForUpload(ctx, params, 15*time.Minute)
				return t, err
			}
			return p.store.Create(ctx, params)
		}, nil)
	}
	if t == nil {
		return
	}
	id := t.ID
	w.mu.Lock()
	_, known := w.index[id]
	if !known {
		w.index[id] = n
		if !later && !aside {
			w.ids = append(w.ids, id) // the tasks operators meddle with
		}
		if c.sleeper {
			w.sleepers = append(w.sleepers, id)
		}
	}
	w.mu.Unlock()
	if known {
		return // a resent request: the key's task is another life's
	}
	// With a key, the task may be another life's creation, whose call has
	// not returned yet: its start, not this life's, decides whether it
	// waits days and must be moved nearer or cancelled.
	far := t.RunAt.After(time.Now().Add(12 * time.Hour))

	input := fmt.Sprintf("input of life %d", n)
	post := forUpload && p.rng.Chance(0.5) // the browser's POST form, not the PUT
	formKey := ""
	uploaded := false
	for try := 0; try < 30 && !uploaded; try++ {
		if try > 0 && !w.sleep(p.backoff(try)) {
			return
		}
		var err error
		switch {
		case post:
			// What a browser with the presigned POST form does: S3 stores
			// the file at the form's key, replacing what is there.
			_, err = p.call(CallPostInput, id, func(ctx context.Context) (*s3task.Task, error) {
				form, err := p.store.PresignUploadForm(ctx, id, 15*time.Minute)
				if err != nil {
					return nil, err
				}
				formKey = form.Fields["key"]
				_, err = p.raw.Put(ctx, formKey, []byte(input))
				return nil, err
			})
		case forUpload:
			// What a client with the presigned PUT does, through this
			// client, with the If-None-Match it signs: a refusal says the
			// input is there, which a resend of ours may have put.
			_, err = p.call(CallPutInput, id, func(ctx context.Context) (*s3task.Task, error) {
				key, _ := p.store.InputKey(id)
				_, err := p.raw.Create(ctx, key, []byte(input))
				if s3x.Lost(err) {
					err = nil
				}
				return nil, err
			})
		default:
			_, err = p.call(CallUploadInput, id, func(ctx context.Context) (*s3task.Task, error) {
				return nil, p.store.UploadInput(ctx, id, strings.NewReader(input))
			})
		}
		switch {
		case err == nil:
			uploaded = true
		case errors.Is(err, s3task.ErrInvalidTransition):
			return // cancelled meanwhile
		}
	}
	if !uploaded || p.rng.Chance(0.03) {
		if uploaded && !w.sleep(p.rng.Dur(0, 2*time.Minute)) {
			return
		}
		p.cancelUntilDone(id)
		return
	}
	if p.rng.Chance(0.05) && !w.sleep(p.rng.Dur(0, 3*time.Minute)) {
		return
	}
	for try := 0; try < 30; try++ {
		if try > 0 && !w.sleep(p.backoff(try)) {
			return
		}
		_, err := p.call(CallSubmit, id, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Submit(ctx, id)
		})
		if err == nil && formKey != "" && p.rng.Chance(0.5) {
			p.postAgain(id, formKey, n)
		}
		if err == nil && far {
			p.reschedule(id, aside)
		}
		if err == nil || errors.Is(err, s3task.ErrInvalidTransition) || errors.Is(err, s3task.ErrNotFound) {
			return
		}
	}
	p.cancelUntilDone(id)
}

// postAgain is a browser that posts the task's upload form again after
// Submit, while the form is valid, perhaps after the task completed or
// was purged: S3 accepts it, and the task's input must stay the one Submit
// verified.
func (p *proc) postAgain(id, formKey string, n int) {
	p.later(p.rng.Dur(0, 15*time.Minute), func() {
		_, _ = p.call(CallPostInput, id, func(ctx context.Context) (*s3task.Task, error) {
			_, err := p.raw.Put(ctx, formKey, []byte(fmt.Sprintf("another input for life %d", n)))
			return nil, err
		})
	})
}

// reschedule is the rest of a life scheduled days ahead: after a few
// minutes its start is moved to seconds from now, or it is cancelled. A
// task whose start moved nearer must start in time, and the notice of one
// cancelled must go out now, not on the day it was scheduled for. Half the
// time the move waits for the calm after the turbulence, when the fleet is
// idle and nothing else is announced: only the Schedule's own
// announcement then brings a polling worker to the nearer start in time.
// A life set aside (see create) is always moved then.
func (p *proc) reschedule(id string, aside bool) {
	d := p.rng.Dur(time.Minute, 5*time.Minute)
	if aside || p.rng.Chance(0.5) {
		d = time.Until(p.calm) + d
		p.later(d, func() { p.moveNearer(id, false) })
		return
	}
	p.later(d, func() { p.moveNearer(id, true) })
}

// moveNearer moves a far start of task id to seconds from now, or, if it
// may, cancels the task. The far-move adversary may strike the move (see
// planFarMove): the call, or its retries, must still leave the task due
// at the nearer start, and the reconciler must remove the old marker the
// strike leaves behind.
func (p *proc) moveNearer(id string, mayCancel bool) {
	if mayCancel && p.rng.Chance(0.5) {
		p.cancelUntilDone(id)
		return
	}
	at := time.Now().Add(p.rng.Dur(5*time.Second, 40*time.Second))
	strike := p.planFarMove(id)
	for try := 0; try < 30; try++ {
		if try > 0 && !p.w.sleep(p.backoff(try)) {
			return
		}
		_, err := p.call(CallSchedule, id, func(ctx context.Context) (*s3task.Task, error) {
			if strike != nil {
				ctx = context.WithValue(ctx, farMoveKey{}, strike)
			}
			return p.store.Schedule(ctx, id, at)
		})
		if err == nil || errors.Is(err, s3task.ErrInvalidTransition) || errors.Is(err, s3task.ErrNotFound) {
			return
		}
	}
	p.cancelUntilDone(id)
}

// backoff returns the wait before try number try (from 1) of a call that
// failed: from a second or two up to half a minute, so an operator rides
// out a process cut off for minutes.
func (p *proc) backoff(try int) time.Duration {
	d := time.Second << min(try, 5)
	return p.rng.Dur(d/2, min(d, 30*time.Second))
}

// cancelUntilDone cancels a task, retrying until the call succeeds or the
// task is beyond cancelling.
func (p *proc) cancelUntilDone(id string) {
	for try := 0; try < 30; try++ {
		if try > 0 && !p.w.sleep(p.backoff(try)) {
			return
		}
		_, err := p.call(CallCancel, id, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Cancel(ctx, id, "sim: given up")
		})
		if err == nil || errors.Is(err, s3task.ErrInvalidTransition) || errors.Is(err, s3task.ErrNotFound) {
			return
		}
	}
}

// meddle races a Cancel, a Retry or a Purge with whatever is going on.
func (p *proc) meddle() {
	w := p.w
	w.mu.Lock()
	ids := append([]string(nil), w.ids...)
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	switch p.rng.Pick(20, 60, 12, 8) {
	case 0:
		id := ids[p.rng.IntN(len(ids))]
		_, _ = p.call(CallCancel, id, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Cancel(ctx, id, "sim: operator cancel")
		})
	case 1:
		id := ids[p.rng.IntN(len(ids))]
		if failed := w.failedTasks(ids); len(failed) > 0 && p.rng.Chance(0.8) {
			id = failed[p.rng.IntN(len(failed))]
		}
		_, _ = p.call(CallRetry, id, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Retry(ctx, id)
		})
	case 2:
		cutoff := time.Now().Add(-p.rng.Dur(0, 5*time.Minute))
		limit := 1 + p.rng.IntN(4)
		drop := p.rng.Chance(0.3) // also tasks whose notice is still owed
		p.purge(cutoff, s3task.PurgeOptions{Limit: limit, DropPendingNotices: drop})
	case 3:
		id := ids[p.rng.IntN(len(ids))]
		var at time.Time // now
		if p.rng.Chance(0.5) {
			at = time.Now().Add(p.rng.Dur(0, 3*time.Minute))
		}
		_, _ = p.call(CallSchedule, id, func(ctx context.Context) (*s3task.Task, error) {
			return p.store.Schedule(ctx, id, at)
		})
	}
}

// purge makes a recorded Purge of the finished tasks created before cutoff.
func (p *proc) purge(cutoff time.Time, opts s3task.PurgeOptions) {
	var purged []string
	_, _ = p.callWith(Call{Kind: CallPurge}, func(ctx context.Context) (*s3task.Task, error) {
		r, err := p.store.Purge(ctx, cutoff, opts)
		if r != nil {
			purged = r.Purged
		}
		return nil, err
	}, func(c *Call) {
		c.Purged = purged
		c.Note = "purged " + strings.Join(purged, ",")
	})
}

// failedTasks returns the tasks among ids whose record is failed now, read
// without requests.
func (w *World) failedTasks(ids []string) []string {
	var failed []string
	for _, id := range ids {
		body, ok := w.mem.Object(w.prefix + id + "/status.json")
		if !ok {
			continue
		}
		var t struct {
			Status s3task.Status `json:"status"`
		}
		if json.Unmarshal(body, &t) == nil && t.Status == s3task.StatusFailed {
			failed = append(failed, id)
		}
	}
	return failed
}
