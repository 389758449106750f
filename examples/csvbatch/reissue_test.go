package main

import (
	"net/http"
	"testing"
)

// TestReissueUpload: POST /tasks/{id}/upload gives a created task fresh
// upload URLs, as create does; the task then runs on the file sent with
// them. Once it is submitted (or cancelled) the API refuses with 409.
func TestReissueUpload(t *testing.T) {
	t.Parallel()
	s := startService(t, svcOptions{})
	c := s.create("late file", typeStats, nil)
	if !c.Task.UploadReissuable {
		t.Errorf("created task: upload_reissuable false")
	}
	var again createResponse
	s.call("POST", "/tasks/"+c.Task.ID+"/upload", nil, http.StatusOK, &again)
	if again.Task.ID != c.Task.ID || again.Upload.Put.URL == "" || again.Upload.Post.URL == "" || again.Upload.Post.FileField != "file" {
		t.Fatalf("re-issued upload: %+v", again)
	}
	s.uploadPost(again, []byte(peopleCSV))
	s.call("POST", "/tasks/"+c.Task.ID+"/submit", nil, http.StatusOK, nil)
	done := s.waitFor(c.Task.ID, "completed", completed)
	if done.UploadReissuable {
		t.Errorf("completed task: upload_reissuable true")
	}
	s.callError("POST", "/tasks/"+c.Task.ID+"/upload", nil, http.StatusConflict, "invalid_transition")

	cancelled := s.create("given up", typeStats, nil)
	s.call("POST", "/tasks/"+cancelled.Task.ID+"/cancel", nil, http.StatusOK, nil)
	s.callError("POST", "/tasks/"+cancelled.Task.ID+"/upload", nil, http.StatusConflict, "invalid_transition")
	s.callError("POST", "/tasks/7YBQ92TME0R0ZNQWDXR4MESPE7/upload", nil, http.StatusNotFound, "not_found")
}
