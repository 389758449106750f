package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/taskview"
)

// The control API: JSON over HTTP. Every error is
//
//	{"error": {"code": "...", "message": "..."}}
//
// with a stable code (see errorFor) and a fitting status. File bytes never
// pass through it: uploads and downloads go straight to S3 with presigned
// URLs.

// maxBodySize caps request bodies. The largest is a create whose payload
// may be up to s3task.DefaultMaxPayloadSize.
const maxBodySize = 2 * s3task.DefaultMaxPayloadSize

// apiError is an error as the client sees it.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

// errorFor maps an error to what the client sees. Library errors are
// matched with errors.Is, so wrapping never changes the answer.
func errorFor(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	mapping := []struct {
		target error
		status int
		code   string
	}{
		{s3task.ErrInvalidID, http.StatusBadRequest, "invalid_id"},
		{s3task.ErrInvalidCursor, http.StatusBadRequest, "invalid_cursor"},
		{s3task.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
		{s3task.ErrNotFound, http.StatusNotFound, "not_found"},
		{s3task.ErrInvalidTransition, http.StatusConflict, "invalid_transition"},
		{s3task.ErrConflict, http.StatusConflict, "conflict"},
		{s3task.ErrNotCompleted, http.StatusConflict, "not_completed"},
		{s3task.ErrInputTooLarge, http.StatusRequestEntityTooLarge, "input_too_large"},
		{s3task.ErrInputMissing, http.StatusUnprocessableEntity, "input_missing"},
		{s3task.ErrUnsupportedSchema, http.StatusInternalServerError, "unsupported_record"},
		{s3task.ErrCorruptRecord, http.StatusInternalServerError, "corrupt_record"},
	}
	var idErr *s3task.IDError
	if errors.As(err, &idErr) {
		// Never repeat a long ID whole: the answer stays small whatever the
		// path held.
		return badRequest("invalid_id", "%q is not a task ID: %s", clip(idErr.ID, maxEcho), idErr.Reason)
	}
	for _, m := range mapping {
		if errors.Is(err, m.target) {
			return &apiError{status: m.status, code: m.code, message: err.Error()}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || s3Unreachable(err) {
		return &apiError{status: http.StatusServiceUnavailable, code: codeS3Unavailable, message: "the storage (S3) is not answering; try again in a few seconds"}
	}
	if errors.Is(err, context.Canceled) {
		return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", message: "the request was cut short; try again"}
	}
	// Anything else is most likely S3 trouble; the details go to the log,
	// not to the client.
	return &apiError{status: http.StatusInternalServerError, code: "internal", message: "internal error; the server log has the details"}
}

// codeS3Unavailable is the error code of a request whose S3 calls did not
// finish within -s3-timeout, or could not reach S3 at all.
const codeS3Unavailable = "s3_unavailable"

// s3Unreachable reports whether err says S3 could not be reached (the
// request never got an answer: refused, reset, timed out, DNS) or answered
// with a server error (500, 503 SlowDown...), after the SDK's own retries.
// Either is passing trouble: the client should come back later.
func s3Unreachable(err error) bool {
	var conn interface{ ConnectionError() bool }
	if errors.As(err, &conn) && conn.ConnectionError() {
		return true
	}
	var resp interface{ HTTPStatusCode() int }
	return errors.As(err, &resp) && resp.HTTPStatusCode() >= 500
}

// maxEcho bounds what an error message repeats of the client's input (an
// ID, a path, a type): its first maxEcho characters and "…".
const maxEcho = 40

// maxMessage bounds any error message, whatever it repeats.
const maxMessage = 500

// clip returns s, or its first n characters and "…" if it is longer.
func clip(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos] + "…"
		}
		i++
	}
	return s
}

// api serves the control API.
type api struct {
	store       *s3task.Store
	auth        *authenticator
	log         *slog.Logger
	uploadTTL   time.Duration
	downloadTTL time.Duration
	// s3Timeout is the deadline of the S3 calls one request makes
	// (-s3-timeout): past it the request answers 503 s3_unavailable.
	s3Timeout time.Duration
	// mux is the mux the API is registered on; a request with a method
	// the path does not take learns the ones it does from it (405, Allow).
	mux *http.ServeMux
}

