// Command comparetable prints the one table of bench/compare.sh: for every scenario of issue 12,
// the per-side medians of the shared load tool's JSON summaries, reverbgo's ratios to soketi and
// to rawserver, the A/A ratio (a second reverbgo process measured in the same rotation: the
// noise of the run), the target and whether it is met.
//
//	comparetable DIR
//
// DIR holds one folder per scenario (fanout, paced100, paced20, clientevents, connections,
// memory), each with SIDE.jsonl files (soketi, reverbgo, reverbgo-aa, rawserver, nbio): the last
// JSON line of every pusherbench run, as compare.sh writes them. Missing sides or scenarios are
// shown as "–". A ratio is only claimed as met when it also lies outside the A/A noise.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// target is one row of the table: metric of scenario, reverbgo / peer <= max (or an absolute
// bound on reverbgo's own median when peer is "").
type target struct {
	scenario, metric, peer string
	max                    float64
	label                  string
}

var targets = []target{
	{"fanout", "server_cpu_us_per_delivery", "soketi", 0, "unpaced 1,000 × 2,000: CPU/delivery (no target; client-bound)"},
	{"fanout", "server_cpu_us_per_delivery", "rawserver", 0, "unpaced: CPU/delivery vs rawserver (no target)"},
	{"paced100", "server_cpu_us_per_delivery", "soketi", 0.7, "paced 100 ev/s × 1,000: CPU/delivery"},
	{"paced100", "server_cpu_us_per_delivery", "rawserver", 0.9, "paced 100 ev/s: CPU/delivery"},
	{"paced100", "p99_ms", "soketi", 1.0, "paced 100 ev/s: p99 latency"},
	{"paced100", "p50_ms", "", 5, "paced 100 ev/s: p50 latency (ms, absolute)"},
	{"paced20", "server_cpu_us_per_delivery", "rawserver", 1.0, "paced 20 ev/s × 1,000: CPU/delivery"},
	{"paced20", "p99_ms", "soketi", 1.0, "paced 20 ev/s: p99 latency"},
	{"clientevents", "server_cpu_us_per_delivery", "soketi", 0.75, "client events 10 → 1,000: CPU/delivery"},
	{"connections", "server_cpu_us_per_conn", "soketi", 0.5, "CPU per accepted + subscribed connection"},
	{"memory", "kib_per_conn", "soketi", 0.45, "KiB per idle connection (fresh process)"},
}

// extra rows: nbio next to ours, when the nbio side was measured (issue 10: within 10 %?).
var nbioRows = []struct{ scenario, metric, label string }{
	{"memory", "kib_per_conn", "KiB per idle connection"},
	{"connections", "server_cpu_us_per_conn", "CPU per connection"},
	{"paced20", "server_cpu_us_per_delivery", "CPU/delivery at 20k deliveries/s"},
	{"paced100", "server_cpu_us_per_delivery", "CPU/delivery at 100k deliveries/s"},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: comparetable DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run prints the table of the runs under dir to w.
func run(dir string, w io.Writer) error {
	runs := map[string]map[string][]map[string]float64{} // scenario → side → runs
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "*.jsonl"))
	for _, p := range entries {
		sc := filepath.Base(filepath.Dir(p))
		side := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		rows, err := readRuns(p)
		if err != nil {
			return err
		}
		if runs[sc] == nil {
			runs[sc] = map[string][]map[string]float64{}
		}
		runs[sc][side] = rows
	}
	med := func(sc, side, metric string) float64 {
		var v []float64
		for _, r := range runs[sc][side] {
			if x, ok := r[metric]; ok {
				v = append(v, x)
			}
		}
		return median(v)
	}

	fmt.Fprintln(w, "| scenario / metric | reverbgo | peer | reverbgo / peer | A/A (reverbgo-aa / reverbgo) | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, t := range targets {
		ours := med(t.scenario, "reverbgo", t.metric)
		aa := med(t.scenario, "reverbgo-aa", t.metric) / ours
		noise := math.Abs(aa - 1)
		if t.peer == "" {
			met := verdict(!math.IsNaN(ours), ours <= t.max)
			fmt.Fprintf(w, "| %s | %s | – | – | %s | ≤ %g | %s |\n", t.label, num(ours), num(aa), t.max, met)
			continue
		}
		peer := med(t.scenario, t.peer, t.metric)
		ratio := ours / peer
		tgt, met := "–", "–"
		if t.max > 0 {
			tgt = fmt.Sprintf("≤ %g× %s", t.max, t.peer)
			met = verdict(!math.IsNaN(ratio), ratio <= t.max)
			// A ratio within the A/A noise of the target is not a claim either way.
			if !math.IsNaN(noise) && math.Abs(ratio-t.max) <= noise*t.max {
				met = "within noise"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s %s | %s | %s | %s | %s |\n", t.label, num(ours), t.peer, num(peer), num(ratio), num(aa), tgt, met)
	}

	// Nothing lost, in any run of any side.
	fmt.Fprintln(w)
	var lossy []string
	for _, sc := range sortedKeys(runs) {
		for _, side := range sortedKeys(runs[sc]) {
			for i, r := range runs[sc][side] {
				for _, k := range []string{"lost", "duplicates", "dropped_conns", "dropped_during_hold", "dial_failures", "subscribe_failures", "connect_failures"} {
					if r[k] > 0 {
						lossy = append(lossy, fmt.Sprintf("%s/%s run %d: %s=%g", sc, side, i+1, k, r[k]))
					}
				}
			}
		}
	}
	if len(lossy) == 0 {
		fmt.Fprintln(w, "Nothing lost, duplicated or dropped in any run.")
	} else {
		fmt.Fprintln(w, "Losses: "+strings.Join(lossy, "; "))
	}

	if len(runs["paced100"]["nbio"]) > 0 || len(runs["memory"]["nbio"]) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| nbio (bench/nbioserver) vs reverbgo | reverbgo | nbio | nbio / reverbgo | A/A |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, r := range nbioRows {
			ours := med(r.scenario, "reverbgo", r.metric)
			nb := med(r.scenario, "nbio", r.metric)
			aa := med(r.scenario, "reverbgo-aa", r.metric) / ours
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.label, num(ours), num(nb), num(nb/ours), num(aa))
		}
	}

	fmt.Fprintln(w)
	fmt.Fprint(w, "Runs per side:")
	for _, sc := range sortedKeys(runs) {
		fmt.Fprintf(w, " %s", sc)
		for _, side := range sortedKeys(runs[sc]) {
			fmt.Fprintf(w, " %s=%d", side, len(runs[sc][side]))
		}
		fmt.Fprint(w, ";")
	}
	fmt.Fprintln(w)
	return nil
}

func verdict(known, ok bool) string {
	switch {
	case !known:
		return "–"
	case ok:
		return "yes"
	default:
		return "no"
	}
}

// readRuns parses every JSON object line of p into its numeric fields.
func readRuns(p string) ([]map[string]float64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []map[string]float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			return nil, fmt.Errorf("%s: %v", p, err)
		}
		row := map[string]float64{}
		for k, v := range raw {
			if x, ok := v.(float64); ok {
				row[k] = x
			}
		}
		out = append(out, row)
	}
	return out, sc.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func num(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "–"
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
