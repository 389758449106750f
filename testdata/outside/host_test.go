package host

import (
	"testing"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

func TestGreet(t *testing.T) {
	mux, err := NewMux()
	if err != nil {
		t.Fatal(err)
	}
	store := s3tasktest.NewStore(t, nil)
	task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "greet", Args: GreetArgs{Name: "outside"}}, []byte("unused input"))
	res := s3tasktest.Run(t, store, mux, task.ID)
	if res.Err != nil {
		t.Fatalf("handler failed: %v", res.Err)
	}
	if got, want := string(res.Output), "hello, outside\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if res.Task.Status != s3task.StatusCompleted {
		t.Errorf("status = %q, want %q", res.Task.Status, s3task.StatusCompleted)
	}
}
