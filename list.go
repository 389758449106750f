package s3task

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"
)

// Bounds of the scan of one [Store.List] call ([ListOptions.MaxScan]).
const (
	DefaultListScan = 1000  // the scan bound when MaxScan is zero
	MaxListScan     = 10000 // the largest MaxScan
)

// listBatch is the most keys one LIST returns (S3's own cap).
const listBatch = 1000

// ListOptions selects a page of tasks. The filters (Statuses, States,
// Types, Metadata) combine: a task is in the page only if it passes every
// filter that is set. An unset filter passes every task.
type ListOptions struct {
	// Limit is the most tasks a page holds, 1 to [MaxListLimit]; zero means
	// [DefaultListLimit].
	Limit int
	// Cursor continues a listing from Page.NextCursor; empty starts at the
	// newest task. A cursor is a position in the listing, the same with or
	// without filters; pass the same filters with it to continue the same
	// listing.
	Cursor string

	// Statuses, if not empty, keeps the tasks in any of these statuses.
	// Each must be one of the Status constants.
	Statuses []Status
	// States, if not empty, keeps the tasks in any of these states, each
	// one of the State constants: [StateDead] for the tasks failed for
	// good, [StateRetrying] for those failed and waiting for their retry,
	// [StateScheduled] for those queued with a start still to come,
	// [StateReady] for those queued and due. A task's state is judged as
	// its record is read, by the Store's estimate of the server's clock
	// ([Task.State] at [Store.Now]), so a scheduled task is ready from its
	// RunAt on, as workers see it. A value that is not a state is refused
	// with a *[StateError]. States and Statuses combine as any two filters
	// do; States alone is enough, for each state belongs to one status.
	States []State
	// Types, if not empty, keeps the tasks of any of these types ("" is
	// the type of a task created without one). Each is at most 128 bytes
	// of UTF-8, as [CreateParams.Type].
	Types []string
	// Metadata, if not empty, keeps the tasks whose [Task.Metadata] holds
	// every one of these entries with exactly this value (an empty value
	// matches an entry present with an empty value, not a missing one).
	// Keys and values follow the rules of [CreateParams.Metadata], so that
	// every filter could match some task.
	Metadata map[string]string

	// MaxScan is the most entries of the listing one call scans: task
	// folders, whose records it reads (one GET each), and any other object
	// directly under the prefix among them (the library writes none
	// there). A call that reaches it before its page is full returns the
	// page short, with Page.ScanLimited set and a NextCursor right after
	// the last entry scanned. Zero means [DefaultListScan]; at most
	// [MaxListScan]. Without a filter every folder takes a place in the
	// page, so a call scans at most Limit entries, and MaxScan matters only
	// if it is smaller.
	MaxScan int
}

// Page is one page of tasks, newest first.
type Page struct {
	// Tasks holds the readable records in the page that pass the filters,
	// newest first.
	Tasks []*Task
	// Broken holds the task folders scanned whose record could not be used
	// (corrupt, a newer schema, missing, or a failed read), each with its
	// key, in listing order. They never hide the others. Without a filter
	// they take a place in the page. A filter cannot tell whether one
	// would pass, so a filtered page reports every one it scanned, whatever
	// the filter, without counting it against Limit: a host that shows a
	// filtered page to someone who may see only what passes (one tenant's
	// tasks) should not show them Broken.
	Broken []*RecordError
	// NextCursor continues the listing; it is empty on the last page.
	NextCursor string
	// Scanned is how many entries of the listing the call went through:
	// the task folders it read, passing the filters or not, and any other
	// object among them. Folders read ahead past the last task of a full
	// page are not counted; the next page reads them again.
	Scanned int
	// ScanLimited reports that the call stopped at its scan bound
	// (ListOptions.MaxScan; without a filter, Limit if smaller) before the
	// page held Limit tasks, with more of the listing left: the page is
	// short, and NextCursor continues right after the last entry scanned,
	// so the next call goes on from there.
	ScanLimited bool
}

