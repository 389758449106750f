package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// Bulk actions: POST /tasks/bulk retries, cancels or purges a selection
// of tasks, given by ID or by a filter as the state views use, with
// Store.RetryMany, CancelMany and PurgeMany.
//
// Every call first judges the selection as a dry run (the library's
// BulkOptions.DryRun), then, unless dry_run is set, acts by ID on the
// tasks that dry run would act on. That one path serves both kinds of
// selection alike (IDs, and a filter by status or by one of the page's
// states scheduled, retrying and dead, which the library filters by), and
// it lets the service keep its own rule: a bulk retry leaves alone the
// failed tasks it offers no retry for (retryable false, such as a final
// bad_input failure).

// bulkActions are the actions POST /tasks/bulk takes.
var bulkActions = map[string]bool{"retry": true, "cancel": true, "purge": true}

// maxCancelReason is the longest cancel reason the library keeps.
const maxCancelReason = 1024

// bulkRequest is the body of POST /tasks/bulk. IDs or Filter selects the
// tasks, never both.
type bulkRequest struct {
	Action  string      `json:"action"`
	IDs     []string    `json:"ids"`
	Filter  *bulkFilter `json:"filter"`
	DryRun  bool        `json:"dry_run"`
	Limit   int         `json:"limit"`
	MaxScan int         `json:"max_scan"`
	Cursor  string      `json:"cursor"`
	Reason  string      `json:"reason"`
}

// bulkFilter selects tasks as GET /tasks?status=&type= does.
type bulkFilter struct {
	Status string `json:"status"`
	Type   string `json:"type"`
}

// bulkResponse is the answer of POST /tasks/bulk, in the shape of
// "s3taskctl retry|cancel|purge -json" over several tasks, plus each
// task's name and type. A call cut short (the S3 deadline) answers with
// the error's status and its Error set, and says what it did.
type bulkResponse struct {
	Action      string            `json:"action"`
	DryRun      bool              `json:"dry_run"`
	Results     []bulkResult      `json:"results"`
	Acted       int               `json:"acted"` // done, or in a dry run would be
	Skipped     int               `json:"skipped"`
	Failed      int               `json:"failed"`
	Scanned     int               `json:"scanned"`
	ScanLimited bool              `json:"scan_limited"`
	Broken      []taskview.Broken `json:"broken,omitempty"`
	NextCursor  string            `json:"next_cursor,omitempty"`
	Error       *errorBody        `json:"error,omitempty"`
}

