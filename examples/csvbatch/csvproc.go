package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/s3task/s3task"
)

// This file holds the row processing of the two task types. It reads from
// an io.Reader and writes to an io.Writer, one record at a time, so memory
// stays bounded whatever the size of the input; it knows nothing of S3.
//
// Error policy: input that can never be processed (binary bytes, text that
// is not UTF-8, a CSV syntax error, a row whose field count differs from the
// header's, a missing required column) is returned wrapped in
// s3task.Permanent, so the task fails at once with a readable last_error.
// Errors from reading or writing (the S3 stream broke, the disk is full) are
// returned as they are, so the worker retries the task.

// progressEvery is how many rows pass between progress reports and
// cancellation checks.
const progressEvery = 1024

// errBinary says the input holds a NUL byte: it is not text.
var errBinary = errors.New("input contains NUL bytes: it is a binary file, not CSV")

// inputGuard passes reads through, counting bytes and refusing NUL bytes.
type inputGuard struct {
	r io.Reader
	n int64
}

func (g *inputGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if i := bytes.IndexByte(p[:n], 0); i >= 0 {
		return 0, fmt.Errorf("%w (byte %d)", errBinary, g.n+int64(i))
	}
	g.n += int64(n)
	return n, err
}

// rowReader reads the header and then the rows of a CSV input, reporting
// progress as it goes.
type rowReader struct {
	ctx    context.Context
	guard  *inputGuard
	csv    *csv.Reader
	size   int64 // input size in bytes, if known, for the row estimate
	report func(s3task.Progress)

	header []string
	p      s3task.Progress
}

// newRowReader reads the header row. An empty input is a permanent error.
func newRowReader(ctx context.Context, in io.Reader, size int64, report func(s3task.Progress)) (*rowReader, error) {
	g := &inputGuard{r: in}
	cr := csv.NewReader(g)
	cr.ReuseRecord = true
	rr := &rowReader{ctx: ctx, guard: g, csv: cr, size: size, report: report}
	header, err := rr.read()
	if errors.Is(err, io.EOF) {
		return nil, s3task.Permanent(errors.New("input is empty: a CSV with a header row is expected"))
	}
	if err != nil {
		return nil, err
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a UTF-8 byte order mark
	}
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	rr.header = append([]string(nil), header...)
	return rr, nil
}

// each calls fn with every row, in order, until the input ends or either
// fails. The slice is reused by the following call.
func (rr *rowReader) each(fn func(rec []string) error) error {
	for {
		if rr.p.ProcessedCount%progressEvery == 0 && rr.p.ProcessedCount > 0 {
			if err := context.Cause(rr.ctx); err != nil {
				return err
			}
			rr.reportNow()
		}
		rec, err := rr.read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rr.p.ProcessedCount++
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// read reads one record and classifies its errors.
func (rr *rowReader) read() ([]string, error) {
	rec, err := rr.csv.Read()
	var pe *csv.ParseError
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	case errors.Is(err, errBinary):
		return nil, s3task.Permanent(err)
	case errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount):
		return nil, s3task.Permanent(fmt.Errorf("input is not valid CSV: line %d has %d fields, the header has %d",
			pe.StartLine, len(rec), len(rr.header)))
	case errors.As(err, &pe):
		return nil, s3task.Permanent(fmt.Errorf("input is not valid CSV: %w", err))
	default:
		return nil, err // reading the input failed: worth a retry
	}
	for _, f := range rec {
		if !utf8.ValidString(f) {
			line, _ := rr.csv.FieldPos(0)
			return nil, s3task.Permanent(fmt.Errorf("input is not UTF-8 text (line %d)", line))
		}
	}
	return rec, nil
}

// reportNow sends the counters. While the input is being read RowCount is
// an estimate from the bytes read so far; finish makes it exact.
func (rr *rowReader) reportNow() {
	p := rr.p
	if rr.size > 0 && rr.guard.n > 0 {
		est := int64(float64(p.ProcessedCount) * float64(rr.size) / float64(rr.guard.n))
		p.RowCount = max(est, p.ProcessedCount)
	}
	rr.report(p)
}

// finish flushes w, the output, and returns the final counters: every row
// has been read.
func (rr *rowReader) finish(w *csv.Writer) (s3task.Progress, error) {
	w.Flush()
	if err := w.Error(); err != nil {
		return rr.p, err
	}
	rr.p.RowCount = rr.p.ProcessedCount
	rr.report(rr.p)
	return rr.p, nil
}

// statusColumn is the column csv_enrich appends: "ok", or "error: " and the
// row's problems.
const statusColumn = "row_status"

