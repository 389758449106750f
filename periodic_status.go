package s3task

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// PeriodicStatus is one periodic task as [Store.Periodics] found it: when
// its latest period started and when its next starts, and its latest run,
// looked for in the latest period and, when that has none, in the one
// before it.
type PeriodicStatus struct {
	// Periodic is the declaration, as StoreOptions.Periodic gives it.
	Periodic Periodic
	// Prev is the start of its latest period at PeriodicList.At: the
	// period whose run is due now, or made.
	Prev time.Time
	// Next is the start of its next period: when its next run is due.
	Next time.Time
	// LastPeriod is the start of the latest period that has a run: Prev,
	// or the period before it when Prev has none (yet, or at all); zero
	// when neither has one. Earlier periods are not looked at.
	LastPeriod time.Time
	// LastID is the ID of the task of LastPeriod's run, whatever became of
	// it; "" when LastPeriod is zero or its key's object could not be read
	// (Err).
	LastID string
	// Last is that task as its record reads. It is nil when LastPeriod is
	// zero, when the task was purged (Purged), and when it has no record
	// yet although its key names it: its run is being made, or the worker
	// making it stopped between the two writes, and the next one to make
	// the run finishes it or makes it anew.
	Last *Task
	// Purged reports that the run of LastPeriod was made and then purged
	// ([Store.Purge]), or is being purged. A purged run is not made again.
	Purged bool
	// Err, if not nil, says why the run of LastPeriod could not be told:
	// S3 did not serve its key's object or its record, or one of them is
	// damaged (an error wrapping [ErrCorruptRecord]). LastPeriod is then
	// the period being read, and Last is nil. A failed read of the latest
	// period's key stops there: the period before it is not looked at.
	Err error
}

// PeriodicList is what [Store.Periodics] returns.
type PeriodicList struct {
	// Periodics are the Store's periodic tasks, in the order of
	// StoreOptions.Periodic.
	Periodics []PeriodicStatus
	// At is the S3 server's time, as the Store knew it when the call
	// began, by which the periods were told.
	At time.Time
}

// Periodics reports on the Store's periodic tasks (StoreOptions.Periodic),
// for an operator's view of them: for each, in order, the start of its
// latest period and of its next, and its latest run, with the run's task.
// A run is found by its key, which names the Periodic and the period, so
// the Store must declare the same Periodics (names and Schedules) as the
// fleet that makes the runs; for an API's Store that is all they are used
// for. It writes nothing. It passes through [StoreMiddleware] as an
// [OpPeriodics] call; the tasks it returns do not pass through it one by
// one, as a Get's would.
//
// Requests, for each periodic task: a GET of the key's object of its
// latest period's run and, if there is none, one of the period before;
// then a GET of the run's record, unless the run was purged. At most three,
// StoreOptions.ListConcurrency periodic tasks at a time; none for a Store
// without Periodic.
//
// A run that cannot be read (S3 did not serve its key's object or its
// record, or one is damaged) is an entry with PeriodicStatus.Err set; it
// never fails the call. Errors: ctx's.
func (s *Store) Periodics(ctx context.Context) (*PeriodicList, error) {
	c := &Call{Op: OpPeriodics}
	_, err := s.call(ctx, c)
	return result[*PeriodicList](c, err)
}

// periodics is OpPeriodics once every middleware has passed it on.
func (s *Store) periodics(ctx context.Context) (*PeriodicList, error) {
	list := &PeriodicList{At: s.serverNow(), Periodics: make([]PeriodicStatus, len(s.opts.Periodic))}
	sem := make(chan struct{}, s.opts.ListConcurrency)
	var wg sync.WaitGroup
	for i := range s.opts.Periodic {
		st := &list.Periodics[i]
		st.Periodic = s.opts.Periodic[i].clone()
		st.Prev, st.Next = st.Periodic.Schedule.Prev(list.At), st.Periodic.Schedule.Next(list.At)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.lastRun(ctx, st)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return list, nil
}

// lastRun looks for the latest run of st.Periodic, in the period that
// starts at st.Prev and then in the one before it, and fills in what it
// finds. Requests: one or two GETs of a key's object, and one of a record.
func (s *Store) lastRun(ctx context.Context, st *PeriodicStatus) {
	p := &st.Periodic
	var k keyRef
	var err error
	for _, start := range []time.Time{st.Prev, p.Schedule.Prev(st.Prev.Add(-time.Nanosecond))} {
		k, err = s.readKey(ctx, s.keyObject(periodicKeyScope, p.runKey(start)))
		if !errors.Is(err, ErrNotFound) {
			st.LastPeriod = start
			break
		}
	}
	switch {
	case st.LastPeriod.IsZero():
		return // neither period has a run
	case err != nil:
		st.Err = err
		return
	}
	st.LastID = k.id
	if k.purged {
		st.Purged = true
		return
	}
	rec, _, err := s.read(ctx, k.id)
	switch {
	case errors.Is(err, ErrNotFound):
		// Its key is written and its record not (yet).
	case err != nil:
		st.Err = err
	case rec.Purging:
		st.Purged = true
	default:
		st.Last = rec.task()
	}
}

// clone returns a copy of p whose Params share no map or slice with p's.
func (p *Periodic) clone() Periodic {
	c := *p
	c.Params.Metadata = maps.Clone(p.Params.Metadata)
	c.Params.Payload = slices.Clone(p.Params.Payload)
	return c
}
