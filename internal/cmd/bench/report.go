package main

import (
	"fmt"
	"io"
	"math"
	"runtime/metrics"
	"strings"
	"sync"
	"time"
)

// prices are dollars per 1,000 requests of each kind.
type prices struct{ put, post, list, get, head, del float64 }

func (p prices) of(kind string) float64 {
	switch kind {
	case "PUT":
		return p.put
	case "POST":
		return p.post
	case "LIST":
		return p.list
	case "GET":
		return p.get
	case "HEAD":
		return p.head
	case "DELETE":
		return p.del
	}
	return 0
}

// cost returns the dollars that n requests of each kind cost.
func (p prices) cost(n map[string]float64) float64 {
	d := 0.0
	for k, v := range n {
		d += v * p.of(k) / 1000
	}
	return d
}

// perUnit divides counts by n.
func perUnit(m map[string]int, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v) / float64(max(n, 1))
	}
	return out
}

// table is one Markdown table with a title and notes under it.
type table struct {
	title string
	cols  []string
	rows  [][]string
	notes []string
}

func newTable(title string, cols ...string) *table { return &table{title: title, cols: cols} }

// add appends a row; cells are formatted with fmt's %v unless strings.
func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case string:
			row[i] = v
		case float64:
			row[i] = num(v)
		case time.Duration:
			row[i] = dur(v)
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.rows = append(t.rows, row)
}

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) write(w io.Writer) {
	fmt.Fprintf(w, "## %s\n\n", t.title)
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.cols, " | "))
	seps := make([]string, len(t.cols))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
	for _, n := range t.notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
	}
}

// num formats a count: whole or large numbers as integers with thousands
// separators, others with two decimals.
func num(v float64) string {
	if v != float64(int64(v)) && v > -100 && v < 100 {
		return fmt.Sprintf("%.2f", v)
	}
	n := int64(math.Round(v))
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// span formats a configured interval briefly: "24h", "1h", "2s".
func span(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s") // "2m0s" -> "2m"
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m") // "1h0m" -> "1h"
	}
	return s
}

// dur formats a latency at a sensible precision.
func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// dollars formats a price, small ones with enough digits to read.
func dollars(v float64) string {
	switch {
	case v == 0:
		return "$0"
	case v >= 1:
		return fmt.Sprintf("$%.2f", v)
	case v >= 0.01:
		return fmt.Sprintf("$%.3f", v)
	}
	return fmt.Sprintf("$%.5f", v)
}

func mib(b uint64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// kindCells formats counts per unit in the order of kinds, for table rows.
func kindCells(n map[string]float64) []any {
	cells := make([]any, len(kinds))
	for i, k := range kinds {
		cells[i] = n[k]
	}
	return cells
}

// kindSummary formats counts per unit as "PUT 8, GET 6, ...", non-zero only.
func kindSummary(n map[string]float64) string {
	var parts []string
	total := 0.0
	for _, k := range kinds {
		if v := n[k]; v != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, num(v)))
			total += v
		}
	}
	return fmt.Sprintf("%s (total %s)", strings.Join(parts, ", "), num(total))
}

func sumValues(n map[string]float64) float64 {
	t := 0.0
	for _, v := range n {
		t += v
	}
	return t
}

// memSampler records the peak of the Go runtime's memory (mapped minus
// released to the OS) while it runs.
type memSampler struct {
	done   chan struct{}
	peak   chan uint64
	once   sync.Once
	result uint64
}

func startMemSampler() *memSampler {
	m := &memSampler{done: make(chan struct{}), peak: make(chan uint64, 1)}
	go func() {
		samples := []metrics.Sample{
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
		}
		var peak uint64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(samples)
			if samples[0].Value.Kind() == metrics.KindUint64 && samples[1].Value.Kind() == metrics.KindUint64 {
				peak = max(peak, samples[0].Value.Uint64()-samples[1].Value.Uint64())
			}
			select {
			case <-m.done:
				m.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

// stop ends sampling and returns the peak in bytes. Later calls return the
// same.
func (m *memSampler) stop() uint64 {
	m.once.Do(func() {
		close(m.done)
		m.result = <-m.peak
	})
	return m.result
}