// handlerFunc is an API handler: it gets the authenticated caller and
// returns an error instead of writing one.
type handlerFunc func(w http.ResponseWriter, r *http.Request, caller string) error

func (a *api) register(mux *http.ServeMux) {
	a.mux = mux
	// Each route names the query parameters it takes: any other is
	// refused (unknown_parameter), so that a typo (stauts=dead) is an
	// error, not a page of every task.
	mux.Handle("POST /tasks", a.handle(a.create))
	mux.Handle("GET /tasks", a.handle(a.list, "limit", "cursor", "status", "type", "max_scan"))
	mux.Handle("GET /tasks/{id}", a.handle(a.get))
	mux.Handle("POST /tasks/{id}/submit", a.handle(a.submit))
	mux.Handle("POST /tasks/{id}/retry", a.handle(a.retry))
	mux.Handle("POST /tasks/{id}/cancel", a.handle(a.cancel))
	mux.Handle("GET /tasks/{id}/output", a.handle(a.output))
	mux.Handle("POST /tasks/{id}/upload", a.handle(a.reissueUpload))
	mux.Handle("POST /tasks/{id}/schedule", a.handle(a.schedule))
	mux.Handle("POST /tasks/bulk", a.handle(a.bulk))
	mux.Handle("GET /stats", a.handle(a.stats, "span", "max_tasks"))
	mux.Handle("GET /workers", a.handle(a.workers))
	mux.Handle("GET /periodics", a.handle(a.periodics))
	mux.Handle("GET /paused", a.handle(a.paused))
	mux.Handle("POST /paused", a.handle(a.setPaused))
	// Everything else under the API's paths answers in JSON too, not with
	// the mux's plain-text 404 and 405, whatever its query holds.
	for _, pattern := range catchAll {
		mux.Handle(pattern, a.serve(a.noRoute, false, nil))
	}
}

// catchAll are the patterns of noRoute: every path of the API that no
// route takes. "GET /tasks/bulk" keeps a GET of the bulk path from
// reading "bulk" as a task ID: it answers 405, Allow: POST.
var catchAll = []string{"/tasks", "/tasks/", "/stats", "/workers", "/periodics", "/paused", "GET /tasks/bulk"}

// noRoute answers a request no API route takes: 405 with an Allow header
// if the path takes other methods, 404 otherwise.
func (a *api) noRoute(w http.ResponseWriter, r *http.Request, _ string) error {
	if allow := a.allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			message: fmt.Sprintf("%s is not allowed here; this path takes %s", clip(r.Method, maxEcho), strings.Join(allow, ", "))}
	}
	return &apiError{status: http.StatusNotFound, code: "no_route", message: fmt.Sprintf("no %s %s in this API", clip(r.Method, maxEcho), clip(r.URL.Path, maxEcho))}
}

// allowed returns the methods the API takes for r's path, asking the mux
// what each would reach, so that every route registered, now or later,
// counts.
func (a *api) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method || a.mux == nil {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "" && !slices.Contains(catchAll, pattern) {
			allow = append(allow, m)
		}
	}
	return allow
}

// handle authenticates, refuses a query parameter other than params and
// a body that is not JSON, limits the body, runs h and writes its error.
func (a *api) handle(h handlerFunc, params ...string) http.Handler {
	return a.serve(h, true, params)
}

