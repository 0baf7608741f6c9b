package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write puts one JSON summary line per run into dir/scenario/side.jsonl.
func write(t *testing.T, dir, scenario, side string, lines ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, scenario), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, scenario, side+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTable(t *testing.T) {
	dir := t.TempDir()
	// paced100: reverbgo median 2.0 (runs 1, 2, 9), soketi 5.0, rawserver 2.0: 0.4× soketi (met),
	// 1.0× rawserver (not met); A/A 2.1/2.0 = 1.05.
	write(t, dir, "paced100", "reverbgo", `{"server_cpu_us_per_delivery":1,"p99_ms":3,"p50_ms":1}`, `{"server_cpu_us_per_delivery":2,"p99_ms":3,"p50_ms":1}`, `{"server_cpu_us_per_delivery":9,"p99_ms":3,"p50_ms":1}`)
	write(t, dir, "paced100", "reverbgo-aa", `{"server_cpu_us_per_delivery":2.1,"p99_ms":3,"p50_ms":1}`)
	write(t, dir, "paced100", "soketi", `{"server_cpu_us_per_delivery":5,"p99_ms":2,"p50_ms":1}`)
	write(t, dir, "paced100", "rawserver", `not json`, `{"server_cpu_us_per_delivery":2,"p99_ms":1,"p50_ms":1,"lost":3}`)
	var out strings.Builder
	if err := run(dir, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"| paced 100 ev/s × 1,000: CPU/delivery | 2 | soketi 5 | 0.4 | 1.05 | ≤ 0.7× soketi | yes |",
		"| paced 100 ev/s: CPU/delivery | 2 | rawserver 2 | 1 | 1.05 | ≤ 0.9× rawserver | no |",
		"| paced 100 ev/s: p99 latency | 3 | soketi 2 | 1.5 | 1 | ≤ 1× soketi | no |",
		"| paced 100 ev/s: p50 latency (ms, absolute) | 1 | – | – | 1 | ≤ 5 | yes |",
		"| paced 20 ev/s × 1,000: CPU/delivery | – | rawserver – | – | – | ≤ 1× rawserver | – |",
		"Losses: paced100/rawserver run 1: lost=3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// A ratio closer to its target than the A/A noise is no claim either way.
func TestWithinNoise(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "clientevents", "reverbgo", `{"server_cpu_us_per_delivery":7.6}`)
	write(t, dir, "clientevents", "reverbgo-aa", `{"server_cpu_us_per_delivery":8.4}`)
	write(t, dir, "clientevents", "soketi", `{"server_cpu_us_per_delivery":10}`)
	var out strings.Builder
	if err := run(dir, &out); err != nil {
		t.Fatal(err)
	}
	if want := "| client events 10 → 1,000: CPU/delivery | 7.6 | soketi 10 | 0.76 | 1.11 | ≤ 0.75× soketi | within noise |"; !strings.Contains(out.String(), want) {
		t.Errorf("missing %q in\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "Nothing lost") {
		t.Errorf("no loss line:\n%s", out.String())
	}
}
