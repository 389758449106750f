package main

import (
	"net/http"
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
