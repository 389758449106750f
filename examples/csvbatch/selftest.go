package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/s3task/s3task"
)

// selftest generates a CSV of n rows, runs it as a csv_enrich task through
// this process's worker, checks the output and prints the figures, peak
// memory included. It measures the whole process: with the embedded S3 that
// includes the S3's own copy of the objects, so to see the worker's memory
// alone, run the S3 in another process (see the README).
func (a *app) selftest(ctx context.Context, n int, out io.Writer) error {
	t, err := a.store.Create(ctx, s3task.CreateParams{
		Name:      fmt.Sprintf("selftest: %d rows", n),
		Type:      typeEnrich,
		CreatedBy: "selftest",
		Args:      enrichArgs{Required: []string{"name", "email"}},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "selftest: task %s: generating and uploading %d rows\n", t.ID, n)
	begin := time.Now()

	// The generator streams into the upload; UploadInput spools a reader
	// that cannot seek to a temporary file, so memory stays flat.
	pr, pw := io.Pipe()
	want := make(chan genCounts, 1)
	go func() {
		c, err := generateCSV(pw, n)
		pw.CloseWithError(err)
		want <- c
	}()
	err = a.store.UploadInput(ctx, t.ID, pr)
	pr.CloseWithError(errors.New("upload ended"))
	expect := <-want
	if err != nil {
		var se *s3task.InputSizeError
		if errors.As(err, &se) {
			return fmt.Errorf("the generated input is over -max-input-size (%d bytes); raise it, e.g. -max-input-size 300MiB: %w", se.Limit, err)
		}
		return err
	}
	if t, err = a.store.Submit(ctx, t.ID); err != nil {
		return err
	}
	uploaded := time.Since(begin)
	fmt.Fprintf(out, "selftest: uploaded %s in %s; waiting for the worker\n", mib(t.InputSize), uploaded.Round(time.Millisecond))

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	for !t.Terminal() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		if t, err = a.store.Get(ctx, t.ID); err != nil {
			return err
		}
		if time.Since(lastPrint) >= 2*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(out, "selftest: %s, %d of ~%d rows\n", t.Status, t.ProcessedCount, t.RowCount)
		}
	}
	processed := time.Since(begin) - uploaded
	if t.Status != s3task.StatusCompleted {
		return fmt.Errorf("selftest: task ended %s: %s", t.Status, t.LastError)
	}

	got, err := countOutput(ctx, a.store, t.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "selftest: completed in %s: %d rows, %d ok, %d bad; output %d rows, %d ok\n",
		processed.Round(time.Millisecond), t.ProcessedCount, t.SuccessCount, t.ErrorCount, got.rows, got.ok)
	if t.ProcessedCount != expect.rows || t.SuccessCount != expect.ok || got.rows != expect.rows || got.ok != expect.ok {
		return fmt.Errorf("selftest: expected %d rows with %d ok", expect.rows, expect.ok)
	}
	if peak, ok := peakRSS(); ok {
		fmt.Fprintf(out, "selftest: peak RSS of this process (VmHWM): %s\n", mib(peak))
	}
	return nil
}

type genCounts struct{ rows, ok int64 }

// generateCSV writes a header and n rows of people. Every 10th row has a
// malformed e-mail address and every 25th no name, so csv_enrich has bad
// rows to find; the rest carry padding that enrich trims.
func generateCSV(w io.Writer, n int) (genCounts, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var c genCounts
	if _, err := bw.WriteString("id,name,email,city,score\n"); err != nil {
		return c, err
	}
	var line []byte
	for i := 1; i <= n; i++ {
		line = line[:0]
		line = strconv.AppendInt(line, int64(i), 10)
		line = append(line, ", "...)
		if i%25 != 0 {
			line = append(line, "Person "...)
			line = strconv.AppendInt(line, int64(i), 10)
		}
		line = append(line, " ,  "...)
		if i%10 == 0 {
			line = append(line, "user"...)
			line = strconv.AppendInt(line, int64(i), 10)
			line = append(line, "-at-example.com"...)
		} else {
			line = append(line, "User."...)
			line = strconv.AppendInt(line, int64(i), 10)
			line = append(line, "@Example.COM"...)
		}
		line = append(line, " ,City "...)
		line = strconv.AppendInt(line, int64(i%97), 10)
		line = append(line, ',')
		line = strconv.AppendFloat(line, float64(i%1000)/7, 'f', 2, 64)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return c, err
		}
		c.rows++
		if i%10 != 0 && i%25 != 0 {
			c.ok++
		}
	}
	return c, bw.Flush()
}

// countOutput streams a completed task's output and counts its rows and the
// rows marked ok.
func countOutput(ctx context.Context, store *s3task.Store, id string) (genCounts, error) {
	var c genCounts
	rc, err := store.OpenOutput(ctx, id)
	if err != nil {
		return c, err
	}
	defer rc.Close()
	r := csv.NewReader(rc)
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return c, fmt.Errorf("selftest: output header: %w", err)
	}
	status := len(header) - 1
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("selftest: output: %w", err)
		}
		c.rows++
		if rec[status] == "ok" {
			c.ok++
		}
	}
}

// peakRSS returns the process's peak resident set size from /proc (Linux).
func peakRSS() (int64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