// List returns a page of tasks, newest first, that pass the filters of
// opts. It lists the task folders from the cursor on and reads their
// records, StoreOptions.ListConcurrency at a time, putting them back in
// listing order, until the page holds Limit tasks, the listing ends, or it
// has scanned its bound (see ListOptions.MaxScan). NextCursor then continues
// right after the last entry scanned, which is the page's last task when the
// page is full, so that paging on with the same options shows every task
// that passes exactly once. The cursor is opaque: pass back
// Page.NextCursor as it is.
//
// Cost. Without a filter: one LIST plus one GET per task in the page; the
// cost depends on the page size, never on how many tasks the bucket
// holds. With a filter: one LIST per 1,000 entries scanned (or part of
// 1,000) plus one GET per task folder scanned, so the cost grows with the
// tasks passed over, up to MaxScan GETs and MaxScan/1,000 LISTs (rounded
// up) a call. Records are read in batches of the larger of ListConcurrency
// and the places left in the page; when the page fills inside a batch, the
// reads after its last task (at most ListConcurrency-1) are spent, and the
// next page makes them again. For example, on 1,000 tasks of which every
// tenth passes, a page of 10 scans 91 to 100 folders and costs one LIST and
// 91 to 100 GETs (at the default ListConcurrency of 8); paging through all
// of them costs 10 or 11 LISTs and 1,000 to 1,007 GETs.
//
// Errors: [ErrInvalidArgument] for a bad limit, scan bound or filter (a
// status that is not one; a state that is not one, as a *[StateError]; a
// type or metadata entry no task could have);
// [ErrInvalidCursor]; S3 errors for the LIST (a failed record read lands
// in Page.Broken instead); the context's error if it ends.
func (s *Store) List(ctx context.Context, opts ListOptions) (*Page, error) {
	c := &Call{Op: OpList, List: &opts}
	_, err := s.call(ctx, c)
	return result[*Page](c, err)
}

// list is List's work, once the middleware has passed the call on. Beside
// the page it returns the records of its tasks, in the same order.
func (s *Store) list(ctx context.Context, opts ListOptions) (*Page, []*record, error) {
	q, err := newListQuery(opts)
	if err != nil {
		return nil, nil, err
	}
	after := ""
	if opts.Cursor != "" {
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return nil, nil, err
		}
	}
	page := &Page{}
	var recs []*record
	taken := 0   // places taken in the page
	more := true // whether the listing may go on after position after
	for more && taken < q.limit && page.Scanned < q.scan {
		entries, listMore, err := s.listEntries(ctx, after, min(listBatch, q.scan-page.Scanned))
		if err != nil {
			return nil, nil, err
		}
		// Read a batch of records at a time, then take its entries in
		// listing order until the page is full. A batch is never larger
		// than the places left unless ListConcurrency is, so a full page
		// reads at most ListConcurrency-1 records past its last task.
		for len(entries) > 0 && taken < q.limit && page.Scanned < q.scan {
			n := min(len(entries), q.scan-page.Scanned, max(q.limit-taken, s.opts.ListConcurrency))
			batch := entries[:n]
			tasks, bad := s.readRecords(ctx, batch)
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			now := s.serverNow() // the states are judged as the records are read
			for i, e := range batch {
				if taken == q.limit {
					break
				}
				entries = entries[1:]
				page.Scanned++
				after = max(after, e.pos) // positions only grow; an object named as the prefix itself is at ""
				switch {
				case tasks[i] != nil:
					if q.match(tasks[i], now) {
						page.Tasks = append(page.Tasks, &tasks[i].Task)
						recs = append(recs, tasks[i])
						taken++
					}
				case bad[i] != nil:
					page.Broken = append(page.Broken, bad[i])
					if q.all {
						taken++
					}
				}
			}
		}
		more = listMore || slices.ContainsFunc(entries, func(e listEntry) bool { return e.id != "" })
	}
	if more && after != "" {
		page.NextCursor = encodeCursor(after)
		page.ScanLimited = taken < q.limit
	}
	return page, recs, nil
}

// listQuery is a List call's options, checked and ready to use.
type listQuery struct {
	limit    int               // places in the page
	scan     int               // entries the call may scan
	all      bool              // no filter: every folder takes a place
	statuses map[Status]bool   // nil: any status
	states   map[State]bool    // nil: any state
	types    map[string]bool   // nil: any type
	metadata map[string]string // nil: any metadata
}

