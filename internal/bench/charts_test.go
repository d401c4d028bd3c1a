package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteCharts draws each chart whose series the report has, and only those.
func TestWriteCharts(t *testing.T) {
	line := map[string][]Point{"holdfast": {{X: 1, Y: 10}, {X: 2, Y: 40}}, "pg-only": {{X: 1, Y: 20}, {X: 2, Y: 90}}}
	r := &Report{Series: Series{SoldOverTime: line, HoldP99ByRate: line, BatchSizes: []Point{{X: 8, Y: 3}, {X: 16, Y: 5}}}}
	dir := t.TempDir()
	files, err := r.WriteCharts(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%s: not an SVG (%v)", f, err)
		}
	}
	if want := []string{"onsale-sold.svg", "onsale-knee.svg", "confirm-batches.svg"}; !slices.Equal(names, want) {
		t.Errorf("charts %v, want %v (no fair sale in the report)", names, want)
	}
}