// bulkResult is what a bulk action did, or would do, with one task.
type bulkResult struct {
	ID      string `json:"task_id"`
	Outcome string `json:"outcome"` // done, would_do, skipped, failed
	Name    string `json:"task_name,omitempty"`
	Type    string `json:"task_type,omitempty"`
	// Status is the task's status after the action (done), as judged
	// (would_do), or the one that made it skipped, when known.
	Status string `json:"status,omitempty"`
	// Code and Reason say why a task was skipped or failed: Code as in
	// an error answer (invalid_transition, not_found, retry_not_offered,
	// input_missing...), Reason in words.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// codeRetryNotOffered is the code of a failed task a bulk retry skips
// because the service offers no retry for it (see viewOf).
const codeRetryNotOffered = "retry_not_offered"

// bulkStopped is a bulk action that ended with an error after it may have
// changed tasks: handle answers with the error's status and resp, which
// says what was done.
type bulkStopped struct {
	resp *bulkResponse
	err  error
}

func (e *bulkStopped) Error() string { return "bulk action stopped: " + e.err.Error() }
func (e *bulkStopped) Unwrap() error { return e.err }

// bulkSelection is a checked request: its action and what selects its
// tasks.
type bulkSelection struct {
	req    bulkRequest
	limit  int
	filter listFilter // with req.Filter: the status asked for
}

// parseBulk decodes and checks the body of POST /tasks/bulk.
func parseBulk(r *http.Request) (*bulkSelection, error) {
	var req bulkRequest
	if err := readJSON(r, &req, false); err != nil {
		return nil, err
	}
	if !bulkActions[req.Action] {
		return nil, badRequest("invalid_body", "action %q: want retry, cancel or purge", clip(req.Action, maxEcho))
	}
	sel := &bulkSelection{req: req, limit: cmpOr(req.Limit, s3task.DefaultBulkLimit)}
	switch {
	case len(req.IDs) > 0 && req.Filter != nil:
		return nil, badRequest("invalid_argument", "give ids or a filter, not both")
	case len(req.IDs) == 0 && req.Filter == nil:
		return nil, badRequest("invalid_argument", "no task selected: give ids, or a filter with a status or a type")
	case len(req.IDs) > s3task.MaxBulkIDs:
		return nil, badRequest("invalid_argument", "ids holds %d IDs, want at most %d", len(req.IDs), s3task.MaxBulkIDs)
	case req.Limit < 0 || req.Limit > s3task.MaxBulkLimit:
		return nil, badRequest("invalid_argument", "limit %d: want 1 to %d (0 or absent: %d)", req.Limit, s3task.MaxBulkLimit, s3task.DefaultBulkLimit)
	case req.MaxScan != 0 && req.Filter == nil:
		return nil, badRequest("invalid_argument", "max_scan bounds a filter's listing; it does not apply to ids")
	case req.MaxScan < 0 || req.MaxScan > s3task.MaxListScan:
		return nil, badRequest("invalid_argument", "max_scan %d: want 1 to %d (0 or absent: %d)", req.MaxScan, s3task.MaxListScan, s3task.DefaultListScan)
	case req.Reason != "" && req.Action != "cancel":
		return nil, badRequest("invalid_argument", "reason is for cancel only")
	case len(req.Reason) > maxCancelReason || !utf8.ValidString(req.Reason):
		return nil, badRequest("invalid_argument", "reason: at most %d bytes of UTF-8", maxCancelReason)
	}
	if f := req.Filter; f != nil {
		if f.Status == "" && f.Type == "" {
			return nil, badRequest("invalid_argument", "the filter selects no task: give a status, a type, or both")
		}
		if f.Status != "" {
			var ok bool
			if sel.filter, ok = parseListFilter(f.Status); !ok {
				return nil, badRequest("invalid_body", "filter.status %q: want one of %s", clip(f.Status, maxEcho), statusValues())
			}
		}
		if !wellFormedType(f.Type) {
			return nil, badRequest("invalid_argument", "filter.type %q: want a task type, at most %d bytes of printable UTF-8", clip(f.Type, maxEcho), maxTypeBytes)
		}
	}
	return sel, nil
}

// bulk: POST /tasks/bulk {action, ids | filter, dry_run, limit, max_scan,
// cursor, reason} -> 200 bulkResponse.
func (a *api) bulk(w http.ResponseWriter, r *http.Request, caller string) error {
	sel, err := parseBulk(r)
	if err != nil {
		return err
	}
	req := sel.req
	if req.Action == "cancel" && req.Reason == "" {
		req.Reason = "cancelled by " + caller
	}
	ctx := r.Context()
	judged, err := a.judgeBulk(ctx, sel, req.Reason)
	if errors.Is(err, s3task.ErrInvalidCursor) {
		return badRequest("invalid_cursor", "cursor %q is not a next_cursor of this API: pass one back as it is", clip(req.Cursor, maxEcho))
	}
	if err != nil {
		return err
	}
	resp := &bulkResponse{Action: req.Action, DryRun: req.DryRun, Results: []bulkResult{},
		Scanned: judged.Scanned, ScanLimited: judged.ScanLimited, Broken: taskview.BrokenOf(judged.Broken), NextCursor: judged.NextCursor}

	// What the dry run would do, less what the service does not offer.
	results := make([]bulkResult, len(judged.Results))
	var ids []string
	for i, res := range judged.Results {
		results[i] = a.bulkResultOf(ctx, res)
		if res.Outcome != s3task.BulkWouldDo {
			continue
		}
		if req.Action == "retry" && res.Task != nil {
			if v := viewOf(res.Task); !v.Retryable {
				results[i].Outcome, results[i].Code, results[i].Reason = string(s3task.BulkSkipped), codeRetryNotOffered, v.RetryNote
				continue
			}
		}
		ids = append(ids, res.ID)
	}
	if req.DryRun || len(ids) == 0 {
		resp.add(results...)
		writeJSON(w, http.StatusOK, resp)
		return nil
	}

	run, err := a.callBulk(ctx, req.Action, req.Reason, s3task.BulkOptions{IDs: ids, Limit: len(ids)})
	if run == nil {
		return err
	}
	done := make(map[string]bulkResult, len(run.Results))
	for _, res := range run.Results {
		done[res.ID] = a.bulkResultOf(ctx, res)
	}
	// The run takes the tasks in the order the dry run found them, and
	// one cut short reaches a first part of them: answer for that part,
	// and go on from its end.
	reached := len(results)
	if err != nil {
		reached = 0
		for i, res := range results {
			if _, ok := done[judged.Results[i].ID]; ok {
				reached = i + 1
			} else if res.Outcome == string(s3task.BulkWouldDo) {
				break
			}
		}
		resp.NextCursor, resp.ScanLimited = run.NextCursor, false
		if resp.NextCursor == "" {
			resp.NextCursor = req.Cursor
		}
	}
	for i, res := range results[:reached] {
		if d, ok := done[judged.Results[i].ID]; ok && res.Outcome == string(s3task.BulkWouldDo) {
			res = d
		}
		resp.add(res)
	}
	a.log.InfoContext(ctx, "bulk "+req.Action, "by", caller, "selection", sel.describe(),
		"acted", resp.Acted, "skipped", resp.Skipped, "failed", resp.Failed, "next_cursor", resp.NextCursor != "")
	if err != nil {
		return &bulkStopped{resp: resp, err: err}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// describe names the selection for the log.
func (sel *bulkSelection) describe() string {
	if f := sel.req.Filter; f != nil {
		return fmt.Sprintf("status=%q type=%q", f.Status, clip(f.Type, maxEcho))
	}
	return fmt.Sprintf("%d ids", len(sel.req.IDs))
}

// add appends results to resp and counts them.
func (resp *bulkResponse) add(results ...bulkResult) {
	for _, res := range results {
		switch s3task.BulkOutcome(res.Outcome) {
		case s3task.BulkDone, s3task.BulkWouldDo:
			resp.Acted++
		case s3task.BulkSkipped:
			resp.Skipped++
		default:
			resp.Failed++
		}
	}
	resp.Results = append(resp.Results, results...)
}

// judgeBulk runs sel as a dry run, through the library's bulk call with
// its IDs or its filter, and reports what the action would do with each
// task it selects.
func (a *api) judgeBulk(ctx context.Context, sel *bulkSelection, reason string) (*s3task.BulkReport, error) {
	req := sel.req
	opts := s3task.BulkOptions{IDs: req.IDs, Cursor: req.Cursor, Limit: sel.limit, DryRun: true}
	if req.Filter != nil {
		sel.filter.options(&opts.Statuses, &opts.States)
		if req.Filter.Type != "" {
			opts.Types = []string{req.Filter.Type}
		}
		opts.MaxScan = req.MaxScan
	}
	return a.callBulk(ctx, req.Action, reason, opts)
}

// callBulk runs the library's bulk call for action.
func (a *api) callBulk(ctx context.Context, action, reason string, opts s3task.BulkOptions) (*s3task.BulkReport, error) {
	switch action {
	case "retry":
		return a.store.RetryMany(ctx, opts)
	case "cancel":
		return a.store.CancelMany(ctx, reason, opts)
	default:
		return a.store.PurgeMany(ctx, opts)
	}
}

// bulkResultOf is res as the API answers it. An error the client cannot
// act on goes to the log, as handle does with a request's.
func (a *api) bulkResultOf(ctx context.Context, res s3task.BulkResult) bulkResult {
	out := bulkResult{ID: clip(res.ID, maxEcho), Outcome: string(res.Outcome)}
	if t := res.Task; t != nil {
		out.Name, out.Type, out.Status = t.Name, t.Type, string(t.Status)
	}
	if res.Err == nil {
		return out
	}
	var te *s3task.TransitionError
	switch {
	case errors.As(res.Err, &te):
		out.Code, out.Reason = "invalid_transition", te.Reason
		if out.Status == "" {
			out.Status = string(te.From)
		}
	case errors.Is(res.Err, s3task.ErrOutcomeUnknown):
		out.Code, out.Reason = "outcome_unknown", "the change may or may not have been made: read the task before acting on it again"
	case errors.Is(res.Err, context.DeadlineExceeded) || errors.Is(res.Err, context.Canceled):
		out.Code, out.Reason = codeS3Unavailable, "cut short by the request's deadline: the task may or may not have changed; read it before acting on it again"
	default:
		ae := errorFor(res.Err)
		out.Code, out.Reason = ae.code, clip(ae.message, maxMessage)
		if ae.status >= 500 {
			a.log.ErrorContext(ctx, "bulk action on a task failed", "task_id", out.ID, "err", res.Err)
		}
	}
	return out
}
