package s3task

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// HistoryLimit is how many attempts [Task.History] keeps: the latest ones.
// A claim that would make it longer drops the oldest entry.
const HistoryLimit = 10

// HistoryErrorLimit is the most bytes of an attempt's error that its entry
// in [Task.History] keeps. A longer error is cut at a character boundary
// and ends with "…", within the limit. (Task.LastError keeps up to 4 KiB
// of the latest error.)
const HistoryErrorLimit = 512

// The bounds of an entry's other text, which decodeTask enforces too: a
// worker ID as WorkerOptions.ID allows it, a category with room to spare
// over what WithCategory keeps, an outcome name.
const (
	historyWorkerLimit   = 128
	historyCategoryLimit = 128
	historyOutcomeLimit  = 32
)

// AttemptOutcome says how an attempt in [Task.History] ended, or that it
// is still running. The record may hold a value this version does not
// name (written by a later one): show it as it is.
type AttemptOutcome string

// The outcomes of an attempt.
const (
	// OutcomeRunning: the attempt holds the task now; its entry has no
	// EndedAt yet.
	OutcomeRunning AttemptOutcome = "running"
	// OutcomeCompleted: its handler returned nil and the task completed.
	OutcomeCompleted AttemptOutcome = "completed"
	// OutcomeFailed: its handler returned an error (or panicked); the
	// entry's ErrorCategory and Error say what. Whether a retry followed
	// is in the task's RetryAt and in the next entry, if any.
	OutcomeFailed AttemptOutcome = "failed"
	// OutcomeLeaseExpired: its worker stopped renewing the lease (it
	// crashed, or was cut off from S3) and another worker recovered the
	// task. EndedAt is when the lease ran out. The attempt counts against
	// MaxAttempts.
	OutcomeLeaseExpired AttemptOutcome = "lease_expired"
	// OutcomeReleased: its worker shut down and gave the task back before
	// the handler finished. The attempt does not count against
	// MaxAttempts (see Task.ReleasedAttempts).
	OutcomeReleased AttemptOutcome = "released"
	// OutcomeCanceled: [Store.Cancel] abandoned the task while the attempt
	// ran; the task's CancelReason says why.
	OutcomeCanceled AttemptOutcome = "canceled"
)

// Attempt is one attempt of a task, as [Task.History] keeps it. The
// worker writes it into the record with the writes the attempt makes
// anyway (the claim, and the write that ends the attempt), so it costs no
// request of its own.
type Attempt struct {
	// Number is the attempt's number, the task's attempt_id while it ran
	// (from 1).
	Number int
	// WorkerID is the worker that claimed it.
	WorkerID string
	// StartedAt is when the worker claimed it, by the S3 server's clock.
	StartedAt time.Time
	// EndedAt is when it ended, by the server's clock as the writer of
	// the ending knew it; for [OutcomeLeaseExpired], the end of its last
	// lease. Zero while it runs.
	EndedAt time.Time
	// Outcome says how it ended, or [OutcomeRunning].
	Outcome AttemptOutcome
	// ErrorCategory classifies Error, as Task.ErrorCategory does the
	// latest one: a handler's [WithCategory], or one of the library's
	// categories ([CategoryLeaseExpired] for an expired lease,
	// [CategoryShutdown] for a release). Empty for an attempt that
	// completed, was cancelled or still runs.
	ErrorCategory string
	// Error is what went wrong, cut to [HistoryErrorLimit] bytes; empty
	// when nothing did.
	Error string
	// HeartbeatInterval is the claiming worker's
	// WorkerOptions.HeartbeatInterval, in whole milliseconds: how often a
	// live worker writes the record while the attempt runs (see
	// [Task.Silent]). Zero when unknown: an attempt claimed by an earlier
	// version of the library.
	HeartbeatInterval time.Duration
}

// attemptJSON is an Attempt in status.json. The heartbeat interval is
// written in milliseconds, which a script in any language reads as it is.
type attemptJSON struct {
	Number        int            `json:"attempt"`
	WorkerID      string         `json:"worker_id"`
	StartedAt     time.Time      `json:"started_at,omitzero"`
	EndedAt       time.Time      `json:"ended_at,omitzero"`
	Outcome       AttemptOutcome `json:"outcome"`
	ErrorCategory string         `json:"error_category,omitempty"`
	Error         string         `json:"error,omitempty"`
	HeartbeatMS   int64          `json:"heartbeat_interval_ms,omitempty"`
}

// MarshalJSON encodes the attempt as status.json keeps it: snake_case
// fields, and heartbeat_interval_ms in whole milliseconds.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(attemptJSON{
		Number: a.Number, WorkerID: a.WorkerID, StartedAt: a.StartedAt, EndedAt: a.EndedAt,
		Outcome: a.Outcome, ErrorCategory: a.ErrorCategory, Error: a.Error,
		HeartbeatMS: int64(a.HeartbeatInterval / time.Millisecond),
	})
}

