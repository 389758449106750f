package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
)

func TestEnrich(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		opts  enrichOptions
		want  string
		count s3task.Progress
	}{
		{
			name:  "trim, lower-case e-mail, required",
			in:    "name , Email\n  Ann , ANN@X.ORG \n,b@y.org\nCid,\n",
			opts:  enrichOptions{Required: []string{"name"}, EmailColumn: "Email"},
			want:  "name,Email,row_status\nAnn,ann@x.org,ok\n,b@y.org,error: missing name\nCid,,ok\n",
			count: s3task.Progress{RowCount: 3, ProcessedCount: 3, SuccessCount: 2, ErrorCount: 1},
		},
		{
			name:  "several problems in one row",
			in:    "email,name\nnot-an-address,\n",
			opts:  enrichOptions{Required: []string{"email", "name"}},
			want:  "email,name,row_status\nnot-an-address,,error: invalid email; missing name\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, ErrorCount: 1},
		},
		{
			name:  "byte order mark, quoting and CRLF",
			in:    "\ufeffemail,note\r\n\"a@b.co\",\"line one\nline two\"\r\n",
			want:  "email,note,row_status\na@b.co,\"line one\nline two\",ok\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1},
		},
		{
			name: "header only",
			in:   "email\n",
			want: "email,row_status\n",
		},
		{
			name:  "no e-mail column",
			in:    "a,b\n1,2\n",
			want:  "a,b,row_status\n1,2,ok\n",
			count: s3task.Progress{RowCount: 1, ProcessedCount: 1, SuccessCount: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			p, err := enrich(t.Context(), strings.NewReader(tc.in), &out, int64(len(tc.in)), tc.opts, func(s3task.Progress) {})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.count, p); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlausibleEmail(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"a@b.co": true, "first.last+tag@sub.example.org": true,
		"": false, "a": false, "@b.co": false, "a@b": false, "a@@b.co": false, "a@b@c.co": false,
		"a b@c.co": false, "a@.b.co": false, "a@b.co.": false, "a@b..co": false, "<a@b.co>": false,
	} {
		if got := plausibleEmail(s); got != want {
			t.Errorf("plausibleEmail(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestBadInputIsPermanent: input that can never be processed fails for
// good, with a message an operator understands.
func TestBadInputIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		opts     enrichOptions
		want     string
	}{
		{"binary", "name\nabc\x00def\n", enrichOptions{}, "binary file, not CSV (byte 8)"},
		{"binary header", "\x89PNG\x00\x00", enrichOptions{}, "binary file"},
		{"fewer fields", "a,b,c\n1,2,3\n4,5\n", enrichOptions{}, "line 3 has 2 fields, the header has 3"},
		{"more fields", "a,b\n1,2\n3,4\n5,6,7\n", enrichOptions{}, "line 4 has 3 fields, the header has 2"},
		{"bare quote", "a,b\n1,x\"y\n", enrichOptions{}, "not valid CSV"},
		{"unterminated quote", "a,b\n1,\"open\n", enrichOptions{}, "not valid CSV"},
		{"not UTF-8", "a,b\n1,caf\xe9\n", enrichOptions{}, "not UTF-8 text (line 2)"},
		{"empty", "", enrichOptions{}, "input is empty"},
		{"missing required column", "name,mail\nx,y\n", enrichOptions{Required: []string{"name", "email"}}, `no required column "email"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := enrich(t.Context(), strings.NewReader(tc.in), io.Discard, int64(len(tc.in)), tc.opts, func(s3task.Progress) {})
			if !s3task.IsPermanent(err) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("enrich: %v (permanent %v), want a permanent error containing %q", err, s3task.IsPermanent(err), tc.want)
			}
			_, err = stats(t.Context(), strings.NewReader(tc.in), io.Discard, int64(len(tc.in)), func(s3task.Progress) {})
			if tc.opts.Required == nil && !s3task.IsPermanent(err) {
				t.Errorf("stats: %v, want a permanent error", err)
			}
		})
	}
}

// TestReadErrorIsTransient: when reading the input fails (the S3 stream
// broke), the error is returned as it is, so the worker retries.
func TestReadErrorIsTransient(t *testing.T) {
	t.Parallel()
	broken := errors.New("connection reset by peer")
	in := io.MultiReader(strings.NewReader("a,b\n1,2\n3,4\n"), iotest.ErrReader(broken))
	_, err := enrich(t.Context(), in, io.Discard, 1000, enrichOptions{}, func(s3task.Progress) {})
	if !errors.Is(err, broken) || s3task.IsPermanent(err) {
		t.Errorf("enrich: %v, want the read error, not permanent", err)
	}
	in = io.MultiReader(strings.NewReader("a,b\n1,2\n"), iotest.ErrReader(broken))
	if _, err := stats(t.Context(), in, io.Discard, 1000, func(s3task.Progress) {}); !errors.Is(err, broken) || s3task.IsPermanent(err) {
		t.Errorf("stats: %v, want the read error, not permanent", err)
	}
}

// TestProgressMoves: a large input reports progress while it runs, with an
// estimated row count, and exact counts at the end.
func TestProgressMoves(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	const rows = 20 * progressEvery
	counts, err := generateCSV(&in, rows)
	if err != nil {
		t.Fatal(err)
	}
	var reports []s3task.Progress
	size := int64(in.Len())
	p, err := enrich(t.Context(), &in, io.Discard, size, enrichOptions{Required: []string{"name", "email"}}, func(p s3task.Progress) {
		reports = append(reports, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := s3task.Progress{RowCount: rows, ProcessedCount: rows, SuccessCount: counts.ok, ErrorCount: rows - counts.ok}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("final counts (-want +got):\n%s", diff)
	}
	if len(reports) < 10 {
		t.Fatalf("%d progress reports for %d rows", len(reports), rows)
	}
	mid := reports[len(reports)/2]
	if mid.ProcessedCount <= 0 || mid.ProcessedCount >= rows || mid.RowCount < rows*8/10 || mid.RowCount > rows*12/10 {
		t.Errorf("a report half-way: %+v; want some rows done and an estimate near %d", mid, rows)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].ProcessedCount < reports[i-1].ProcessedCount {
			t.Fatalf("progress went backwards: %+v then %+v", reports[i-1], reports[i])
		}
	}
	if diff := cmp.Diff(want, reports[len(reports)-1]); diff != "" {
		t.Errorf("last report (-want +got):\n%s", diff)
	}
}

// TestCancellation: processing stops with the context's cause.
func TestCancellation(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	if _, err := generateCSV(&in, 10*progressEvery); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(s3task.ErrTaskCanceled)
	_, err := enrich(ctx, &in, io.Discard, 0, enrichOptions{}, func(s3task.Progress) {})
	if !errors.Is(err, s3task.ErrTaskCanceled) {
		t.Errorf("enrich: %v, want ErrTaskCanceled", err)
	}
}

func TestStatsDistinctIsCapped(t *testing.T) {
	t.Parallel()
	var in strings.Builder
	in.WriteString("n,same\n")
	for i := range maxDistinct + 5 {
		fmt.Fprintf(&in, "%d,x\n", i)
	}
	var out bytes.Buffer
	if _, err := stats(t.Context(), strings.NewReader(in.String()), &out, 0, func(s3task.Progress) {}); err != nil {
		t.Fatal(err)
	}
	want := "column,non_empty,empty,distinct,numeric,min,max,mean\n" +
		"n,1005,0,1000+,1005,0,1004,502\nsame,1005,0,1,0,,,\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestCheckPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		taskType, payload string
		ok                bool
	}{
		{typeEnrich, ``, true},
		{typeEnrich, `null`, true},
		{typeEnrich, `{}`, true},
		{typeEnrich, `{"required":["a","b"],"email_column":"mail"}`, true},
		{typeEnrich, `{"required":[""]}`, false},
		{typeEnrich, `{"required":"a"}`, false},
		{typeEnrich, `{"other":1}`, false},
		{typeStats, `{}`, true},
		{typeStats, `{"x":1}`, false},
		{"csv_other", `{}`, false},
		{"", ``, false},
	}
	for _, tc := range tests {
		err := checkPayload(tc.taskType, json.RawMessage(tc.payload))
		if (err == nil) != tc.ok {
			t.Errorf("checkPayload(%q, %s) = %v, want ok %v", tc.taskType, tc.payload, err, tc.ok)
		}
	}
}
