package main

// Scenario 6's CSV: the input, generated on the fly, the streaming handler
// that enriches it, and the check of its output.

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// enrichCSV streams the input through csv.Reader and writes each row, with
// three computed columns, through csv.Writer to the attempt's output,
// reporting progress every 10,000 rows. Memory stays flat: one row at a time.
func enrichCSV(ctx context.Context, job *s3task.Job, rep *workerReport) error {
	start := time.Now()
	in, err := job.OpenInput(ctx)
	if err != nil {
		return err
	}
	defer in.Close()
	var inBytes, outBytes byteCount
	r := csv.NewReader(bufio.NewReaderSize(io.TeeReader(in, &inBytes), 256<<10))
	r.ReuseRecord = true
	r.FieldsPerRecord = 5
	out, err := job.CreateOutput(ctx)
	if err != nil {
		return err
	}
	buf := bufio.NewWriterSize(io.MultiWriter(out, &outBytes), 256<<10)
	w := csv.NewWriter(buf)
	fail := func(err error) error {
		_ = out.Close() // uploads what there is; this attempt fails anyway
		return err
	}
	head, err := r.Read()
	if err != nil {
		return fail(s3task.Permanent(fmt.Errorf("read header: %w", err)))
	}
	if err := w.Write(append(head, "domain", "amount_cents", "row_crc32")); err != nil {
		return fail(err)
	}
	var rows int64
	row := make([]string, 0, 8)
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(s3task.Permanent(fmt.Errorf("row %d: %w", rows+1, err)))
		}
		email := rec[2]
		domain := email[strings.IndexByte(email, '@')+1:]
		whole, frac, _ := strings.Cut(rec[3], ".")
		cents, err := strconv.ParseInt(whole+frac, 10, 64)
		if err != nil {
			return fail(s3task.Permanent(fmt.Errorf("row %d: amount %q", rows+1, rec[3])))
		}
		crc := crc32.ChecksumIEEE([]byte(rec[0]))
		crc = crc32.Update(crc, crc32.IEEETable, []byte(email))
		row = append(row[:0], rec...)
		row = append(row, domain, strconv.FormatInt(cents, 10), fmt.Sprintf("%08x", crc))
		if err := w.Write(row); err != nil {
			return fail(err)
		}
		rows++
		if rows%10000 == 0 {
			job.SetProgress(s3task.Progress{ProcessedCount: rows, SuccessCount: rows})
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fail(err)
	}
	if err := buf.Flush(); err != nil {
		return fail(err)
	}
	job.SetProgress(s3task.Progress{RowCount: rows, ProcessedCount: rows, SuccessCount: rows})
	if err := out.Close(); err != nil {
		return err
	}
	rep.Rows, rep.InBytes, rep.OutBytes, rep.Handler = rows, int64(inBytes), int64(outBytes), time.Since(start)
	return nil
}

// byteCount counts the bytes written to it.
type byteCount int64

func (c *byteCount) Write(p []byte) (int, error) {
	*c += byteCount(len(p))
	return len(p), nil
}

// csvGen is a CSV of fixed-width rows, generated on the fly at any offset:
// an io.ReaderAt that never holds more than one row.
type csvGen struct {
	rows, size int64
}

const (
	genHeader = "id,customer,email,amount,created_at\n"
	genRowLen = 91
)

func newCSVGen(target int64) *csvGen {
	rows := max((target-int64(len(genHeader)))/genRowLen, 1)
	return &csvGen{rows: rows, size: int64(len(genHeader)) + rows*genRowLen}
}

func (g *csvGen) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("csvGen: negative offset")
	}
	n := 0
	var row [genRowLen]byte
	hl := int64(len(genHeader))
	for n < len(p) && off < g.size {
		var c int
		if off < hl {
			c = copy(p[n:], genHeader[off:])
		} else {
			i, within := (off-hl)/genRowLen, (off-hl)%genRowLen
			c = copy(p[n:], appendGenRow(row[:0], i)[within:])
		}
		n += c
		off += int64(c)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// appendGenRow appends row i: exactly genRowLen bytes.
func appendGenRow(b []byte, i int64) []byte {
	b = appendPadded(b, i, 10)
	b = append(b, ",customer-"...)
	b = appendPadded(b, i, 10)
	b = append(b, ",user"...)
	b = appendPadded(b, i, 10)
	b = append(b, "@example"...)
	b = append(b, byte('0'+i%10))
	b = append(b, ".com,"...)
	b = appendPadded(b, (i*7919)%10000000, 7)
	b = append(b, '.')
	b = appendPadded(b, i%100, 2)
	return append(b, ",2026-06-21T10:15:00Z\n"...)
}

func appendPadded(b []byte, v int64, width int) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], v, 10)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// checkOutput counts the data rows of an enriched CSV and checks a few.
func checkOutput(r io.Reader) (int64, error) {
	cr := csv.NewReader(bufio.NewReaderSize(r, 256<<10))
	cr.ReuseRecord = true
	cr.FieldsPerRecord = 8
	if _, err := cr.Read(); err != nil {
		return 0, fmt.Errorf("output header: %w", err)
	}
	var n int64
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("output row %d: %w", n+1, err)
		}
		if n%100000 == 0 {
			want := string(appendPadded(nil, n, 10))
			if rec[0] != want || !strings.HasPrefix(rec[5], "example") {
				return n, fmt.Errorf("output row %d is %q", n+1, rec)
			}
		}
		n++
	}
}
