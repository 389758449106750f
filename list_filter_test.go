package s3task_test

// Tests of List's filters (ListOptions.Statuses, Types, Metadata) and of its
// scan bound (MaxScan): full pages, paging through a filter, the bound's
// short pages, what a filtered page costs, and that an unfiltered List is
// what it always was.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/s3tasktest"
)

// planted describes a task plantTasks writes.
type planted struct {
	status s3task.Status
	typ    string
	md     map[string]string
	broken bool // an unreadable record instead of a task
}

// plantTasks writes a record for each of specs straight into the bucket,
// specs[0] the newest, and returns their IDs in listing order (the order
// of specs). Their requests go through a plain client, which no store
// counts.
func plantTasks(t *testing.T, e *env, specs []planted) []string {
	t.Helper()
	base := time.Now().UTC().Truncate(time.Millisecond)
	ids := make([]string, len(specs))
	for i := range specs {
		ids[i] = s3task.NewIDAt(base.Add(-time.Duration(i) * time.Millisecond))
	}
	if !slices.IsSorted(ids) {
		t.Fatal("planted IDs do not list in the order of their specs")
	}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(specs); i += 8 {
				body := []byte("{not json")
				if !specs[i].broken {
					at := base.Add(-time.Duration(i) * time.Millisecond)
					var err error
					body, err = json.Marshal(&s3task.Task{
						SchemaVersion: 1, ID: ids[i], Name: fmt.Sprint("task ", i), Type: specs[i].typ,
						Status: specs[i].status, MaxAttempts: 3, Metadata: specs[i].md,
						CreatedAt: at, UpdatedAt: at, Revision: "planted",
					})
					if err != nil {
						errs[i] = err
						continue
					}
				}
				_, errs[i] = e.raw.Put(e.ctx, e.recordKey(ids[i]), body)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// mixed returns n specs whose statuses, types and metadata cycle with
// periods 6, 3 and 7, so that every combination occurs: task i has the
// status allStatuses[i%6], type mixedTypes[i%3], metadata tenant "t<i%7>",
// and region "eu" for even i ("us" for odd).
func mixed(n int) []planted {
	specs := make([]planted, n)
	for i := range specs {
		region := "us"
		if i%2 == 0 {
			region = "eu"
		}
		specs[i] = planted{
			status: allStatuses[i%len(allStatuses)],
			typ:    mixedTypes[i%len(mixedTypes)],
			md:     map[string]string{"tenant": fmt.Sprint("t", i%7), "region": region},
		}
	}
	return specs
}

var (
	allStatuses = []s3task.Status{s3task.StatusCreated, s3task.StatusQueued, s3task.StatusRunning,
		s3task.StatusCompleted, s3task.StatusFailed, s3task.StatusAbandoned}
	mixedTypes = []string{"", "resize", "import"}
)

// matching returns the IDs of the specs that opts' filters pass, in
// listing order: the filter's meaning, written out independently of List.
func matching(ids []string, specs []planted, opts s3task.ListOptions) []string {
	var out []string
	for i, sp := range specs {
		if sp.broken ||
			len(opts.Statuses) > 0 && !slices.Contains(opts.Statuses, sp.status) ||
			len(opts.Types) > 0 && !slices.Contains(opts.Types, sp.typ) {
			continue
		}
		ok := true
		for k, v := range opts.Metadata {
			if got, has := sp.md[k]; !has || got != v {
				ok = false
			}
		}
		if ok {
			out = append(out, ids[i])
		}
	}
	return out
}

// cursorAfter is the cursor that continues a listing right after the task
// folder id: the format List has always issued, which callers may hold.
func cursorAfter(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id + "0")) }

