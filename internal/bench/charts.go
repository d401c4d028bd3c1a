package bench

import (
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// designColors keeps each design's colour the same on every chart.
var designColors = map[string]color.Color{
	"holdfast":                             color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"database-only":                        color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"holdfast, twice too big":              color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"holdfast, twice too big, no hold cap": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"no waiting room: seats sold":          color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"waiting room: seats sold":             color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"waiting room: waiting":                color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"waiting room: admissions per second":  color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// WriteCharts draws the run's series as SVG files in dir: the on-sale's seats sold over
// time (onsale-sold.svg), hold p99 against the arrival rate (onsale-knee.svg) and the
// group-commit batch sizes (confirm-batches.svg). A chart without data is not written.
func (r *Report) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, c := range []struct {
		name string
		has  bool
		plot func() (*plot.Plot, error)
	}{
		{"onsale-sold.svg", len(r.Series.SoldOverTime) > 0, r.soldChart},
		{"onsale-knee.svg", len(r.Series.HoldP99ByRate) > 0, r.kneeChart},
		{"confirm-batches.svg", len(r.Series.BatchSizes) > 0, r.batchChart},
		{"fair-sale.svg", len(r.Series.FairSale) > 0, r.fairChart},
	} {
		if !c.has {
			continue
		}
		p, err := c.plot()
		if err != nil {
			return written, err
		}
		path := filepath.Join(dir, c.name)
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return written, fmt.Errorf("chart %s: %w", c.name, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// linesChart is a chart of one line per design.
func linesChart(title, x, y string, series map[string][]Point) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	return p, lines(p, series)
}

func (r *Report) soldChart() (*plot.Plot, error) {
	return linesChart("On-sale: seats sold over time", "seconds since the sale opened", "seats sold", r.Series.SoldOverTime)
}

func (r *Report) fairChart() (*plot.Plot, error) {
	return linesChart("Fair on-sale: the waiting room's line, its admissions, and seats sold", "seconds since the sale opened",
		"holders waiting · admissions per second · seats sold", r.Series.FairSale)
}

// kneeChart is hold p99 against the arrival rate on log scales, with the knee's 100 ms.
func (r *Report) kneeChart() (*plot.Plot, error) {
	p, err := linesChart("Hold p99 against arrival rate (the knee: 100 ms)", "buyers arriving per second", "hold p99, ms", r.Series.HoldP99ByRate)
	if err != nil {
		return nil, err
	}
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	lo, hi := r.rates()
	limit, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 100}, {X: hi, Y: 100}})
	if err != nil {
		return nil, err
	}
	limit.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(limit)
	p.Legend.Add("100 ms", limit)
	return p, nil
}

// batchChart is a bar chart of the on-sale's batches by size.
func (r *Report) batchChart() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Group commit: confirmations per transaction during the on-sale"
	p.X.Label.Text = "batch size (at most)"
	p.Y.Label.Text = "batches"
	values := make(plotter.Values, len(r.Series.BatchSizes))
	names := make([]string, len(r.Series.BatchSizes))
	for i, b := range r.Series.BatchSizes {
		values[i], names[i] = b.Y, fmt.Sprintf("%.0f", b.X)
	}
	bars, err := plotter.NewBarChart(values, vg.Points(24))
	if err != nil {
		return nil, err
	}
	bars.Color = designColors["holdfast"]
	p.Add(bars)
	p.NominalX(names...)
	return p, nil
}

// lines adds one line per design, in name order.
func lines(p *plot.Plot, series map[string][]Point) error {
	for _, n := range slices.Sorted(maps.Keys(series)) {
		xys := make(plotter.XYs, len(series[n]))
		for i, pt := range series[n] {
			xys[i].X, xys[i].Y = pt.X, max(pt.Y, 0.01) // log scales need positive values
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		if c, ok := designColors[n]; ok {
			l.Color = c
		}
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(n, l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return nil
}

// rates is the lowest and highest arrival rate of the knee chart.
func (r *Report) rates() (lo, hi float64) {
	var all []float64
	for _, pts := range r.Series.HoldP99ByRate {
		for _, pt := range pts {
			all = append(all, pt.X)
		}
	}
	return slices.Min(all), slices.Max(all)
}