// serve is handle; strict false skips the checks of the query and the
// Content-Type, for noRoute, whose 404 or 405 says more.
func (a *api) serve(h handlerFunc, strict bool, params []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		caller, aerr := a.auth.caller(r)
		if aerr != nil {
			if aerr.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="csvbatch"`)
			}
			writeError(w, aerr)
			return
		}
		if strict {
			if err := checkQuery(r, params); err != nil {
				writeError(w, err)
				return
			}
			if err := checkContentType(r); err != nil {
				writeError(w, err)
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBodySize)
		// Every S3 call made for this request shares one deadline, the
		// SDK's retries and backoff included: a stalled S3 costs a client
		// -s3-timeout, never the client's own patience.
		ctx, cancel := context.WithTimeout(r.Context(), a.s3Timeout)
		defer cancel()
		err := h(w, r.WithContext(ctx), caller)
		if err == nil {
			return
		}
		ae := errorFor(err)
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil
		if ae.status >= 500 && timedOut {
			// Whatever the library made of it, the deadline cut it short.
			ae = &apiError{status: http.StatusServiceUnavailable, code: codeS3Unavailable}
		}
		var stopped *bulkStopped
		partial := errors.As(err, &stopped)
		switch {
		case ae.code == codeS3Unavailable:
			ae = a.unavailable(r, timedOut, partial)
			w.Header().Set("Retry-After", strconv.Itoa(a.retryAfter()))
			a.log.WarnContext(r.Context(), "api request: S3 unavailable", "method", r.Method, "path", clip(r.URL.Path, 80), "err", err)
		case ae.status >= 500:
			a.log.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", clip(r.URL.Path, 80), "err", err)
		}
		if partial {
			// What the bulk action did before it stopped, with the error.
			stopped.resp.Error = &errorBody{Code: ae.code, Message: clip(ae.message, maxMessage)}
			writeJSON(w, ae.status, stopped.resp)
			return
		}
		writeError(w, ae)
	})
}

// unavailable is the s3_unavailable answer to r, saying what the client
// may assume: S3 did not answer within the deadline (timedOut), or could
// not be reached or reported trouble of its own; partial says a bulk
// action stopped after it may have changed tasks.
func (a *api) unavailable(r *http.Request, timedOut, partial bool) *apiError {
	msg := "the storage (S3) cannot be reached or reports trouble; try again in a few seconds"
	if timedOut {
		msg = fmt.Sprintf("the storage (S3) did not answer within %s; try again in a few seconds", a.s3Timeout)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/tasks":
		msg += ". The task may or may not have been created: repeat the request with the same Idempotency-Key to get the one it made, if any"
	case partial:
		msg += ". The bulk action stopped part way: results says what it did with each task it reached, and next_cursor goes on from there"
	case r.Method == http.MethodPost && r.URL.Path == "/tasks/bulk":
		msg += ". The bulk action changed nothing: it stopped while it was selecting the tasks"
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		msg += ". The change this request asked for may or may not have been made: read the task before repeating it"
	}
	return &apiError{status: http.StatusServiceUnavailable, code: codeS3Unavailable, message: msg}
}

// retryAfter is the Retry-After of an s3_unavailable answer, in seconds:
// about the deadline, so that clients of a stalled S3 do not come back
// faster than each attempt takes.
func (a *api) retryAfter() int {
	return max(1, int((a.s3Timeout+time.Second-1)/time.Second))
}

// errorResponse is the body of every error answer.
type errorResponse struct {
	Error errorBody `json:"error"`
}

// errorBody is what an error answer says: a stable code, and words.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, errorResponse{Error: errorBody{Code: e.code, Message: clip(e.message, maxMessage)}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // presigned URLs stay readable; the type is JSON and nosniff is set
	_ = enc.Encode(v)        // the client went away: nothing to do
}

// checkQuery refuses a query string that does not decode
// (invalid_query) and a parameter not in params (unknown_parameter).
func checkQuery(r *http.Request, params []string) *apiError {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("invalid_query", "query %q: %v", clip(r.URL.RawQuery, maxEcho), err)
	}
	names := slices.Sorted(maps.Keys(q))
	for _, name := range names {
		if slices.Contains(params, name) {
			continue
		}
		takes := "takes no query parameters"
		if len(params) > 0 {
			takes = "takes " + strings.Join(params, ", ")
		}
		return badRequest(codeUnknownParameter, "unknown query parameter %q: %s %s %s", clip(name, maxEcho), r.Method, r.Pattern[strings.IndexByte(r.Pattern, ' ')+1:], takes)
	}
	return nil
}

// codeUnknownParameter is the code of a query parameter the path does not
// take.
const codeUnknownParameter = "unknown_parameter"

// codeInvalidContentType is the code of a request whose Content-Type is
// not JSON, or of a body sent without one.
const codeInvalidContentType = "invalid_content_type"

// checkContentType refuses a request whose Content-Type is given and is
// not application/json (with charset=utf-8 or no charset). A body without
// a Content-Type is refused where it is read (readJSON).
func checkContentType(r *http.Request) *apiError {
	cts := r.Header.Values("Content-Type")
	if len(cts) == 0 {
		return nil
	}
	ct := cts[0]
	mt, params, err := mime.ParseMediaType(ct)
	if len(cts) == 1 && err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return badRequest(codeInvalidContentType, "Content-Type %q: the API takes application/json (charset=utf-8, if any), once", clip(ct, maxEcho))
}

// readJSON decodes the request body into v: one JSON object, no unknown
// fields, no key twice, sent as application/json. An empty body is
// allowed when optional is true.
func readJSON(r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
			message: fmt.Sprintf("the request body is over %d bytes", tooBig.Limit)}
	case err != nil:
		return fmt.Errorf("read the request body: %w", err)
	case len(bytes.TrimSpace(data)) == 0 && optional:
		return nil
	case len(bytes.TrimSpace(data)) == 0:
		return badRequest("invalid_body", "the request body is empty; a JSON object is expected")
	case r.Header.Get("Content-Type") == "":
		// checkContentType refused any other type already.
		return badRequest(codeInvalidContentType, "the request body has no Content-Type: send it as application/json")
	}
	if !utf8.Valid(data) {
		// encoding/json would quietly replace what is not UTF-8.
		return badRequest("invalid_body", "the request body is not UTF-8")
	}
	if err := decodeStrict(bytes.NewReader(data), v); err != nil {
		return badRequest("invalid_body", "the request body is not a valid JSON object of the expected shape: %v", err)
	}
	if key, ok := duplicateKey(data); ok {
		return badRequest(codeDuplicateKey, "the request body has the key %q twice in one object (keys that differ only in case are the same key)", clip(key, maxEcho))
	}
	return nil
}

// codeDuplicateKey is the code of a body with a key twice in one object:
// which of the two counts would be a guess.
const codeDuplicateKey = "duplicate_key"

// duplicateKey returns a key that data, one valid JSON value, holds twice
// in one object, at any depth. Keys that differ only in case count as one,
// as encoding/json matches them to a field alike.
func duplicateKey(data []byte) (string, bool) {
	type level struct {
		keys    map[string]bool // nil for an array
		wantKey bool
	}
	var stack []*level
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false // the end, or what decodeStrict refused already
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if top = nil; len(stack) > 0 {
				top = stack[len(stack)-1]
			}
		default:
			if key, ok := tok.(string); ok && top != nil && top.keys != nil && top.wantKey {
				folded := strings.ToLower(key)
				if top.keys[folded] {
					return key, true
				}
				top.keys[folded], top.wantKey = true, false
				continue
			}
		}
		// A value ended: the object holding it wants a key next.
		if top != nil && top.keys != nil {
			top.wantKey = true
		}
	}
}

// decodeStrict decodes the one JSON value r holds into v, refusing fields
// v does not have.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value")
	}
	return nil
}

// taskArgs decodes a create request's payload into the arguments of a
// task of type tt. It is stricter than the worker, whose HandleJSON ignores
// fields it does not know (so that a newer producer's tasks still run): it
// refuses them, so that a client's typo is an error, not a default.
func taskArgs(tt taskType, payload json.RawMessage) (any, error) {
	args := tt.newArgs()
	if len(payload) == 0 || string(payload) == "null" {
		return args, nil
	}
	if err := decodeStrict(bytes.NewReader(payload), args); err != nil {
		return nil, fmt.Errorf("%s payload: %w (want %s)", tt.name, err, tt.hint)
	}
	return args, nil
}

// presigned is a presigned request the client sends itself.
type presigned struct {
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt time.Time         `json:"expires_at"`
}

func presignedOf(p *s3task.PresignedRequest) presigned {
	h := map[string]string{}
	for k, v := range p.Header {
		if strings.EqualFold(k, "Host") {
			continue // every client sends it from the URL
		}
		h[k] = strings.Join(v, ", ")
	}
	return presigned{Method: p.Method, URL: p.URL, Headers: h, ExpiresAt: p.Expires.UTC()}
}

// presignedForm is a browser-style POST upload: send a multipart/form-data
// POST to URL with every field, then the file in FileField, last.
type presignedForm struct {
	URL       string            `json:"url"`
	Fields    map[string]string `json:"fields"`
	FileField string            `json:"file_field"`
	MaxSize   int64             `json:"max_size"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// maxNameBytes is the longest task name; the library refuses a longer
// one (CreateParams.Name).
const maxNameBytes = 256

type createRequest struct {
	Name    string          `json:"name"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

type createResponse struct {
	Task taskview.Task `json:"task"`
	// Upload is null when the task no longer takes an upload: a create
	// that repeats the key of a task already submitted or finished.
	Upload *uploadURLs `json:"upload"`
}

// uploadURLs are the presigned ways to upload a task's input.
type uploadURLs struct {
	Put  presigned     `json:"put"`
	Post presignedForm `json:"post"`
}

// uploadURLs presigns the upload of task id's input, both ways.
func (a *api) uploadURLs(ctx context.Context, id string) (*uploadURLs, error) {
	put, err := a.store.PresignUpload(ctx, id, a.uploadTTL)
	if err != nil {
		return nil, err
	}
	form, err := a.store.PresignUploadForm(ctx, id, a.uploadTTL)
	if err != nil {
		return nil, err
	}
	return &uploadURLs{
		Put:  presignedOf(put),
		Post: presignedForm{URL: form.URL, Fields: form.Fields, FileField: "file", MaxSize: form.MaxSize, ExpiresAt: form.Expires.UTC()},
	}, nil
}

// maxIdempotencyKey bounds an Idempotency-Key header. The library takes
// keys of up to 256 bytes; this leaves room for the caller's name.
const maxIdempotencyKey = 128

// idempotencyKey returns the CreateParams.Key for the request's
// Idempotency-Key header: the key scoped to the caller, so that two
// callers' keys never name one task. It returns "" if there is no header.
func idempotencyKey(r *http.Request, caller string) (string, error) {
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) == 0 {
		return "", nil
	}
	key := keys[0]
	if len(keys) > 1 || key == "" || len(key) > maxIdempotencyKey || !utf8.ValidString(key) ||
		strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return "", badRequest("invalid_idempotency_key", "send one Idempotency-Key header of 1 to %d bytes of printable text", maxIdempotencyKey)
	}
	return caller + ":" + key, nil
}

// create: POST /tasks {name, type, payload} [Idempotency-Key] -> 201 {task,
// upload}. A request that repeats the key of an earlier one gets the task
// that one made, as it is now, with fresh upload URLs while it still waits
// for its input and a null upload once it does not.
func (a *api) create(w http.ResponseWriter, r *http.Request, caller string) error {
	key, err := idempotencyKey(r, caller)
	if err != nil {
		return err
	}
	var req createRequest
	if err := readJSON(r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Name) == "" {
		return badRequest("invalid_argument", "name: give the task a name, 1 to %d bytes, not only spaces", maxNameBytes)
	}
	tt, ok := lookupType(req.Type)
	switch {
	case !ok:
		return badRequest("invalid_body", "type %q: want one of %s", clip(req.Type, maxEcho), strings.Join(inputTypeNames(), ", "))
	case tt.noInput:
		return badRequest("invalid_body", "type %q takes no file: the fleet makes its tasks on a schedule (GET /periodics); create one of %s",
			req.Type, strings.Join(inputTypeNames(), ", "))
	}
	args, err := taskArgs(tt, req.Payload)
	if err != nil {
		return badRequest("invalid_body", "%v", err)
	}
	t, err := a.store.Create(r.Context(), s3task.CreateParams{
		Name: req.Name, Type: req.Type, Args: args, Key: key, CreatedBy: caller,
	})
	if err != nil {
		return err
	}
	resp := createResponse{Task: viewOf(t)}
	if t.Status == s3task.StatusCreated {
		if resp.Upload, err = a.uploadURLs(r.Context(), t.ID); err != nil {
			return err
		}
	}
	a.log.InfoContext(r.Context(), "task created", "task_id", t.ID, "type", t.Type, "created_by", caller, "idempotency_key", key)
	w.Header().Set("Location", "/tasks/"+t.ID)
	writeJSON(w, http.StatusCreated, resp)
	return nil
}

// viewOf is task t as the API shows it: taskview's view, with this
// service's own word on one kind of failure. A bad_input failure (not CSV,
// not UTF-8, a missing column: see categorize) is not offered a retry: a
// retry reads the same file, which is written once, and fails the same
// way. Store.Retry still accepts it, for a handler fixed since; the page
// shows the note instead of the button.
func viewOf(t *s3task.Task) taskview.Task {
	v := taskview.Of(t)
	if v.Retryable && t.Terminal() && t.ErrorCategory == catBadInput {
		v.Retryable = false
		v.RetryNote = "no retry offered: the file cannot be processed as it is (bad_input), and a retry reads the same file; create a new task with a corrected file"
	}
	return v
}

// answer writes task t, or returns err; a change the call made (done, not
// "") goes to the log.
func (a *api) answer(w http.ResponseWriter, r *http.Request, t *s3task.Task, err error, done string, attrs ...any) error {
	if err != nil {
		return err
	}
	if done != "" {
		a.log.InfoContext(r.Context(), done, append([]any{"task_id", t.ID}, attrs...)...)
	}
	writeJSON(w, http.StatusOK, viewOf(t))
	return nil
}

// submit: POST /tasks/{id}/submit -> 200 task.
func (a *api) submit(w http.ResponseWriter, r *http.Request, caller string) error {
	t, err := a.store.Submit(r.Context(), r.PathValue("id"))
	return a.answer(w, r, t, err, "task submitted", "by", caller)
}

type listResponse struct {
	Tasks      []taskview.Task   `json:"tasks"`
	Broken     []taskview.Broken `json:"broken,omitempty"`
	NextCursor string            `json:"next_cursor,omitempty"`
	// Scanned is how many entries of the listing the call went through;
	// ScanLimited says it stopped at max_scan before the page was full,
	// with more of the listing left: next_cursor goes on from there.
	Scanned     int  `json:"scanned"`
	ScanLimited bool `json:"scan_limited"`
}

// listFilter is a value of GET /tasks?status=: one of the library's
// statuses, or one of its states that tells a part of a status
// (s3task.ListOptions.States); Store.List filters by either.
type listFilter struct {
	status s3task.Status // "" for a state
	state  s3task.State  // "" for a status
}

// listStates are the values of status= besides the library's statuses:
// the parts of a status the page's state views show.
var listStates = map[string]s3task.State{
	"scheduled": s3task.StateScheduled, // queued to start at a run_at still to come
	"retrying":  s3task.StateRetrying,  // failed, with a retry due at retry_at
	"dead":      s3task.StateDead,      // failed for good: no retry left or wanted
}

// parseListFilter returns the filter a status= value names.
func parseListFilter(v string) (listFilter, bool) {
	if st, ok := listStates[v]; ok {
		return listFilter{state: st}, true
	}
	if s := s3task.Status(v); s.Valid() {
		return listFilter{status: s}, true
	}
	return listFilter{}, false
}

// options sets f in opts, the filters of List or of a bulk action.
func (f listFilter) options(statuses *[]s3task.Status, states *[]s3task.State) {
	switch {
	case f.status != "":
		*statuses = []s3task.Status{f.status}
	case f.state != "":
		*states = []s3task.State{f.state}
	}
}

// statusValues lists the values status= takes, for error messages.
func statusValues() string {
	return "created, queued, scheduled, running, completed, failed, retrying, dead, abandoned"
}

// maxTypeBytes is the longest task type a filter may name, as the library
// takes it (CreateParams.Type).
const maxTypeBytes = 128

// wellFormedType reports whether typ can be a task type: at most
// maxTypeBytes bytes of UTF-8, as the library takes it, and printable
// (no newline, no control character), as this API takes it.
func wellFormedType(typ string) bool {
	return len(typ) <= maxTypeBytes && utf8.ValidString(typ) && !strings.ContainsFunc(typ, func(r rune) bool { return !unicode.IsPrint(r) })
}

// queryParams decodes the request's query string. url.Values drops what
// it cannot decode; an answer must not quietly ignore part of a question.
func queryParams(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("invalid_query", "query %q: %v", clip(r.URL.RawQuery, maxEcho), err)
	}
	return q, nil
}

// oneParam returns the value of query parameter name, "" if absent; a
// parameter given twice is refused.
func oneParam(q url.Values, name string) (string, error) {
	vs := q[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", badRequest("invalid_query", "%s is given %d times; give it once", name, len(vs))
}

// intParam returns the value of query parameter name as a number from lo
// to hi, or def if it is absent.
func intParam(q url.Values, name string, def, lo, hi int, code string) (int, error) {
	s, err := oneParam(q, name)
	if err != nil || s == "" {
		return def, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badRequest(code, "%s %q: want a number from %d to %d", name, clip(s, maxEcho), lo, hi)
	}
	return n, nil
}

// list: GET /tasks?limit=&cursor=&status=&type=&max_scan= -> 200 {tasks,
// broken, next_cursor, scanned, scan_limited}, newest first.
func (a *api) list(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := queryParams(r)
	if err != nil {
		return err
	}
	var opts s3task.ListOptions
	if opts.Cursor, err = oneParam(q, "cursor"); err != nil {
		return err
	}
	// limit keeps the code it always had; the filters came later and
	// answer invalid_query, as every parameter added since does.
	if opts.Limit, err = intParam(q, "limit", 0, 1, s3task.MaxListLimit, "invalid_argument"); err != nil {
		return err
	}
	if opts.MaxScan, err = intParam(q, "max_scan", 0, 1, s3task.MaxListScan, "invalid_query"); err != nil {
		return err
	}
	status, err := oneParam(q, "status")
	if err != nil {
		return err
	}
	if status != "" {
		filter, ok := parseListFilter(status)
		if !ok {
			return badRequest("invalid_query", "status %q: want one of %s", clip(status, maxEcho), statusValues())
		}
		filter.options(&opts.Statuses, &opts.States)
	}
	typ, err := oneParam(q, "type")
	if err != nil {
		return err
	}
	if typ != "" {
		if !wellFormedType(typ) {
			return badRequest("invalid_query", "type %q: want a task type, at most %d bytes of printable UTF-8", clip(typ, maxEcho), maxTypeBytes)
		}
		opts.Types = []string{typ}
	}
	page, err := a.store.List(r.Context(), opts)
	if errors.Is(err, s3task.ErrInvalidCursor) {
		return badRequest("invalid_cursor", "cursor %q is not a next_cursor of this API: pass one back as it is", clip(opts.Cursor, maxEcho))
	}
	if err != nil {
		return err
	}
	resp := listResponse{Tasks: make([]taskview.Task, 0, len(page.Tasks)), NextCursor: page.NextCursor,
		Scanned: page.Scanned, ScanLimited: page.ScanLimited}
	for _, t := range page.Tasks {
		resp.Tasks = append(resp.Tasks, viewOf(t))
	}
	for _, b := range page.Broken {
		// The page polls the list: log at debug level, the answer shows it.
		a.log.DebugContext(r.Context(), "unreadable task record", "key", b.Key, "err", b.Err)
	}
	resp.Broken = taskview.BrokenOf(page.Broken)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// cmpOr returns n, or def if n is zero.
func cmpOr(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// get: GET /tasks/{id} -> 200 task.
func (a *api) get(w http.ResponseWriter, r *http.Request, _ string) error {
	t, err := a.store.Get(r.Context(), r.PathValue("id"))
	return a.answer(w, r, t, err, "")
}

// retry: POST /tasks/{id}/retry -> 200 task.
func (a *api) retry(w http.ResponseWriter, r *http.Request, caller string) error {
	t, err := a.store.Retry(r.Context(), r.PathValue("id"))
	return a.answer(w, r, t, err, "task retried", "by", caller)
}

// schedule: POST /tasks/{id}/schedule [{run_at}] -> 200 task: sets the
// earliest time a created or queued task may start. Without run_at, or
// with a time past, a scheduled task runs now (the page's "Run now").
func (a *api) schedule(w http.ResponseWriter, r *http.Request, caller string) error {
	var req struct {
		RunAt *time.Time `json:"run_at"`
	}
	if err := readJSON(r, &req, true); err != nil {
		return err
	}
	var at time.Time
	if req.RunAt != nil {
		at = *req.RunAt
	}
	t, err := a.store.Schedule(r.Context(), r.PathValue("id"), at)
	if err != nil {
		return err
	}
	runAt := "now"
	if !t.RunAt.IsZero() {
		runAt = t.RunAt.Format(time.RFC3339Nano)
	}
	return a.answer(w, r, t, nil, "task scheduled", "by", caller, "run_at", runAt)
}

// cancel: POST /tasks/{id}/cancel [{reason}] -> 200 task.
func (a *api) cancel(w http.ResponseWriter, r *http.Request, caller string) error {
	var req struct {
		Reason string `json:"reason"`
	}
	if err := readJSON(r, &req, true); err != nil {
		return err
	}
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by " + caller
	}
	t, err := a.store.Cancel(r.Context(), r.PathValue("id"), reason)
	return a.answer(w, r, t, err, "task cancelled", "by", caller)
}

// output: GET /tasks/{id}/output -> 200 presigned GET of the output, for
// completed tasks only.
func (a *api) output(w http.ResponseWriter, r *http.Request, _ string) error {
	p, err := a.store.PresignDownload(r.Context(), r.PathValue("id"), a.downloadTTL)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, presignedOf(p))
	return nil
}

// reissueUpload: POST /tasks/{id}/upload -> 200 {task, upload}: fresh
// presigned upload URLs (PUT and POST form, as create returns) for a task
// still waiting for its input, whose first ones may have expired. Once the
// task is submitted or cancelled the library refuses: 409
// invalid_transition.
func (a *api) reissueUpload(w http.ResponseWriter, r *http.Request, caller string) error {
	id := r.PathValue("id")
	upload, err := a.uploadURLs(r.Context(), id)
	if err != nil {
		return err
	}
	t, err := a.store.Get(r.Context(), id)
	if err != nil {
		return err
	}
	resp := createResponse{Task: viewOf(t), Upload: upload}
	a.log.InfoContext(r.Context(), "upload re-issued", "task_id", id, "by", caller)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// cleanPaths refuses any request whose decoded path is not already clean
// (a "." or ".." segment, plain or percent-encoded, or "//") before the mux
// could redirect it elsewhere. Under /tasks/ such a path can only be an
// attempt to smuggle something into a task ID, so it is an invalid ID. An
// encoded "/" inside a segment ("a%2Fb") passes here and reaches the
// handler as one segment, where the library refuses it as an ID.
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if p != clean || !strings.HasPrefix(p, "/") {
			code := "invalid_path"
			if strings.HasPrefix(p, "/tasks/") {
				code = "invalid_id"
			}
			writeError(w, badRequest(code, "the path %q is not in canonical form", clip(p, maxEcho)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