// walkPages pages through the listing with opts from its start and returns
// the pages, failing t after max pages.
func walkPages(t *testing.T, e *env, st *s3task.Store, opts s3task.ListOptions, max int) []*s3task.Page {
	t.Helper()
	var pages []*s3task.Page
	for {
		if len(pages) == max {
			t.Fatalf("still paging after %d pages", max)
		}
		page, err := st.List(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		if page.NextCursor == "" {
			return pages
		}
		opts.Cursor = page.NextCursor
	}
}

func TestListFilterFullPages(t *testing.T) {
	t.Parallel()
	const n = 300
	st, e := setup(t, nil)
	specs := mixed(n)
	ids := plantTasks(t, e, specs)

	tests := []struct {
		name string
		opts s3task.ListOptions
	}{
		{"one status", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed}}},
		{"two statuses", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed, s3task.StatusAbandoned}}},
		{"one type", s3task.ListOptions{Types: []string{"resize"}}},
		{"untyped tasks", s3task.ListOptions{Types: []string{""}}},
		{"two types, one repeated", s3task.ListOptions{Types: []string{"import", "resize", "import"}}},
		{"one metadata entry", s3task.ListOptions{Metadata: map[string]string{"tenant": "t3"}}},
		{"two metadata entries", s3task.ListOptions{Metadata: map[string]string{"tenant": "t3", "region": "eu"}}},
		{"status and type", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusQueued}, Types: []string{"resize"}}},
		{"all three kinds", s3task.ListOptions{
			Statuses: []s3task.Status{s3task.StatusFailed, s3task.StatusCompleted},
			Types:    []string{"resize", ""},
			Metadata: map[string]string{"tenant": "t2"},
		}},
		{"a status every task has passes all", s3task.ListOptions{Statuses: allStatuses}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := matching(ids, specs, tc.opts)
			if len(want) < 10 {
				t.Fatalf("the filter passes %d planted tasks; the test wants at least 10", len(want))
			}

			// The first page is full: the first Limit tasks that pass,
			// having scanned up to the last of them.
			opts := tc.opts
			opts.Limit = 5
			page, err := st.List(e.ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want[:5], taskIDs(page.Tasks)); diff != "" {
				t.Errorf("first page (-want +got):\n%s", diff)
			}
			last := slices.Index(ids, want[4])
			if page.Scanned != last+1 || page.ScanLimited || page.NextCursor != cursorAfter(want[4]) {
				t.Errorf("first page: Scanned %d, ScanLimited %v, NextCursor %q; want %d, false, the cursor after its last task",
					page.Scanned, page.ScanLimited, page.NextCursor, last+1)
			}

			// Paging on shows every task that passes, once, newest first,
			// every page but the last full.
			opts.Limit = 9
			var got []string
			pages := walkPages(t, e, st, opts, n)
			for i, page := range pages {
				if i < len(pages)-1 && len(page.Tasks) != 9 || page.ScanLimited || len(page.Broken) != 0 {
					t.Errorf("page %d of %d: %d tasks, ScanLimited %v, %d broken; want 9 but on the last page, never short",
						i+1, len(pages), len(page.Tasks), page.ScanLimited, len(page.Broken))
				}
				got = append(got, taskIDs(page.Tasks)...)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tasks paged through (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a filter nothing passes", func(t *testing.T) {
		e.count.Reset()
		page, err := st.List(e.ctx, s3task.ListOptions{Metadata: map[string]string{"tenant": "nobody"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) != 0 || page.NextCursor != "" || page.ScanLimited || page.Scanned != n {
			t.Errorf("page: %d tasks, cursor %q, ScanLimited %v, Scanned %d; want an empty last page that scanned all %d",
				len(page.Tasks), page.NextCursor, page.ScanLimited, page.Scanned, n)
		}
		e.wantCounts(t, map[string]int{"LIST": 1, "GET": n})
	})
}

// TestListFilterCost measures what a filtered page costs on 1,000 tasks
// of which every tenth passes, for each of the ten ways to pick every
// tenth. The figures are in List's doc and in BENCHMARKS.md.
func TestListFilterCost(t *testing.T) {
	t.Parallel()
	const n = 1000
	st, e := setup(t, nil) // ListConcurrency 8, the default
	specs := make([]planted, n)
	for i := range specs {
		specs[i] = planted{status: s3task.StatusCompleted, md: map[string]string{"slot": fmt.Sprint(i % 10)}}
	}
	ids := plantTasks(t, e, specs)

	// slot k passes tasks k, k+10, k+20, ...: a page of 10 ends at task
	// 90+k. Reads go in batches of the larger of ListConcurrency and the
	// places left, so the batch that fills the page may read past it: for
	// slot 1, the batches are 0-9, 10-18, then eight at a time from 19,
	// and the last, 91-98, reads 7 past task 91.
	tests := []struct {
		slot, gets int
	}{
		{0, 91}, {1, 99}, {2, 99}, {3, 99}, {4, 99}, {5, 99}, {6, 99}, {7, 99}, {8, 99}, {9, 100},
	}
	for _, tc := range tests {
		opts := s3task.ListOptions{Limit: 10, Metadata: map[string]string{"slot": fmt.Sprint(tc.slot)}}
		e.count.Reset()
		page, err := st.List(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slot %d: a page of 10 scanned %d: %v", tc.slot, page.Scanned, e.count.Counts())
		if diff := cmp.Diff(matching(ids, specs, opts)[:10], taskIDs(page.Tasks)); diff != "" {
			t.Errorf("slot %d: page (-want +got):\n%s", tc.slot, diff)
		}
		if page.Scanned != 91+tc.slot || page.NextCursor != cursorAfter(ids[90+tc.slot]) {
			t.Errorf("slot %d: Scanned %d, want %d, and the cursor after task %d", tc.slot, page.Scanned, 91+tc.slot, 90+tc.slot)
		}
		if diff := cmp.Diff(map[string]int{"LIST": 1, "GET": tc.gets}, e.count.Counts()); diff != "" {
			t.Errorf("slot %d: requests of one page (-want +got):\n%s", tc.slot, diff)
		}
	}

	// Paging through all of them: a LIST a page, and each record read
	// once, but for the reads past a page's end, which the next page
	// makes again.
	opts := s3task.ListOptions{Limit: 10, Metadata: map[string]string{"slot": "9"}}
	e.count.Reset()
	var got []string
	pages := walkPages(t, e, st, opts, 20)
	for _, page := range pages {
		got = append(got, taskIDs(page.Tasks)...)
	}
	t.Logf("slot 9: all %d tasks in %d pages: %v", n, len(pages), e.count.Counts())
	if diff := cmp.Diff(matching(ids, specs, opts), got); diff != "" {
		t.Errorf("tasks paged through (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"LIST": 10, "GET": 1000}, e.count.Counts()); diff != "" {
		t.Errorf("requests of the walk (-want +got):\n%s", diff)
	}
}

// TestListFilterManyLists: a call that scans more than one LIST holds lists
// again from where the last one ended, one LIST per 1,000 entries.
func TestListFilterManyLists(t *testing.T) {
	t.Parallel()
	const n = 2001
	st, e := setup(t, &s3task.StoreOptions{ListConcurrency: 32})
	specs := make([]planted, n)
	for i := range specs {
		specs[i] = planted{status: s3task.StatusCompleted}
	}
	specs[n-1].status = s3task.StatusFailed // only the oldest passes
	ids := plantTasks(t, e, specs)

	e.count.Reset()
	page, err := st.List(e.ctx, s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed}, MaxScan: s3task.MaxListScan})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ids[n-1]}, taskIDs(page.Tasks)); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}
	if page.Scanned != n || page.ScanLimited || page.NextCursor != "" {
		t.Errorf("Scanned %d, ScanLimited %v, NextCursor %q; want %d, false, none", page.Scanned, page.ScanLimited, page.NextCursor, n)
	}
	e.wantCounts(t, map[string]int{"LIST": 3, "GET": n}) // 1,000 entries, 1,000, then 1
}