// newListQuery checks opts and returns the query they ask for.
func newListQuery(opts ListOptions) (*listQuery, error) {
	q := &listQuery{limit: opts.Limit, scan: opts.MaxScan}
	switch {
	case q.limit == 0:
		q.limit = DefaultListLimit
	case q.limit < 0 || q.limit > MaxListLimit:
		return nil, invalidArg("list limit %d, want 1 to %d", q.limit, MaxListLimit)
	}
	switch {
	case q.scan == 0:
		q.scan = DefaultListScan
	case q.scan < 0 || q.scan > MaxListScan:
		return nil, invalidArg("ListOptions.MaxScan %d, want 1 to %d", q.scan, MaxListScan)
	}
	for _, st := range opts.Statuses {
		if !st.Valid() {
			return nil, invalidArg("ListOptions.Statuses holds %q, which is not a status", truncate(string(st), 40))
		}
		if q.statuses == nil {
			q.statuses = map[Status]bool{}
		}
		q.statuses[st] = true
	}
	for _, st := range opts.States {
		if !st.Valid() {
			return nil, &StateError{Value: string(st)}
		}
		if q.states == nil {
			q.states = map[State]bool{}
		}
		q.states[st] = true
	}
	for _, typ := range opts.Types {
		if len(typ) > 128 || !utf8.ValidString(typ) {
			return nil, invalidArg("ListOptions.Types holds a type of %d bytes, want at most 128 bytes of UTF-8", len(typ))
		}
		if q.types == nil {
			q.types = map[string]bool{}
		}
		q.types[typ] = true
	}
	if len(opts.Metadata) > MaxMetadataEntries {
		return nil, invalidArg("ListOptions.Metadata has %d entries, but a task has at most %d", len(opts.Metadata), MaxMetadataEntries)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(opts.Metadata)) {
		v := opts.Metadata[k]
		if !validMetadataKey(k) {
			return nil, invalidArg("ListOptions.Metadata key %q must be 1 to %d ASCII letters, digits, '.', '-' or '_'", truncate(k, 40), MaxMetadataKeyLen)
		}
		if len(v) > MaxMetadataValueLen || !utf8.ValidString(v) {
			return nil, invalidArg("ListOptions.Metadata[%q] must be at most %d bytes of UTF-8", k, MaxMetadataValueLen)
		}
		size += len(k) + len(v)
	}
	if size > MaxMetadataSize {
		return nil, invalidArg("ListOptions.Metadata holds %d bytes, but a task's holds at most %d", size, MaxMetadataSize)
	}
	if len(opts.Metadata) > 0 {
		q.metadata = opts.Metadata
	}
	q.all = q.statuses == nil && q.states == nil && q.types == nil && q.metadata == nil
	if q.all {
		q.scan = min(q.scan, q.limit)
	}
	return q, nil
}

// match reports whether t passes the query's filters at now, the
// server's time its state is judged by.
func (q *listQuery) match(t *record, now time.Time) bool {
	if q.statuses != nil && !q.statuses[t.Status] {
		return false
	}
	if q.states != nil && !q.states[t.State(now)] {
		return false
	}
	if q.types != nil && !q.types[t.Type] {
		return false
	}
	for k, want := range q.metadata {
		if v, ok := t.Metadata[k]; !ok || v != want {
			return false
		}
	}
	return true
}

// listEntry is an entry of the listing of the task folders.
type listEntry struct {
	pos string // the listing position right after it, relative to the prefix
	id  string // the task ID of a task folder; "" for any other entry
}

// listEntries makes one LIST of at most size entries under the prefix,
// starting after position after (relative to the prefix; "" for the
// newest). It returns, in listing order, the entries among the task
// folders (task folders and other objects between them), and whether the
// listing may go on after the last of them.
func (s *Store) listEntries(ctx context.Context, after string, size int) (entries []listEntry, more bool, err error) {
	in := &s3.ListObjectsV2Input{
		Bucket:    &s.bucket,
		Prefix:    &s.opts.Prefix,
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(int32(size)),
	}
	if after != "" {
		in.StartAfter = aws.String(s.opts.Prefix + after)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, false, fmt.Errorf("s3task: list %s: %w", s.opts.Prefix, err)
	}
	s.observe(out.ResultMetadata)

	// S3 returns folders and objects apart; merged by key they are in
	// listing order. The position after a folder name/ is name+"0": every
	// key inside it sorts below ('0' follows '/') and no other key sorts
	// between them. The position after an object is its key.
	keys := make([]string, 0, len(out.CommonPrefixes)+len(out.Contents))
	for _, cp := range out.CommonPrefixes {
		keys = append(keys, strings.TrimPrefix(aws.ToString(cp.Prefix), s.opts.Prefix))
	}
	for _, obj := range out.Contents {
		keys = append(keys, strings.TrimPrefix(aws.ToString(obj.Key), s.opts.Prefix))
	}
	slices.Sort(keys)
	more = aws.ToBool(out.IsTruncated) && len(keys) > 0
	for _, k := range keys {
		// Task IDs start with '0' to '7'; the marker folder, the wake
		// object and anything else after them cannot hide a task, so a
		// listing that reached them has ended.
		if k == "" || k[0] > '7' {
			more = false
			break
		}
		e := listEntry{pos: k}
		if name, ok := strings.CutSuffix(k, "/"); ok {
			e.pos = name + "0"
			if ParseID(name) == nil {
				e.id = name
			}
		}
		entries = append(entries, e)
	}
	return entries, more, nil
}

