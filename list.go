package s3task

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"
)

// ListOptions selects a page of tasks.
type ListOptions struct {
	// Limit is the most tasks a page holds, 1 to [MaxListLimit]; zero means
	// [DefaultListLimit].
	Limit int
	// Cursor continues a listing from Page.NextCursor; empty starts at the
	// newest task.
	Cursor string
}

// Page is one page of tasks, newest first.
type Page struct {
	// Tasks holds the readable records in the page, newest first.
	Tasks []*Task
	// Broken holds the task folders in the page whose record could not be
	// used (corrupt, a newer schema, or missing), each with its key. They
	// take a place in the page but never hide the others.
	Broken []*RecordError
	// NextCursor continues the listing; it is empty on the last page.
	NextCursor string
}

// List returns a page of tasks, newest first. A page costs one LIST plus one
// GET per task in it, read concurrently (StoreOptions.ListConcurrency at a
// time); its cost depends on the page size, never on how many tasks the bucket
// holds. The cursor is opaque: pass back Page.NextCursor as it is.
//
// Errors: [ErrInvalidArgument] for a bad limit; [ErrInvalidCursor]; S3
// errors for the LIST (a failed record read lands in Page.Broken instead).
func (s *Store) List(ctx context.Context, opts ListOptions) (*Page, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, invalidArg("list limit %d, want 1 to %d", limit, MaxListLimit)
	}
	after := ""
	if opts.Cursor != "" {
		var err error
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return nil, err
		}
	}
	ids, next, err := s.listFolders(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	page := &Page{}
	if next != "" {
		page.NextCursor = encodeCursor(next)
	}
	page.Tasks, page.Broken = s.readMany(ctx, ids)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return page, nil
}

// listFolders makes one LIST of the task folders, newest first, starting
// after position after (relative to the prefix; "" for the newest). It
// returns the task IDs in it and the position to continue from, "" at the
// end.
func (s *Store) listFolders(ctx context.Context, after string, limit int) (ids []string, next string, err error) {
	in := &s3.ListObjectsV2Input{
		Bucket:    &s.bucket,
		Prefix:    &s.opts.Prefix,
		Delimiter: aws.String("/"),
		MaxKeys:   aws.Int32(int32(limit)),
	}
	if after != "" {
		in.StartAfter = aws.String(s.opts.Prefix + after)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("s3task: list %s: %w", s.opts.Prefix, err)
	}
	s.observe(out.ResultMetadata)

	// The next page starts after the greatest entry of this one, folder or
	// stray object. Every key inside folder name/ sorts below name+"0" ('0'
	// follows '/') and no other key sorts between them, so for a folder
	// that is the position to continue from.
	last := ""
	for _, cp := range out.CommonPrefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), s.opts.Prefix), "/")
		last = max(last, name+"0")
		if ParseID(name) == nil {
			ids = append(ids, name)
		}
	}
	for _, obj := range out.Contents {
		last = max(last, strings.TrimPrefix(aws.ToString(obj.Key), s.opts.Prefix))
	}
	// Task IDs start with '0' to '7'; the marker folder, the wake object and
	// anything else after them cannot hide a task, so a page that reached
	// them is the last.
	if aws.ToBool(out.IsTruncated) && last != "" && last[0] <= '7' {
		next = last
	}
	return ids, next, nil
}

// readMany reads the records of ids, StoreOptions.ListConcurrency at a
// time, and returns the readable ones and the others, each in the order of
// ids.
func (s *Store) readMany(ctx context.Context, ids []string) ([]*Task, []*RecordError) {
	tasks := make([]*Task, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, s.opts.ListConcurrency)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			tasks[i], _, errs[i] = s.read(ctx, id)
		}()
	}
	wg.Wait()
	var good []*Task
	var broken []*RecordError
	for i, t := range tasks {
		if t != nil {
			good = append(good, t)
			continue
		}
		var re *RecordError
		if !errors.As(errs[i], &re) {
			re = &RecordError{Key: s.recordKey(ids[i]), Err: errs[i]}
		}
		broken = append(broken, re)
	}
	return good, broken
}

// walk calls fn with every task record, newest first, a page at a time,
// until fn returns false or the tasks end. It skips tasks created after
// newest (zero: none) by starting the listing past them, stops at the first
// task created before oldest (zero: no limit), and reads at most limit
// records (zero: no limit), reporting whether more tasks were left unread.
// Records that cannot be read go to broken.
func (s *Store) walk(ctx context.Context, newest, oldest time.Time, limit int, fn func(t *Task) bool, broken func(*RecordError)) (more bool, err error) {
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
		tasks, bad := s.readMany(ctx, ids)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		for _, re := range bad {
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
