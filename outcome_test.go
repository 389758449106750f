package s3task_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// A change whose record is deleted (as Purge does) between its read and its
// write cannot know whether the write landed first, since the refusal may
// answer the SDK's resend of a write that did: the call says
// ErrOutcomeUnknown, not ErrNotFound, and Get then says the task is gone.
func TestChangeOfPurgedRecordIsOutcomeUnknown(t *testing.T) {
	s3 := s3tasktest.NewS3(t)
	other := s3.NewStore(t, nil)
	ctx := context.Background()
	var target string
	deleteFirst := func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && target != "" && strings.HasSuffix(r.URL.Path, "/"+target+"/status.json") && r.Header.Get("If-Match") != "" {
				if _, err := s3.Client().DeleteObject(r.Context(), &s3sdk.DeleteObjectInput{Bucket: aws.String(s3.Bucket()), Key: aws.String(other.Prefix() + target + "/status.json")}); err != nil {
					return nil, err
				}
			}
			return next.RoundTrip(r)
		})
	}
	store := s3.NewStore(t, nil, deleteFirst)
	task, err := other.Create(ctx, s3task.CreateParams{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	target = task.ID
	_, err = store.Cancel(ctx, task.ID, "x")
	if !errors.Is(err, s3task.ErrOutcomeUnknown) || errors.Is(err, s3task.ErrNotFound) {
		t.Fatalf("cancel of a task purged under it: %v, want ErrOutcomeUnknown only", err)
	}
	if _, err := store.Get(ctx, task.ID); !errors.Is(err, s3task.ErrNotFound) {
		t.Errorf("get afterwards: %v, want ErrNotFound", err)
	}
}