// UnmarshalJSON decodes an attempt as MarshalJSON writes it. A negative
// heartbeat_interval_ms, or one too large for a time.Duration, is an
// error.
func (a *Attempt) UnmarshalJSON(data []byte) error {
	var j attemptJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	if j.HeartbeatMS < 0 || j.HeartbeatMS > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Errorf("attempt %d: heartbeat_interval_ms %d out of range", j.Number, j.HeartbeatMS)
	}
	*a = Attempt{
		Number: j.Number, WorkerID: j.WorkerID, StartedAt: j.StartedAt, EndedAt: j.EndedAt,
		Outcome: j.Outcome, ErrorCategory: j.ErrorCategory, Error: j.Error,
		HeartbeatInterval: time.Duration(j.HeartbeatMS) * time.Millisecond,
	}
	return nil
}

// heartbeatInterval returns the heartbeat interval of the worker that
// holds the running task now, from the history entry of its attempt; zero
// if the history does not say.
func (t *Task) heartbeatInterval() time.Duration {
	if len(t.History) == 0 {
		return 0
	}
	a := t.History[len(t.History)-1]
	if a.Number != t.Attempt || a.WorkerID != t.WorkerID || a.Outcome != OutcomeRunning {
		return 0
	}
	return a.HeartbeatInterval
}

// startAttempt adds the entry of the attempt n has just claimed, by worker
// at now, whose heartbeats come every heartbeat (kept in whole
// milliseconds, as the record holds it, so that the record written and
// the record read back are the same), dropping the oldest entry past
// HistoryLimit.
func startAttempt(n *record, worker string, heartbeat time.Duration, now time.Time) {
	n.History = append(n.History, Attempt{
		Number: n.Attempt, WorkerID: cutText(worker, historyWorkerLimit), StartedAt: now,
		Outcome: OutcomeRunning, HeartbeatInterval: max(heartbeat, 0).Truncate(time.Millisecond),
	})
	trimHistory(n)
}

// trimHistory drops the oldest entries of n's history past HistoryLimit.
func trimHistory(n *record) {
	if extra := len(n.History) - HistoryLimit; extra > 0 {
		n.History = slices.Delete(n.History, 0, extra)
	}
}

// endAttempt closes, in n, the entry of t's running attempt: it ended at
// at with outcome, and the error msg of category, if any. A record whose
// history has no entry for that attempt (it was claimed by an earlier
// version of the library, which kept none) gets one made from what the
// record says of it: its worker and its start.
func endAttempt(n, t *record, outcome AttemptOutcome, at time.Time, category, msg string) {
	if t.Attempt < 1 {
		return // a running record without an attempt: edited by hand
	}
	i := len(n.History) - 1
	if i < 0 || n.History[i].Number != t.Attempt {
		n.History = append(n.History, Attempt{Number: t.Attempt, WorkerID: cutText(t.WorkerID, historyWorkerLimit), StartedAt: t.StartedAt})
		trimHistory(n)
		i = len(n.History) - 1
	}
	a := &n.History[i]
	a.EndedAt, a.Outcome = at, outcome
	a.ErrorCategory = cutText(category, historyCategoryLimit)
	a.Error = cutText(msg, HistoryErrorLimit)
}

// cutText returns s as JSON will keep it (each byte that is not part of
// valid UTF-8 replaced by U+FFFD, as encoding/json does), cut to at most
// limit bytes at a character boundary; a cut one ends with "…" within the
// limit.
func cutText(s string, limit int) string {
	if !utf8.ValidString(s) {
		var b strings.Builder
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r) // utf8.RuneError for a byte that is not valid
			i += size
		}
		s = b.String()
	}
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := max(limit-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// checkHistory reports what is wrong with t's history, or "" if nothing
// is: more than HistoryLimit entries, entries out of attempt order or for
// attempts the task never had, text longer than its bound.
func checkHistory(t *record) string {
	if len(t.History) > HistoryLimit {
		return fmt.Sprintf("attempt_history has %d entries, more than %d", len(t.History), HistoryLimit)
	}
	prev := 0
	for _, a := range t.History {
		switch {
		case a.Number < 1 || a.Number > t.Attempt:
			return fmt.Sprintf("attempt_history has an entry for attempt %d; the task is at attempt %d", a.Number, t.Attempt)
		case a.Number <= prev:
			return fmt.Sprintf("attempt_history is out of order: attempt %d after attempt %d", a.Number, prev)
		case a.Outcome == "" || len(a.Outcome) > historyOutcomeLimit:
			return fmt.Sprintf("attempt_history: attempt %d has an outcome of %d bytes", a.Number, len(a.Outcome))
		case len(a.WorkerID) > historyWorkerLimit:
			return fmt.Sprintf("attempt_history: attempt %d's worker_id is %d bytes, over %d", a.Number, len(a.WorkerID), historyWorkerLimit)
		case len(a.ErrorCategory) > historyCategoryLimit:
			return fmt.Sprintf("attempt_history: attempt %d's error_category is %d bytes, over %d", a.Number, len(a.ErrorCategory), historyCategoryLimit)
		case len(a.Error) > HistoryErrorLimit:
			return fmt.Sprintf("attempt_history: attempt %d's error is %d bytes, over %d", a.Number, len(a.Error), HistoryErrorLimit)
		}
		prev = a.Number
	}
	return ""
}
