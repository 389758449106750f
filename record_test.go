package s3task_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// status.json keeps every field of the seed's record format, null where
// unset, so scripts in other languages that look keys up find them; and
// what the library writes, it reads back the same.
func TestRecordKeepsTheSeedFields(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	store := s3.NewStore(t, nil)
	task, err := store.Create(context.Background(), s3task.CreateParams{Name: "June batch import"})
	if err != nil {
		t.Fatal(err)
	}
	body, ok := s3.Object(store.Prefix() + task.ID + "/status.json")
	if !ok {
		t.Fatal("no status.json")
	}
	var rec map[string]any
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"schema_version", "task_id", "task_name", "status", "attempt_id",
		"row_count", "processed_count", "success_count", "error_count",
		"input_object_path", "output_object_path", "worker_id", "lease_expires_at",
		"last_error", "created_at", "updated_at", "created_by", "task_type", "payload",
	} {
		if _, ok := rec[key]; !ok {
			t.Errorf("status.json has no %q: %s", key, body)
		}
	}
	for _, key := range []string{"output_object_path", "worker_id", "lease_expires_at", "last_error", "created_by", "task_type", "payload"} {
		if rec[key] != nil {
			t.Errorf("%s = %v on a new task, want null", key, rec[key])
		}
	}
	got, err := store.Get(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Payload != nil || got.LastError != "" || !got.LeaseExpiresAt.IsZero() {
		t.Errorf("nulls read back as %q, %q, %v; want the zero values", got.Payload, got.LastError, got.LeaseExpiresAt)
	}
}
