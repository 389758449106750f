package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// periodicRun is a task the fleet made as a periodic run.
type periodicRun struct {
	id   string
	made *Write // its record's first write
}

// holding is a stretch in which one worker held the reconciler's lease by
// its writes of the lease: from its first write of a row to the end of the
// last, each written before the one before ran out.
type holding struct {
	holder   string
	from, to time.Time
}

// holdings returns the stretches in which a worker held the lease, from
// the lease writes S3 applied (a write applied late, after its writer was
// told it failed, is left out: that worker does not know it holds).
func (x *index) holdings() []holding {
	var out []holding
	for i := range x.h.Writes {
		w := &x.h.Writes[i]
		if w.Key != x.h.Prefix+"_reconciler" || w.Method != "PUT" || w.Zombie {
			continue
		}
		var l struct {
			Holder    string    `json:"holder"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		if json.Unmarshal(w.Body, &l) != nil || l.Holder == "" || !l.ExpiresAt.After(w.Time) {
			continue // a release: written expired
		}
		if n := len(out); n > 0 && out[n-1].holder == l.Holder && !w.Time.After(out[n-1].to) {
			out[n-1].to = l.ExpiresAt
			continue
		}
		out = append(out, holding{holder: l.Holder, from: w.Time, to: l.ExpiresAt})
	}
	return out
}

// checkPeriodic: each period of a periodic task has at most one run
// (exactly once, however the lease moved and whatever answers were lost);
// a run is for a period its schedule has, made no earlier than the period's
// start and no later than its policy allows (within Within of the start
// under SkipMissed; before the next period under RunMissedOnce, which makes
// only the latest period's run); and a period has its run whenever a
// worker held the reconciler's lease from a poll before the period began
// until well into the time its run could be made, and was up and reached
// S3 all that while.
func checkPeriodic(x *index) []Violation {
	if len(x.h.Periodics) == 0 {
		return nil
	}
	decl := map[string]s3task.Periodic{}
	for _, p := range x.h.Periodics {
		decl[p.Name] = p
	}
	var vs []Violation
	runs := map[string][]periodicRun{} // by key
	for _, id := range x.tasks {
		ws := x.records[id]
		if len(ws) == 0 || ws[0].Record == nil || ws[0].Record.KeyScope != PeriodicScope {
			continue
		}
		runs[ws[0].Record.IdempotencyKey] = append(runs[ws[0].Record.IdempotencyKey], periodicRun{id, ws[0]})
	}
	// slack covers the one-second Date headers and the spread of the
	// servers' clocks; late covers what the requests that make a run may
	// take once the decision is made: the SDK's retries and their backoff,
	// the adversary's latency and late answers.
	slack, late := x.p.ClockSlack, 45*time.Second
	made := map[string]map[time.Time]bool{}
	for _, key := range sortedKeys(runs) {
		rs := runs[key]
		first := rs[0]
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Kind: KindPeriodic, Task: first.id, Time: first.made.Time, Msg: fmt.Sprintf("run %q: ", key) + fmt.Sprintf(format, args...)})
		}
		if len(rs) > 1 {
			ids := make([]string, len(rs))
			for i, r := range rs {
				ids[i] = r.id + " (" + r.made.Proc + " at " + x.at(r.made.Time) + ")"
			}
			bad("%d tasks for one period: %s", len(rs), strings.Join(ids, ", "))
		}
		name, at, _ := strings.Cut(key, "@")
		p, ok := decl[name]
		start, err := time.Parse(time.RFC3339, at)
		switch {
		case !ok:
			bad("no periodic task is named %q", name)
			continue
		case err != nil || !p.Schedule.Prev(start).Equal(start):
			bad("%q is not the start of a period of %s", at, describePeriodic(p))
			continue
		}
		if made[name] == nil {
			made[name] = map[time.Time]bool{}
		}
		made[name][start] = true
		deadline := p.Schedule.Next(start)
		if p.Missed == s3task.SkipMissed {
			deadline = start.Add(p.Within)
		}
		maker := first.made.Proc
		switch {
		case first.made.Time.Before(start.Add(-slack)):
			bad("made by %s at %s, before its period began at %s", maker, x.at(first.made.Time), x.at(start))
		case first.made.Time.After(deadline.Add(late)):
			if _, ok := x.during(maker, start, first.made.Time, EventPause, EventFreeze, EventSlow, EventOutage); ok {
				break // its requests were held up: the decision may have been in time
			}
			if x.heldUp(maker, start, first.made.Time) {
				break
			}
			bad("made by %s at %s, after %s (%s): later than %s allows", maker, x.at(first.made.Time), x.at(deadline), describePeriodic(p), p.Missed)
		}
	}

	// Every period some worker was sure to reach: it held the lease from
	// a poll before the period began (MaxPollInterval: a worker whose
	// wait was planned before it took the lease may sleep that long) to
	// reach past the time it needs to make the run, and no adversary
	// touched it meanwhile.
	reach := 30 * time.Second
	holdings := x.holdings()
	for _, p := range x.h.Periodics {
		window := p.Within
		if p.Missed == s3task.RunMissedOnce {
			window = time.Minute // any time before the next period: at least 2 minutes
		}
		for s := p.Schedule.Next(x.h.Start); s.Add(window).Before(x.h.End); s = p.Schedule.Next(s) {
			if made[p.Name][s] {
				continue
			}
			for _, hd := range holdings {
				from, to := s.Add(-x.p.MaxPollInterval-slack), s.Add(reach+x.p.ClockMargin+x.p.Lag())
				if hd.from.After(from) || hd.to.Before(to) || reach > window {
					continue
				}
				if _, ok := x.during(hd.holder, hd.from, s.Add(window), EventCrash, EventStop, EventExit); ok {
					continue // gone before the run's time was over
				}
				if _, ok := x.during(hd.holder, from, s.Add(window), EventPause, EventFreeze, EventSlow, EventOutage); ok {
					continue
				}
				if x.heldUp(hd.holder, from, s.Add(window)) {
					continue
				}
				vs = append(vs, Violation{Kind: KindPeriodic, Time: s, Msg: fmt.Sprintf(
					"the period of %s that began at %s has no run, though %s held the reconciler's lease from %s to %s, up and unhindered until %s",
					describePeriodic(p), x.at(s), hd.holder, x.at(hd.from), x.at(hd.to), x.at(s.Add(window)))})
				break
			}
		}
	}
	return vs
}

// heldUp reports whether the adversary held a request of proc within
// [from, to] (EventDelayed spans, merged).
func (x *index) heldUp(proc string, from, to time.Time) bool {
	return slices.ContainsFunc(x.delayed[proc], func(s span) bool { return !s.From.After(to) && !s.To.Before(from) })
}
