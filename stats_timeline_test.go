package s3task_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// Stats.ByType counts by type and status, and StatsOptions.Interval makes
// a timeline of what was created and what finished in each interval, with
// no request more than the count itself.
func TestStatsTimeline(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	st := srv.NewStore(t, nil)
	ctx := t.Context()
	handler := s3task.HandlerFunc(func(_ context.Context, job *s3task.Job) error {
		if strings.HasPrefix(job.Task.Name, "bad") {
			return s3task.Permanent(errors.New("bad row"))
		}
		return nil
	})
	hour := func() time.Time { return st.Now().Truncate(time.Hour) }

	// Three hours ago: two imports, one fails; then one resize an hour
	// ago; now one created import that waits for its input and one
	// cancelled.
	srv.Advance(hour().Add(time.Hour).Sub(st.Now()) + time.Minute) // a minute into an hour
	first := hour()
	s3tasktest.Submit(t, st, s3task.CreateParams{Name: "good", Type: "import"}, []byte("a"))
	s3tasktest.Submit(t, st, s3task.CreateParams{Name: "bad", Type: "import"}, []byte("b"))
	s3tasktest.Drain(t, st, handler)
	srv.Advance(2 * time.Hour)
	s3tasktest.Submit(t, st, s3task.CreateParams{Name: "thumb", Type: "resize"}, []byte("c"))
	s3tasktest.Drain(t, st, handler)
	srv.Advance(time.Hour)
	if _, err := st.Create(ctx, s3task.CreateParams{Name: "waits", Type: "import"}); err != nil {
		t.Fatal(err)
	}
	gone, err := st.Create(ctx, s3task.CreateParams{Name: "dropped"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, gone.ID, "not needed"); err != nil {
		t.Fatal(err)
	}

	var count s3test.Counter
	counted := srv.NewStore(t, nil, count.Wrap)
	plain, err := counted.Stats(ctx, s3task.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := count.Total()
	got, err := counted.Stats(ctx, s3task.StatsOptions{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if extra := count.Total() - 2*before; extra != 0 {
		t.Errorf("the timeline cost %d requests more than the count itself (%d)", extra, before)
	}
	if plain.Timeline != nil {
		t.Errorf("Timeline without Interval = %v, want nil", plain.Timeline)
	}

	wantType := map[string]map[s3task.Status]int{
		"import": {s3task.StatusCompleted: 1, s3task.StatusFailed: 1, s3task.StatusCreated: 1},
		"resize": {s3task.StatusCompleted: 1},
		"":       {s3task.StatusAbandoned: 1},
	}
	for typ, want := range wantType {
		for status, n := range want {
			if got.ByType[typ][status] != n {
				t.Errorf("ByType[%q][%s] = %d, want %d (all: %v)", typ, status, got.ByType[typ][status], n, got.ByType)
			}
		}
	}

	// Newest first: this hour, one empty hour... back to the first hour.
	want := []s3task.StatsBucket{
		{Start: first.Add(3 * time.Hour), Created: 2, Abandoned: 1},
		{Start: first.Add(2 * time.Hour), Created: 1, Completed: 1},
		{Start: first.Add(time.Hour)},
		{Start: first, Created: 2, Completed: 1, Failed: 1},
	}
	if len(got.Timeline) != len(want) {
		t.Fatalf("timeline of %d buckets, want %d: %+v", len(got.Timeline), len(want), got.Timeline)
	}
	for i, w := range want {
		if g := got.Timeline[i]; !g.Start.Equal(w.Start) || g.Created != w.Created || g.Completed != w.Completed || g.Failed != w.Failed || g.Abandoned != w.Abandoned {
			t.Errorf("bucket %d = %+v, want %+v", i, g, w)
		}
	}

	for _, opts := range []s3task.StatsOptions{
		{Interval: time.Millisecond},
		{Interval: -time.Hour},
		{Interval: time.Second, Since: st.Now().Add(-2 * time.Hour)},
	} {
		if _, err := counted.Stats(ctx, opts); !errors.Is(err, s3task.ErrInvalidArgument) {
			t.Errorf("Stats(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
}
