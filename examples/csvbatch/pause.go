package main

import (
	"net/http"
	"slices"
	"strings"
)

// pausedResponse is what GET and POST /paused answer.
type pausedResponse struct {
	// Paused are the task types paused now, sorted; [] when none.
	Paused []string `json:"paused"`
	// Types are the task types this service's workers run, in the order
	// the page offers them: those an operator may pause.
	Types []string `json:"types"`
}

// paused: GET /paused -> 200 pausedResponse.
func (a *api) paused(w http.ResponseWriter, r *http.Request, _ string) error {
	return a.answerPaused(w, r)
}

// setPaused: POST /paused {type, paused} -> 200 pausedResponse, after
// Store.Pause (paused true) or Store.Resume (false) of the type. Pausing
// a paused type, or resuming one that is not, changes nothing.
func (a *api) setPaused(w http.ResponseWriter, r *http.Request, caller string) error {
	var req struct {
		Type   *string `json:"type"`
		Paused *bool   `json:"paused"`
	}
	if err := readJSON(r, &req, false); err != nil {
		return err
	}
	if req.Type == nil || req.Paused == nil {
		return badRequest("invalid_argument", "the body needs both type (a task type, \"\" for untyped tasks) and paused (true or false)")
	}
	if err := a.checkPauseType(r, *req.Type, *req.Paused); err != nil {
		return err
	}
	var err error
	if *req.Paused {
		err = a.store.Pause(r.Context(), *req.Type)
	} else {
		err = a.store.Resume(r.Context(), *req.Type)
	}
	if err != nil {
		return err
	}
	what := "task type resumed"
	if *req.Paused {
		what = "task type paused"
	}
	a.log.Info(what, "type", *req.Type, "by", caller)
	return a.answerPaused(w, r)
}

// answerPaused writes the paused types as they are now.
func (a *api) answerPaused(w http.ResponseWriter, r *http.Request) error {
	paused, err := a.store.Paused(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pausedResponse{Paused: append([]string{}, paused...), Types: typeNames()})
	return nil
}

// checkPauseType refuses a type POST /paused must not act on: one that
// cannot be a task type (invalid_type: a control character, a newline,
// over 128 bytes, not UTF-8), and one this service does not run
// (unknown_type), which is most likely a misspelling: pausing it would
// stop nothing here. A type paused now may always be resumed, whoever
// paused it (s3taskctl pause, another service), so that the page can
// lift every pause it lists; that costs one GET of the paused object.
func (a *api) checkPauseType(r *http.Request, typ string, pause bool) error {
	if slices.Contains(typeNames(), typ) {
		return nil
	}
	if !pause {
		paused, err := a.store.Paused(r.Context())
		if err != nil {
			return err
		}
		if slices.Contains(paused, typ) {
			return nil
		}
	}
	if !wellFormedType(typ) {
		return badRequest(codeInvalidType, "type %q: not a task type; a type is 1 to %d bytes of printable UTF-8", clip(typ, maxEcho), maxTypeBytes)
	}
	return badRequest(codeUnknownType, "type %q: this service runs %s; a type it does not run cannot be paused here (a paused one can be resumed)", clip(typ, maxEcho), strings.Join(typeNames(), ", "))
}

// The codes of a task type POST /paused refuses.
const (
	codeInvalidType = "invalid_type" // not a task type at all
	codeUnknownType = "unknown_type" // a type this service does not run
)
