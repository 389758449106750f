package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
)

// rawLimit is how much of an unreadable record show prints.
const rawLimit = 4096

// Problems with a record, in unreadableDoc.Problem.
const (
	problemCorrupt     = "corrupt"      // not JSON, or not a consistent record
	problemNewerSchema = "newer_schema" // a schema_version this build does not know
	problemMissing     = "missing"      // the folder has objects but no status.json
)

// unreadableDoc is what show prints for a task whose record cannot be
// read. Its error member is the one every failed command prints with
// -json, so a script that looks for .error finds it here too.
type unreadableDoc struct {
	Error   errorBody `json:"error"`
	Key     string    `json:"key"`     // the record's key
	Problem string    `json:"problem"` // corrupt, newer_schema or missing
	// SchemaVersion is the record's schema_version when it is newer than
	// this build knows (problem newer_schema); else 0, left out.
	SchemaVersion int `json:"schema_version,omitempty"`
	// Size is the record's size in bytes; 0 when it is missing.
	Size int64 `json:"size"`
	// Raw is the start of the record, at most rawLimit bytes, escaped:
	// see escapeRaw. RawTruncated says the record is longer.
	Raw          string      `json:"raw"`
	RawTruncated bool        `json:"raw_truncated"`
	Objects      []objectDoc `json:"objects"`

	raw []byte // what Raw escapes, for the table
}

// errorBody is the error member of the -json documents.
type errorBody struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
}

// folderObjects lists the objects in a task's folder dir, each with its
// kind, and the output key of each attempt that wrote one.
func (c *cli) folderObjects(ctx context.Context, store *s3task.Store, dir string) ([]objectDoc, map[int]string, error) {
	objects := []objectDoc{}
	outputs := map[int]string{}
	p := s3.NewListObjectsV2Paginator(c.client, &s3.ListObjectsV2Input{Bucket: aws.String(store.Bucket()), Prefix: aws.String(dir)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, o := range out.Contents {
			key := aws.ToString(o.Key)
			od := objectDoc{Key: key, Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified).UTC(), Kind: "other"}
			name := strings.TrimPrefix(key, dir)
			switch {
			case name == "status.json":
				od.Kind = "record"
			case strings.HasPrefix(name, "input"):
				od.Kind = "input"
			case strings.HasPrefix(name, "output-attempt-"):
				digits := strings.TrimPrefix(name, "output-attempt-")
				end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
				if end < 0 {
					end = len(digits)
				}
				if n, err := strconv.Atoi(digits[:end]); err == nil && n > 0 {
					od.Kind, od.Attempt = "output", n
					outputs[n] = key
				}
			}
			objects = append(objects, od)
		}
	}
	return objects, outputs, nil
}

// showUnreadable prints what can be shown of task id, whose record Get
// could not read (getErr: a RecordError, or ErrNotFound), and returns the
// error the command ends with. retry reports that the record appeared
// between the GET and the LIST (a task being created): show it again.
func (c *cli) showUnreadable(ctx context.Context, store *s3task.Store, id string, getErr error) (retry bool, err error) {
	dir := store.Prefix() + id + "/"
	objects, _, err := c.folderObjects(ctx, store, dir)
	if err != nil {
		return false, err
	}
	doc := unreadableDoc{Key: dir + "status.json", Objects: objects}
	var record *objectDoc
	for i := range objects {
		if objects[i].Kind == "record" {
			record = &objects[i]
		}
	}
	if errors.Is(getErr, s3task.ErrNotFound) {
		switch {
		case record != nil:
			return true, nil
		case len(objects) == 0:
			return false, getErr // no such task: nothing at all under its folder
		}
		doc.Problem = problemMissing
		getErr = fmt.Errorf("task %s has objects but no record (%s)", id, doc.Key)
		doc.Error = errorBody{Code: "missing_record", Message: getErr.Error(), ExitCode: exitFailed}
	} else {
		doc.Problem = problemCorrupt
		if errors.Is(getErr, s3task.ErrUnsupportedSchema) {
			doc.Problem = problemNewerSchema
		}
		code, name := classify(getErr)
		doc.Error = errorBody{Code: name, Message: getErr.Error(), ExitCode: code}
		data, size, err := c.readRaw(ctx, store.Bucket(), doc.Key)
		switch {
		case err != nil && isNotFound(err):
			// Deleted since the GET: say so rather than show nothing.
			doc.Problem = problemMissing
			getErr = fmt.Errorf("task %s: its record %s was deleted while show ran", id, doc.Key)
			doc.Error = errorBody{Code: "missing_record", Message: getErr.Error(), ExitCode: exitFailed}
		case err != nil:
			return false, fmt.Errorf("read %s: %w", doc.Key, err)
		default:
			doc.Size = size
			doc.RawTruncated = len(data) > rawLimit
			doc.raw = data[:min(len(data), rawLimit)]
			doc.Raw = escapeRaw(doc.raw)
			if doc.Problem == problemNewerSchema {
				var head struct {
					SchemaVersion int `json:"schema_version"`
				}
				if json.Unmarshal(data, &head) == nil {
					doc.SchemaVersion = head.SchemaVersion
				}
			}
		}
	}
	ce := &cmdError{exit: doc.Error.ExitCode, code: doc.Error.Code, err: getErr, documented: true}
	if c.set.json {
		c.writeJSON(doc)
		return false, ce
	}
	c.renderUnreadable(doc, dir)
	return false, ce
}