func TestListScanBound(t *testing.T) {
	t.Parallel()
	const n = 300
	st, e := setup(t, nil)
	specs := make([]planted, n)
	for i := range specs {
		tenant := "other"
		if 150 <= i && i < 160 || 290 <= i {
			tenant = "acme"
		}
		specs[i] = planted{status: s3task.StatusQueued, md: map[string]string{"tenant": tenant}}
	}
	ids := plantTasks(t, e, specs)
	opts := s3task.ListOptions{Limit: 8, MaxScan: 100, Metadata: map[string]string{"tenant": "acme"}}

	type want struct {
		tasks       []string
		scanned     int
		scanLimited bool
		cursor      string
		requests    map[string]int
	}
	steps := []struct {
		name string
		want want
	}{
		{"nothing passes in the first 100", want{nil, 100, true, cursorAfter(ids[99]), map[string]int{"LIST": 1, "GET": 100}}},
		// Tasks 150 to 155 come in the batch 148 to 155, and the page
		// fills at 157 in the batch 156 to 163.
		{"the page fills before the bound", want{ids[150:158], 58, false, cursorAfter(ids[157]), map[string]int{"LIST": 1, "GET": 64}}},
		{"two pass in the next 100", want{ids[158:160], 100, true, cursorAfter(ids[257]), map[string]int{"LIST": 1, "GET": 100}}},
		{"the page fills again", want{ids[290:298], 40, false, cursorAfter(ids[297]), map[string]int{"LIST": 1, "GET": 40}}},
		{"the listing ends", want{ids[298:], 2, false, "", map[string]int{"LIST": 1, "GET": 2}}},
	}
	for _, step := range steps {
		e.count.Reset()
		page, err := st.List(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := want{taskIDs(page.Tasks), page.Scanned, page.ScanLimited, page.NextCursor, e.count.Counts()}
		if diff := cmp.Diff(step.want, got, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		opts.Cursor = page.NextCursor
	}

	// The bound and a full page at the same entry: the page is full, not
	// short.
	page, err := st.List(e.ctx, s3task.ListOptions{Limit: 10, MaxScan: 160, Metadata: map[string]string{"tenant": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != 10 || page.ScanLimited || page.Scanned != 160 || page.NextCursor != cursorAfter(ids[159]) {
		t.Errorf("page full at the bound: %d tasks, ScanLimited %v, Scanned %d, cursor %q", len(page.Tasks), page.ScanLimited, page.Scanned, page.NextCursor)
	}
}

// TestListUnfilteredUnchanged: without a filter, List makes the requests it
// always made and issues the cursors it always issued; a filter every task
// passes gives the same page.
func TestListUnfilteredUnchanged(t *testing.T) {
	t.Parallel()
	const n = 200
	st, e := setup(t, nil)
	specs := mixed(n)
	ids := plantTasks(t, e, specs)

	e.count.Reset()
	page, err := st.List(e.ctx, s3task.ListOptions{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"LIST": 1, "GET": 50})
	if diff := cmp.Diff(ids[:50], taskIDs(page.Tasks)); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}
	if page.NextCursor != cursorAfter(ids[49]) || page.Scanned != 50 || page.ScanLimited {
		t.Errorf("NextCursor %q, Scanned %d, ScanLimited %v; want the cursor after the 50th task, 50, false", page.NextCursor, page.Scanned, page.ScanLimited)
	}

	// A filter that passes every task: the same page, and, with the page
	// larger than ListConcurrency, the same GETs (the LIST asks for more).
	e.count.Reset()
	all, err := st.List(e.ctx, s3task.ListOptions{Limit: 50, Statuses: allStatuses})
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"LIST": 1, "GET": 50})
	if diff := cmp.Diff(page, all); diff != "" {
		t.Errorf("pass-all filter against no filter (-none +pass-all):\n%s", diff)
	}

	// Cursors are positions, the same with or without a filter: one held
	// from before filters existed continues a filtered listing, and a
	// filtered page's cursor continues an unfiltered one.
	held := cursorAfter(ids[9])
	f := s3task.ListOptions{Limit: 3, Cursor: held, Types: []string{"resize"}}
	fp, err := st.List(e.ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(matching(ids[10:], specs[10:], f)[:3], taskIDs(fp.Tasks)); diff != "" {
		t.Errorf("filtered page from a held cursor (-want +got):\n%s", diff)
	}
	up, err := st.List(e.ctx, s3task.ListOptions{Limit: 2, Cursor: fp.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	next := slices.Index(ids, fp.Tasks[2].ID) + 1
	if diff := cmp.Diff(ids[next:next+2], taskIDs(up.Tasks)); diff != "" {
		t.Errorf("unfiltered page from a filtered page's cursor (-want +got):\n%s", diff)
	}

	// MaxScan below Limit bounds an unfiltered call too.
	e.count.Reset()
	short, err := st.List(e.ctx, s3task.ListOptions{Limit: 50, MaxScan: 20})
	if err != nil {
		t.Fatal(err)
	}
	e.wantCounts(t, map[string]int{"LIST": 1, "GET": 20})
	if diff := cmp.Diff(ids[:20], taskIDs(short.Tasks)); diff != "" || !short.ScanLimited || short.NextCursor != cursorAfter(ids[19]) {
		t.Errorf("MaxScan 20: ScanLimited %v, cursor %q, tasks (-want +got):\n%s", short.ScanLimited, short.NextCursor, diff)
	}
}

// TestListFilterBroken: an unreadable record cannot pass a filter. A
// filtered page reports each one it scanned in Broken, without giving it a
// place; an unfiltered page gives it one, as it always did.
func TestListFilterBroken(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	specs := make([]planted, 12)
	for i := range specs {
		specs[i] = planted{status: s3task.StatusFailed}
	}
	specs[2].broken, specs[5].broken = true, true
	ids := plantTasks(t, e, specs)

	brokenKeys := func(p *s3task.Page) []string {
		var keys []string
		for _, re := range p.Broken {
			if !errors.Is(re, s3task.ErrCorruptRecord) {
				t.Errorf("broken %s: %v, want ErrCorruptRecord", re.Key, re.Err)
			}
			keys = append(keys, re.Key)
		}
		return keys
	}

	opts := s3task.ListOptions{Limit: 3, Statuses: []s3task.Status{s3task.StatusFailed}}
	page, err := st.List(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ids[0], ids[1], ids[3]}, taskIDs(page.Tasks)); diff != "" {
		t.Errorf("filtered page (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{e.recordKey(ids[2])}, brokenKeys(page)); diff != "" {
		t.Errorf("filtered page's broken records (-want +got):\n%s", diff)
	}
	opts.Cursor = page.NextCursor
	page, err = st.List(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ids[4], ids[6], ids[7]}, taskIDs(page.Tasks)); diff != "" {
		t.Errorf("second filtered page (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{e.recordKey(ids[5])}, brokenKeys(page)); diff != "" {
		t.Errorf("second filtered page's broken records (-want +got):\n%s", diff)
	}

	page, err = st.List(e.ctx, s3task.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids[:2], taskIDs(page.Tasks)); diff != "" || page.NextCursor != cursorAfter(ids[2]) {
		t.Errorf("unfiltered page: cursor %q, tasks (-want +got):\n%s", page.NextCursor, diff)
	}
	if diff := cmp.Diff([]string{e.recordKey(ids[2])}, brokenKeys(page)); diff != "" {
		t.Errorf("unfiltered page's broken records (-want +got):\n%s", diff)
	}
}

// TestListFilterOrder: records read concurrently, answered in any order,
// still come newest first; and a page that fills inside a batch of reads
// continues right after its last task, not after the last record read.
func TestListFilterOrder(t *testing.T) {
	t.Parallel()
	const n = 90
	e := newEnv(t, nil)
	specs := make([]planted, n)
	for i := range specs {
		specs[i] = planted{status: s3task.StatusCompleted}
		if i%3 == 0 {
			specs[i].status = s3task.StatusFailed
		}
	}
	ids := plantTasks(t, e, specs)
	var count s3test.Counter
	jitter := func(next http.RoundTripper) http.RoundTripper {
		return s3tasktest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/status.json") {
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			}
			return next.RoundTrip(r)
		})
	}
	st := e.newStore(t, &s3task.StoreOptions{ListConcurrency: 8}, count.Wrap, jitter)
	opts := s3task.ListOptions{Limit: 2, Statuses: []s3task.Status{s3task.StatusFailed}}

	// Tasks 0 and 3 pass; the batch that read them read 8 records, 0 to 7.
	page, err := st.List(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ids[0], ids[3]}, taskIDs(page.Tasks)); diff != "" {
		t.Errorf("first page (-want +got):\n%s", diff)
	}
	if page.NextCursor != cursorAfter(ids[3]) || page.Scanned != 4 || count.Counts()["GET"] != 8 {
		t.Errorf("first page: cursor %q, Scanned %d, %d GETs; want the cursor after task 3, 4, 8", page.NextCursor, page.Scanned, count.Counts()["GET"])
	}
	opts.Cursor = page.NextCursor
	page, err = st.List(e.ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ids[6], ids[9]}, taskIDs(page.Tasks)); diff != "" || page.Scanned != 6 {
		t.Errorf("second page: Scanned %d (want 6), tasks (-want +got):\n%s", page.Scanned, diff)
	}

	opts = s3task.ListOptions{Limit: 7, Statuses: []s3task.Status{s3task.StatusFailed}}
	var got []string
	for _, page := range walkPages(t, e, st, opts, n) {
		got = append(got, taskIDs(page.Tasks)...)
	}
	if diff := cmp.Diff(matching(ids, specs, opts), got); diff != "" {
		t.Errorf("tasks paged through with reads answered out of order (-want +got):\n%s", diff)
	}
}