// enrich validates and normalises each row: fields are trimmed, the e-mail
// column is lower-cased and checked, required fields must be non-empty. It
// writes every row with statusColumn appended and counts good and bad rows.
func enrich(ctx context.Context, in io.Reader, out io.Writer, size int64, args enrichArgs, report func(s3task.Progress)) (s3task.Progress, error) {
	rr, err := newRowReader(ctx, in, size, report)
	if err != nil {
		return s3task.Progress{}, err
	}
	col := map[string]int{}
	for i, h := range rr.header {
		if _, dup := col[h]; !dup {
			col[h] = i
		}
	}
	var required []int
	var missing []string
	for _, name := range args.Required {
		i, ok := col[name]
		if !ok {
			missing = append(missing, strconv.Quote(name))
			continue
		}
		required = append(required, i)
	}
	if len(missing) > 0 {
		return s3task.Progress{}, s3task.Permanent(fmt.Errorf("the header has no required column %s (it has %s)",
			strings.Join(missing, ", "), quoteList(rr.header)))
	}
	emailCol := args.EmailColumn
	if emailCol == "" {
		emailCol = "email"
	}
	email, hasEmail := col[emailCol]

	w := csv.NewWriter(out)
	if err := w.Write(append(rr.header, statusColumn)); err != nil {
		return s3task.Progress{}, err
	}
	var problems []string
	row := make([]string, 0, len(rr.header)+1)
	err = rr.each(func(rec []string) error {
		problems = problems[:0]
		row = row[:0]
		for _, f := range rec {
			row = append(row, strings.TrimSpace(f))
		}
		if hasEmail && row[email] != "" {
			row[email] = strings.ToLower(row[email])
			if !plausibleEmail(row[email]) {
				problems = append(problems, "invalid "+emailCol)
			}
		}
		for _, i := range required {
			if row[i] == "" {
				problems = append(problems, "missing "+rr.header[i])
			}
		}
		if len(problems) == 0 {
			rr.p.SuccessCount++
			row = append(row, "ok")
		} else {
			rr.p.ErrorCount++
			row = append(row, "error: "+strings.Join(problems, "; "))
		}
		return w.Write(row)
	})
	if err != nil {
		return rr.p, err
	}
	return rr.finish(w)
}

// plausibleEmail checks the shape of a lower-cased address: one '@', a
// non-empty local part, a dotted domain, no spaces.
func plausibleEmail(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	if !ok || local == "" || len(s) > 254 || strings.ContainsAny(s, " \t,;<>()[]\\\"") {
		return false
	}
	if strings.Contains(domain, "@") || !strings.Contains(domain, ".") ||
		strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.Contains(domain, "..") {
		return false
	}
	return true
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Limits that keep csv_stats' memory bounded.
const (
	maxStatsColumns = 1000 // wider inputs fail permanently
	maxDistinct     = 1000 // distinct values counted per column; beyond it the count shows "1000+"
)

// columnStats accumulates one column's summary.
type columnStats struct {
	name      string
	nonEmpty  int64
	empty     int64
	distinct  map[uint64]struct{} // hashes of the first maxDistinct values
	overflow  bool
	numeric   int64
	min, max  float64
	sum, comp float64 // Kahan-compensated sum of the numeric values
}

// add counts one field of the column.
func (c *columnStats) add(f string, seed maphash.Seed) {
	f = strings.TrimSpace(f)
	if f == "" {
		c.empty++
		return
	}
	c.nonEmpty++
	if !c.overflow {
		c.distinct[maphash.String(seed, f)] = struct{}{}
		if len(c.distinct) > maxDistinct {
			c.overflow, c.distinct = true, nil
		}
	}
	if v, err := strconv.ParseFloat(f, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		c.numeric++
		c.min, c.max = min(c.min, v), max(c.max, v)
		y := v - c.comp
		t := c.sum + y
		c.comp = (t - c.sum) - y
		c.sum = t
	}
}

// record is the column's row of the summary.
func (c *columnStats) record() []string {
	distinct := strconv.Itoa(len(c.distinct))
	if c.overflow {
		distinct = strconv.Itoa(maxDistinct) + "+"
	}
	rec := []string{c.name, itoa(c.nonEmpty), itoa(c.empty), distinct, itoa(c.numeric), "", "", ""}
	if c.numeric > 0 {
		rec[5], rec[6], rec[7] = ftoa(c.min), ftoa(c.max), ftoa(c.sum/float64(c.numeric))
	}
	return rec
}

// stats writes a per-column summary of the input as CSV: for each column
// the counts of non-empty, empty and distinct values, and for numeric values
// their count, minimum, maximum and mean. It takes no arguments.
func stats(ctx context.Context, in io.Reader, out io.Writer, size int64, _ statsArgs, report func(s3task.Progress)) (s3task.Progress, error) {
	rr, err := newRowReader(ctx, in, size, report)
	if err != nil {
		return s3task.Progress{}, err
	}
	if len(rr.header) > maxStatsColumns {
		return s3task.Progress{}, s3task.Permanent(fmt.Errorf("the input has %d columns; csv_stats summarises at most %d", len(rr.header), maxStatsColumns))
	}
	seed := maphash.MakeSeed()
	cols := make([]*columnStats, len(rr.header))
	for i, h := range rr.header {
		cols[i] = &columnStats{name: h, distinct: map[uint64]struct{}{}, min: math.Inf(1), max: math.Inf(-1)}
	}
	err = rr.each(func(rec []string) error {
		for i, f := range rec {
			cols[i].add(f, seed)
		}
		rr.p.SuccessCount++
		return nil
	})
	if err != nil {
		return rr.p, err
	}
	w := csv.NewWriter(out)
	if err := w.Write([]string{"column", "non_empty", "empty", "distinct", "numeric", "min", "max", "mean"}); err != nil {
		return rr.p, err
	}
	for _, c := range cols {
		if err := w.Write(c.record()); err != nil {
			return rr.p, err
		}
	}
	return rr.finish(w)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', 10, 64) }
