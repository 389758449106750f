package conformance

import (
	"fmt"
	"testing"

	"github.com/s3task/s3task"
)

// testPaging lists a few hundred tasks, with markers and stray objects
// around them, in pages: every task exactly once, newest first, no page
// over its limit, and the last page says so.
func testPaging(t *testing.T, b Backend) {
	h := open(t, b, nil)
	const n, limit = 300, 50
	// One store, one after the other: its IDs and time stamps follow the
	// order of the calls, so newest-first can be checked against it.
	created := make([]string, 0, n)
	for i := range n {
		task, err := h.store.Create(h.ctx, s3task.CreateParams{Name: fmt.Sprintf("task %d", i)})
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
		created = append(created, task.ID)
	}
	// Markers and stray objects share the prefix; they must not show.
	for _, id := range created[:3] {
		h.put(h.inputKey(id), []byte("x\n"))
		if _, err := h.store.Submit(h.ctx, id); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	h.put(h.store.Prefix()+"notes.txt", []byte("not a task"))
	h.put(h.store.Prefix()+"misc/readme", []byte("not a task either"))

	var listed []*s3task.Task
	cursor, pages := "", 0
	for {
		page, err := h.store.List(h.ctx, s3task.ListOptions{Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("List page %d: %v", pages, err)
		}
		pages++
		if len(page.Tasks) > limit || len(page.Broken) != 0 {
			t.Errorf("page %d: %d tasks, %d broken; want at most %d, none broken", pages, len(page.Tasks), len(page.Broken), limit)
		}
		listed = append(listed, page.Tasks...)
		if page.NextCursor == "" {
			break
		}
		if pages > n/limit+3 {
			t.Fatalf("still paging after %d pages", pages)
		}
		cursor = page.NextCursor
	}
	if len(listed) != n {
		t.Fatalf("listed %d tasks in %d pages, want %d", len(listed), pages, n)
	}
	for i, task := range listed {
		// The newest task comes first: the reverse of creation.
		if want := created[n-1-i]; task.ID != want {
			t.Fatalf("position %d: task %s (%q), want %s", i, task.ID, task.Name, want)
		}
		if i > 0 && task.CreatedAt.After(listed[i-1].CreatedAt) {
			t.Errorf("position %d: created %v, after the one before it (%v)", i, task.CreatedAt, listed[i-1].CreatedAt)
		}
	}
	t.Logf("%d tasks in %d pages of %d", n, pages, limit)

	// A page as large as the bucket holds them all.
	page, err := h.store.List(h.ctx, s3task.ListOptions{Limit: s3task.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tasks) != n || page.NextCursor != "" {
		t.Errorf("one large page: %d tasks, cursor %q; want all %d and no cursor", len(page.Tasks), page.NextCursor, n)
	}
}