// TestListFilterStrays: objects that are not task folders, among them and
// after them, neither hide a task nor show as one under a filter.
func TestListFilterStrays(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	specs := mixed(40)
	ids := plantTasks(t, e, specs)
	for _, i := range []int{3, 4, 17} {
		e.put(t, e.store.Prefix()+ids[i]+".bak", []byte("stray"))
	}
	e.put(t, e.markerKey(ids[5]), nil)
	e.put(t, e.store.Prefix()+"notes.txt", []byte("stray"))

	opts := s3task.ListOptions{Limit: 2, MaxScan: 5, Types: []string{"import"}}
	var got []string
	for _, page := range walkPages(t, e, st, opts, 40) {
		got = append(got, taskIDs(page.Tasks)...)
	}
	if diff := cmp.Diff(matching(ids, specs, opts), got); diff != "" {
		t.Errorf("tasks paged through (-want +got):\n%s", diff)
	}
}

func TestListFilterArguments(t *testing.T) {
	t.Parallel()
	st, e := setup(t, nil)
	many := map[string]string{}
	for i := range s3task.MaxMetadataEntries + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	large := map[string]string{}
	for i := range 9 {
		large[fmt.Sprint("k", i)] = strings.Repeat("v", s3task.MaxMetadataValueLen)
	}
	bad := []struct {
		name string
		opts s3task.ListOptions
	}{
		{"negative MaxScan", s3task.ListOptions{MaxScan: -1}},
		{"MaxScan over the maximum", s3task.ListOptions{MaxScan: s3task.MaxListScan + 1}},
		{"a status that is not one", s3task.ListOptions{Statuses: []s3task.Status{s3task.StatusFailed, "paused"}}},
		{"an empty status", s3task.ListOptions{Statuses: []s3task.Status{""}}},
		{"a status in capitals", s3task.ListOptions{Statuses: []s3task.Status{"FAILED"}}},
		{"a type over 128 bytes", s3task.ListOptions{Types: []string{strings.Repeat("t", 129)}}},
		{"a type not UTF-8", s3task.ListOptions{Types: []string{"\xff"}}},
		{"an empty metadata key", s3task.ListOptions{Metadata: map[string]string{"": "x"}}},
		{"a metadata key with a space", s3task.ListOptions{Metadata: map[string]string{"tenant id": "x"}}},
		{"a metadata key over 64 bytes", s3task.ListOptions{Metadata: map[string]string{strings.Repeat("k", s3task.MaxMetadataKeyLen+1): "x"}}},
		{"a metadata value over 1 KiB", s3task.ListOptions{Metadata: map[string]string{"k": strings.Repeat("v", s3task.MaxMetadataValueLen+1)}}},
		{"a metadata value not UTF-8", s3task.ListOptions{Metadata: map[string]string{"k": "\xff"}}},
		{"more metadata entries than a task holds", s3task.ListOptions{Metadata: many}},
		{"more metadata bytes than a task holds", s3task.ListOptions{Metadata: large}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e.count.Reset()
			page, err := st.List(e.ctx, tc.opts)
			if !errors.Is(err, s3task.ErrInvalidArgument) || page != nil {
				t.Errorf("List = %v, %v; want ErrInvalidArgument", page, err)
			}
			e.wantCounts(t, map[string]int{})
		})
	}

	good := []struct {
		name string
		opts s3task.ListOptions
	}{
		{"MaxScan at the maximum", s3task.ListOptions{MaxScan: s3task.MaxListScan}},
		{"MaxScan 1", s3task.ListOptions{MaxScan: 1, Statuses: []s3task.Status{s3task.StatusQueued}}},
		{"empty filters", s3task.ListOptions{Statuses: []s3task.Status{}, Types: []string{}, Metadata: map[string]string{}}},
		{"the untyped type", s3task.ListOptions{Types: []string{""}}},
		{"a metadata key of 64 bytes and an empty value", s3task.ListOptions{Metadata: map[string]string{strings.Repeat("k", s3task.MaxMetadataKeyLen): ""}}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := st.List(e.ctx, tc.opts); err != nil {
				t.Error(err)
			}
		})
	}
}