// readRaw reads the record at key: at most 1 MiB (the library's limit
// for a record) plus one byte, and its full size.
func (c *cli) readRaw(ctx context.Context, bucket, key string) ([]byte, int64, error) {
	out, err := c.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, 0, err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, 1<<20+1))
	if err != nil {
		return nil, 0, err
	}
	size := aws.ToInt64(out.ContentLength)
	if size < int64(len(data)) {
		size = int64(len(data))
	}
	return data, size, nil
}

func (c *cli) renderUnreadable(doc unreadableDoc, dir string) {
	now := time.Now()
	what := map[string]string{
		problemCorrupt:     "corrupt",
		problemNewerSchema: "newer schema_version " + strconv.Itoa(doc.SchemaVersion) + " than this build knows (" + strconv.Itoa(s3task.SchemaVersion) + ")",
		problemMissing:     "missing: the folder has objects but no status.json",
	}[doc.Problem]
	tw := newTable(c.stdout)
	tw.row("UNREADABLE", doc.Key)
	tw.row("Problem", what)
	tw.row("Error", clean(doc.Error.Message, 300))
	if doc.Problem != problemMissing {
		tw.row("Size", plural(int(doc.Size), "byte"))
	}
	tw.flush()
	if doc.Problem != problemMissing {
		head := "\nRecord, escaped:"
		if doc.RawTruncated {
			head = fmt.Sprintf("\nRecord, escaped, the first %d of %d bytes:", rawLimit, doc.Size)
		}
		fmt.Fprintln(c.stdout, head)
		for line := range strings.SplitSeq(string(doc.raw), "\n") {
			fmt.Fprintln(c.stdout, "  "+escapeRaw([]byte(line)))
		}
	}
	fmt.Fprintf(c.stdout, "\nObjects in %s:\n", dir)
	tw = newTable(c.stdout)
	tw.row("  KEY", "SIZE", "MODIFIED", "KIND")
	for _, o := range doc.Objects {
		tw.row("  "+escapeRaw([]byte(strings.TrimPrefix(o.Key, dir))), strconv.FormatInt(o.Size, 10), stamp(o.LastModified, now), o.Kind)
	}
	tw.flush()
	fmt.Fprintln(c.stdout, "\nThe record is left as it is: fix or delete it by hand (see the s3taskctl README).")
}

// escapeRaw makes bytes from the store safe to print: printable text is
// kept as it is, a backslash is doubled, a newline, tab and carriage
// return become \n, \t and \r, other control and invisible characters
// \u followed by four hex digits, and bytes that are not UTF-8 \x and two.
// Nothing in the result moves the cursor or changes the terminal.
func escapeRaw(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&s, `\x%02x`, b[0])
		case r == '\\':
			s.WriteString(`\\`)
		case r == '\n':
			s.WriteString(`\n`)
		case r == '\t':
			s.WriteString(`\t`)
		case r == '\r':
			s.WriteString(`\r`)
		case r == ' ' || unicode.IsPrint(r):
			s.WriteRune(r)
		case r > 0xffff:
			fmt.Fprintf(&s, `\U%08x`, r)
		default:
			fmt.Fprintf(&s, `\u%04x`, r)
		}
		b = b[n:]
	}
	return s.String()
}
