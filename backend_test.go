package s3task_test

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/conformance"
	"github.com/s3task/s3task/internal/s3test"
)

// TestCheckBackendAnonymousSeaweedFS runs CheckBackend on a SeaweedFS
// server started as it runs by default, without an identities file: it
// enforces conditional writes, so the check passes, but it serves any
// request, so the report must say that presigned URLs are neither signed
// nor time-limited in effect. (The conformance suite's SeaweedFS, with an
// identity, enforces both.)
func TestCheckBackendAnonymousSeaweedFS(t *testing.T) {
	t.Parallel()
	rc := s3test.SeaweedRemoteT(t)
	w, err := s3test.StartSeaweed(t.Context(), s3test.SeaweedConfig{
		Bin: rc.SeaweedBin, Dir: filepath.Join(t.TempDir(), "root"), Anonymous: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stop seaweedfs: %v", err)
		}
	})
	var closer s3test.TransportCloser
	t.Cleanup(closer.CloseIdleConnections)
	// Keys nobody configured: the server takes them all the same.
	client := s3test.NewClientWithKeys(w.Endpoint, "nobody", "not-a-secret", closer.Wrap)
	bucket, err := s3test.NewBucket(t.Context(), client, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3task.NewStore(client, bucket, &s3task.StoreOptions{Logger: conformance.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	report, err := st.CheckBackend(t.Context())
	if err != nil {
		t.Fatalf("CheckBackend: %v", err)
	}
	want := s3task.BackendReport{
		ConditionalCreate: s3task.Enforced, ConditionalUpdate: s3task.Enforced,
		AtomicUpdate: s3task.Enforced, RaceWinners: 1,
		IfMatchMissingKey: s3task.Enforced, IfMatchMissingKeyAnswer: "404 NoSuchKey",
		PresignSignature: s3task.NotEnforced, PresignExpiry: s3task.NotEnforced,
	}
	if diff := cmp.Diff(want, *report, cmpopts.IgnoreFields(s3task.BackendReport{}, "ServerClockOffset", "Notes")); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}