// listFolders makes one LIST of the task folders, newest first, starting
// after position after (relative to the prefix; "" for the newest). It
// returns the task IDs in it and the position to continue from, "" at the
// end.
func (s *Store) listFolders(ctx context.Context, after string, limit int) (ids []string, next string, err error) {
	entries, more, err := s.listEntries(ctx, after, limit)
	if err != nil {
		return nil, "", err
	}
	for _, e := range entries {
		if e.id != "" {
			ids = append(ids, e.id)
		}
	}
	if more {
		next = entries[len(entries)-1].pos
	}
	return ids, next, nil
}

// readRecords reads the records of the task folders among entries,
// StoreOptions.ListConcurrency at a time. For each entry it returns either
// the task or why its record cannot be used, at the entry's index, or
// neither for an entry that is not a task folder.
func (s *Store) readRecords(ctx context.Context, entries []listEntry) ([]*record, []*RecordError) {
	tasks := make([]*record, len(entries))
	bad := make([]*RecordError, len(entries))
	sem := make(chan struct{}, s.opts.ListConcurrency)
	var wg sync.WaitGroup
	for i, e := range entries {
		if e.id == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			t, _, err := s.read(ctx, e.id)
			if err != nil {
				var re *RecordError
				if !errors.As(err, &re) {
					re = &RecordError{Key: s.recordKey(e.id), Err: err}
				}
				bad[i] = re
				return
			}
			tasks[i] = t
		}()
	}
	wg.Wait()
	return tasks, bad
}

// readMany reads the records of ids, StoreOptions.ListConcurrency at a
// time, and returns the readable ones and the others, each in the order of
// ids.
func (s *Store) readMany(ctx context.Context, ids []string) ([]*record, []*RecordError) {
	entries := make([]listEntry, len(ids))
	for i, id := range ids {
		entries[i] = listEntry{id: id}
	}
	tasks, bad := s.readRecords(ctx, entries)
	var good []*record
	var broken []*RecordError
	for i := range entries {
		if tasks[i] != nil {
			good = append(good, tasks[i])
		} else {
			broken = append(broken, bad[i])
		}
	}
	return good, broken
}

// walk calls fn with every task record, newest first, a page at a time,
// until fn returns false or the tasks end. It skips tasks created after
// newest (zero: none) by starting the listing past them, stops at the first
// task created before oldest (zero: no limit), and reads at most limit
// records (zero: no limit), reporting whether more tasks were left unread.
// Records that cannot be read go to broken. With a worker's memory of the
// tasks found deleted (gone, nil for none), it passes over their folders
// (a form posted after a Purge leaves one without a record) without a
// read, and adds those whose record it finds missing.
func (s *Store) walk(ctx context.Context, newest, oldest time.Time, limit int, gone *goneTasks, fn func(t *record) bool, broken func(*RecordError)) (more bool, err error) {
	after := ""
	if !newest.IsZero() {
		after = idBound(newest)
	}
	seen := 0
	for {
		size := 1000
		if limit > 0 {
			size = min(size, limit-seen+1) // one more tells whether any are left
		}
		ids, next, err := s.listFolders(ctx, after, size)
		if err != nil {
			return false, err
		}
		if !oldest.IsZero() {
			for i, id := range ids {
				if at, _ := IDTime(id); at.Before(oldest) {
					ids, next = ids[:i], ""
					break
				}
			}
		}
		if limit > 0 && seen+len(ids) > limit {
			ids, next, more = ids[:limit-seen], "", true
		}
		seen += len(ids)
		ids = slices.DeleteFunc(ids, gone.has)
		tasks, bad := s.readMany(ctx, ids)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		for _, re := range bad {
			if id, ok := s.recordID(re.Key); ok && errors.Is(re, ErrNotFound) {
				gone.note(id)
			}
			broken(re)
		}
		for _, t := range tasks {
			if !fn(t) {
				return true, nil
			}
		}
		if next == "" {
			return more, nil
		}
		after = next
	}
}

// idBound returns a listing position after every ID of tasks created after
// t, and before every ID of tasks created at or before t: the inverted time
// of the next millisecond with the largest random part.
func idBound(t time.Time) string {
	var id ulid.ULID
	ms := min(uint64(max(t.UnixMilli()+1, 0)), ulid.MaxTime())
	_ = id.SetTime(ulid.MaxTime() - ms)
	for i := 6; i < 16; i++ {
		id[i] = 0xff
	}
	return id.String()
}

func encodeCursor(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	name := string(b)
	if err != nil || name == "" || len(name) > 1024 || strings.Contains(name, "/") || !utf8.ValidString(name) {
		return "", fmt.Errorf("%w: %q", ErrInvalidCursor, c)
	}
	return name, nil
}
