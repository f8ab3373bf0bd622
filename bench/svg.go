package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Chart layout, in SVG user units.
const (
	chartWidth   = 1000
	labelWidth   = 330
	plotLeft     = labelWidth + 10
	plotRight    = 850
	barHeight    = 12
	barGap       = 2
	rowGap       = 10
	panelHeader  = 46
	panelPadding = 30
)

var backendColors = map[string]string{
	ZooKeeper: "#d9822b",
	Raft:      "#2b6cd9",
	Memory:    "#8a8a8a",
}

func backendColor(name string) string {
	if c, ok := backendColors[name]; ok {
		return c
	}
	return "#6a3d9a"
}

// WriteSVG draws the report's table as an SVG chart: one panel of
// latencies (the row's headline figure, log scale, with the seeds'
// published figures as hollow markers) and one of throughputs (linear),
// one bar per backend, the ZooKeeper/Raft ratio on the right.
func (rep *Report) WriteSVG(w io.Writer) error {
	var lat, thr []Row
	for _, r := range rep.Rows {
		if r.Metric == MetricThroughput {
			thr = append(thr, r)
		} else {
			lat = append(lat, r)
		}
	}
	backends := rep.backendOrder()
	var body strings.Builder
	y := 0
	title := fmt.Sprintf("metaplane bench: %s", strings.Join(backends, " vs "))
	sub := fmt.Sprintf("%s, %d cores, Linux %s, %s, %s; %d voter(s)%s",
		rep.Machine.CPUModel, rep.Machine.Cores, rep.Machine.Kernel, rep.Machine.GoVersion,
		rep.Machine.Date, rep.Options.Voters, map[bool]string{true: ", quick", false: ""}[rep.Options.Quick])
	fmt.Fprintf(&body, `<text x="16" y="26" class="title">%s</text>`+"\n", xmlEscape(title))
	fmt.Fprintf(&body, `<text x="16" y="44" class="sub">%s</text>`+"\n", xmlEscape(sub))
	y = 56
	// Legend.
	lx := 16
	for _, b := range backends {
		fmt.Fprintf(&body, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" class="lbl">%s</text>`+"\n",
			lx, y, backendColor(b), lx+16, y+10, xmlEscape(b))
		lx += 30 + 8*len(b)
	}
	fmt.Fprintf(&body, `<path d="M%d %d l5 -6 l5 6 l-5 6 z" fill="none" stroke="#333"/><text x="%d" y="%d" class="lbl">seeds' published figure (JVM; ZooKeeper / Raft)</text>`+"\n",
		lx, y+6, lx+16, y+10)
	fmt.Fprintf(&body, `<text x="%d" y="%d" class="lbl">zk/raft above 1: Raft better (grey: within 10%%)</text>`+"\n", lx+320, y+10)
	y += 24
	if len(lat) > 0 {
		y = drawPanel(&body, y, "latency (p50, or mean per operation where marked; log scale; lower is better)", lat, backends, false)
	}
	if len(thr) > 0 {
		y = drawPanel(&body, y, "throughput (operations per second; linear scale; higher is better)", thr, backends, true)
	}
	height := y + 10
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintln(bw, `<style>.title{font-size:17px;font-weight:bold}.sub{font-size:11px;fill:#555}.lbl{font-size:11px}.val{font-size:10px;fill:#222}.na{font-size:10px;fill:#999;font-style:italic}.axis{font-size:10px;fill:#666}.ratio{font-size:11px;font-weight:bold}.head{font-size:13px;font-weight:bold}</style>`)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartWidth, height)
	bw.WriteString(body.String())
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// WriteSVGFile writes the chart to path.
func (rep *Report) WriteSVGFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// backendOrder lists the backends that appear in the report, in the order
// of the options (then of first appearance).
func (rep *Report) backendOrder() []string {
	seen := map[string]bool{}
	var out []string
	for _, b := range rep.Options.Backends {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	for _, r := range rep.Rows {
		for _, res := range r.Results {
			if !seen[res.Backend] {
				seen[res.Backend] = true
				out = append(out, res.Backend)
			}
		}
	}
	return out
}

// drawPanel draws one panel of rows starting at y and returns the y below
// it.
func drawPanel(b *strings.Builder, y int, heading string, rows []Row, backends []string, linear bool) int {
	fmt.Fprintf(b, `<text x="16" y="%d" class="head">%s</text>`+"\n", y+16, xmlEscape(heading))
	fmt.Fprintf(b, `<text x="%d" y="%d" class="axis" text-anchor="middle">zk/raft</text>`+"\n", (plotRight+chartWidth)/2+10, y+16)
	y += panelHeader - 20
	// Scale.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		for _, res := range r.Results {
			if v := res.Value(r.Metric); res.Available() && v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if r.Seed != nil && !linear {
			for _, v := range []float64{r.Seed.ZooKeeperMicros, r.Seed.RaftMicros} {
				if v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	var pos func(v float64) float64
	var ticks []float64
	if linear {
		top := niceCeil(hi)
		pos = func(v float64) float64 { return plotLeft + (plotRight-plotLeft)*v/top }
		for i := 0; i <= 4; i++ {
			ticks = append(ticks, top*float64(i)/4)
		}
	} else {
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 <= l0 {
			l1 = l0 + 1
		}
		pos = func(v float64) float64 {
			return plotLeft + (plotRight-plotLeft)*(math.Log10(v)-l0)/(l1-l0)
		}
		for e := l0; e <= l1; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	}
	panelTop := y
	// Rows.
	for _, r := range rows {
		n := len(backends)
		h := n*(barHeight+barGap) - barGap
		label := r.Title
		if r.Metric == MetricMean {
			label += " (mean/op)"
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" class="lbl" text-anchor="end">%s</text>`+"\n", labelWidth, y+h/2+4, xmlEscape(label))
		for i, be := range backends {
			by := y + i*(barHeight+barGap)
			res, ok := r.result(be)
			if !ok {
				continue
			}
			if !res.Available() {
				why := res.Unavailable
				if why == "" {
					why = "no samples"
				}
				fmt.Fprintf(b, `<text x="%d" y="%d" class="na">%s: not available (%s)</text>`+"\n", plotLeft+4, by+barHeight-2, xmlEscape(be), xmlEscape(truncate(why, 70)))
				continue
			}
			v := res.Value(r.Metric)
			x1 := pos(v)
			if x1 < plotLeft+1 {
				x1 = plotLeft + 1
			}
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				plotLeft, by, x1-plotLeft, barHeight, backendColor(be), xmlEscape(be), xmlEscape(r.Title), xmlEscape(valueText(r.Metric, v)))
			fmt.Fprintf(b, `<text x="%.1f" y="%d" class="val">%s</text>`+"\n", x1+3, by+barHeight-2, xmlEscape(valueText(r.Metric, v)))
		}
		if r.Seed != nil && !linear {
			for i, be := range backends {
				var sv float64
				switch be {
				case ZooKeeper:
					sv = r.Seed.ZooKeeperMicros
				case Raft:
					sv = r.Seed.RaftMicros
				}
				if sv <= 0 {
					continue
				}
				cy := y + i*(barHeight+barGap) + barHeight/2
				fmt.Fprintf(b, `<path d="M%.1f %d l5 -6 l5 6 l-5 6 z" fill="none" stroke="#333"><title>seed %s: %s</title></path>`+"\n",
					pos(sv)-5, cy, xmlEscape(be), xmlEscape(FormatDuration(sv)))
			}
		}
		if r.Ratio != nil {
			// Green: Raft better by more than the noise band; red: worse
			// by more; grey: within it.
			col := "#777777"
			switch {
			case *r.Ratio >= 1/noiseBand:
				col = "#1a7f37"
			case *r.Ratio < noiseBand:
				col = "#c0392b"
			}
			fmt.Fprintf(b, `<text x="%d" y="%d" class="ratio" fill="%s" text-anchor="middle">%s</text>`+"\n",
				(plotRight+chartWidth)/2+10, y+h/2+4, col, fmtRatio(*r.Ratio))
		}
		y += h + rowGap
	}
	// Grid and axis labels.
	for _, t := range ticks {
		x := pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, panelTop-4, x, y-rowGap+4)
		lbl := FormatDuration(t)
		if linear {
			lbl = FormatRate(t)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`+"\n", x, y+6, xmlEscape(lbl))
	}
	return y + panelPadding
}

func valueText(m Metric, v float64) string {
	if m == MetricThroughput {
		return FormatRate(v)
	}
	return FormatDuration(v)
}

func fmtRatio(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.2fx", r)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func xmlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			if r < 0x20 && r != '\t' && r != '\n' {
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
