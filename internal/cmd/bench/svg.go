package main

// A small hand-written SVG chart: lines or dots on linear or logarithmic
// axes, with labelled ticks, axis titles and a legend. No dependencies.

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// chartPoint is one point of a series, in data units.
type chartPoint struct{ x, y float64 }

// chartSeries is one series of a chart.
type chartSeries struct {
	name   string
	color  string // any SVG colour
	points []chartPoint
	line   bool // join the points in order
	dots   bool // mark each point
	dashed bool // draw the line dashed
}

// lineChart is a chart of two or more series on shared axes.
type lineChart struct {
	title          string
	xLabel, yLabel string
	logX, logY     bool // logarithmic axes (every value must be positive)
	width, height  int  // pixels; zero means 760 by 460
	series         []chartSeries
}

// chartPalette is a colour-blind-safe set for series without a colour.
var chartPalette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"}

// axis maps data values to pixels along one direction.
type axis struct {
	log    bool
	lo, hi float64 // the domain, in data units
	p0, p1 float64 // the pixels lo and hi map to
}

func (a axis) pos(v float64) float64 {
	f := func(v float64) float64 { return v }
	if a.log {
		f = math.Log10
	}
	if a.hi == a.lo {
		return (a.p0 + a.p1) / 2
	}
	return a.p0 + (f(v)-f(a.lo))/(f(a.hi)-f(a.lo))*(a.p1-a.p0)
}

// ticks returns the values to label: powers of ten (and 2 and 5 times
// them if there are few decades) on a log axis, 1-2-5 steps on a linear one.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		decades := math.Log10(a.hi) - math.Log10(a.lo)
		steps := []float64{1}
		if decades <= 2 {
			steps = []float64{1, 2, 5}
		}
		for e := math.Floor(math.Log10(a.lo)); e <= math.Ceil(math.Log10(a.hi)); e++ {
			for _, s := range steps {
				v := s * math.Pow(10, e)
				if v >= a.lo*(1-1e-9) && v <= a.hi*(1+1e-9) {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 6)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// domain returns the range of an axis holding vs: whole decades on a log
// axis, from zero (or the least value, if negative) to a nice round number on
// a linear one.
func domain(vs []float64, log bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if log && v <= 0 {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if math.IsInf(lo, 1) {
		return 1, 10
	}
	if log {
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 6)
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step
}

// minOf returns the least positive value of vs, or 0 if none.
func minOf(vs []float64) float64 {
	m := 0.0
	for _, v := range vs {
		if v > 0 && (m == 0 || v < m) {
			m = v
		}
	}
	return m
}

// tickLabel formats a tick value briefly: 1k, 10k, 100k, 1M; 0.5; 250.
func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(a, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3 && math.Mod(a, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// svg draws the chart.
func (c *lineChart) svg() string {
	w, h := c.width, c.height
	if w == 0 {
		w, h = 760, 460
	}
	const left, top, bottom, legendW = 72.0, 44.0, 56.0, 200.0
	right := float64(w) - legendW
	base := float64(h) - bottom
	var xs, ys []float64
	for _, s := range c.series {
		for _, p := range s.points {
			xs, ys = append(xs, p.x), append(ys, p.y)
		}
	}
	xlo, xhi := domain(xs, c.logX)
	ylo, yhi := domain(ys, c.logY)
	if c.logY {
		// Keep a series that sits on a power of ten off the axis.
		if lo := minOf(ys); lo > 0 && lo < ylo*1.2 {
			ylo /= 10
		}
	}
	ax := axis{log: c.logX, lo: xlo, hi: xhi, p0: left, p1: right}
	ay := axis{log: c.logY, lo: ylo, hi: yhi, p0: base, p1: top}

	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%.1f" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.title))
	// Grid and tick labels.
	for _, v := range ax.ticks() {
		x := ax.pos(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`+"\n", x, top, x, base)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, base+16, esc(tickLabel(v)))
	}
	for _, v := range ay.ticks() {
		y := ay.pos(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>`+"\n", left, y, right, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, esc(tickLabel(v)))
	}
	// Axes and their titles.
	fmt.Fprintf(&b, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="#333333"/>`+"\n", left, top, base, right)
	scaleNote := func(log bool) string {
		if log {
			return " (log scale)"
		}
		return ""
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+right)/2, float64(h)-14, esc(c.xLabel+scaleNote(c.logX)))
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+base)/2, esc(c.yLabel+scaleNote(c.logY)))
	// Series, clipped to the plot.
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></clipPath>`+"\n", left-4, top-4, right-left+8, base-top+8)
	b.WriteString(`<g clip-path="url(#plot)">` + "\n")
	for i, s := range c.series {
		color := s.color
		if color == "" {
			color = chartPalette[i%len(chartPalette)]
		}
		if s.line && len(s.points) > 1 {
			var d strings.Builder
			for j, p := range s.points {
				cmd := "L"
				if j == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, ax.pos(p.x), ay.pos(p.y))
			}
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.TrimSpace(d.String()), color, dash)
		}
		if s.dots {
			r := 3.5
			if len(s.points) > 200 {
				r = 1.6
			}
			for _, p := range s.points {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" fill-opacity="0.7"/>`+"\n", ax.pos(p.x), ay.pos(p.y), r, color)
			}
		}
	}
	b.WriteString("</g>\n")
	// Legend.
	lx := right + 16
	for i, s := range c.series {
		color := s.color
		if color == "" {
			color = chartPalette[i%len(chartPalette)]
		}
		y := top + 10 + float64(i)*22
		if s.line {
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, y, lx+24, y, color, dash)
		}
		if s.dots || !s.line {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", lx+12, y, color)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+32, y+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// writeSVG writes the chart to dir/name, creating dir if need be, and
// returns the path.
func writeSVG(dir, name string, c *lineChart) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(c.svg()), 0o644)
}
