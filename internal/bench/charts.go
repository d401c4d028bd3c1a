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
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name)
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
		written = append(written, path)
		return nil
	}
	if len(r.Series.SoldOverTime) > 0 {
		p := plot.New()
		p.Title.Text = "On-sale: seats sold over time"
		p.X.Label.Text = "seconds since the sale opened"
		p.Y.Label.Text = "seats sold"
		if err := lines(p, r.Series.SoldOverTime); err != nil {
			return written, err
		}
		if err := save(p, "onsale-sold.svg"); err != nil {
			return written, err
		}
	}
	if len(r.Series.HoldP99ByRate) > 0 {
		p := plot.New()
		p.Title.Text = "Hold p99 against arrival rate (the knee: 100 ms)"
		p.X.Label.Text = "buyers arriving per second"
		p.Y.Label.Text = "hold p99, ms"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		if err := lines(p, r.Series.HoldP99ByRate); err != nil {
			return written, err
		}
		lo, hi := r.rates()
		limit, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 100}, {X: hi, Y: 100}})
		if err != nil {
			return written, err
		}
		limit.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(limit)
		p.Legend.Add("100 ms", limit)
		if err := save(p, "onsale-knee.svg"); err != nil {
			return written, err
		}
	}
	if len(r.Series.BatchSizes) > 0 {
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
			return written, err
		}
		bars.Color = designColors["holdfast"]
		p.Add(bars)
		p.NominalX(names...)
		if err := save(p, "confirm-batches.svg"); err != nil {
			return written, err
		}
	}
	if len(r.Series.FairSale) > 0 {
		p := plot.New()
		p.Title.Text = "Fair on-sale: the waiting room's line, its admissions, and seats sold"
		p.X.Label.Text = "seconds since the sale opened"
		p.Y.Label.Text = "holders waiting · admissions per second · seats sold"
		if err := lines(p, r.Series.FairSale); err != nil {
			return written, err
		}
		if err := save(p, "fair-sale.svg"); err != nil {
			return written, err
		}
	}
	return written, nil
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
