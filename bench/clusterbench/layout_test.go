package main

import "testing"

// With subscriber i on node i%N of channel i%C, a publish is delivered on its own node when
// its channel's subscriber sits there. The spread layout must publish every channel through
// every node and keep the publishing nodes evenly loaded; local keeps publish m on node m%N.
func TestPubNodeLayouts(t *testing.T) {
	for _, tc := range []struct {
		name         string
		c, n         int
		spread       bool
		wantLocalPct int // share of publishes through the node of the channel's subscriber
	}{
		{"spread F=1 3000 channels 3 nodes", 3000, 3, true, 33},
		{"spread 30 channels 3 nodes", 30, 3, true, 33},
		{"spread 29 channels 3 nodes", 29, 3, true, 33},
		{"spread 31 channels 3 nodes", 31, 3, true, 33},
		{"spread 7 channels 2 nodes", 7, 2, true, 50},
		{"local 3000 channels 3 nodes", 3000, 3, false, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			total := tc.c * tc.n * 20
			perNode := make([]int, tc.n)
			seen := make([]map[int]bool, tc.c)
			local := 0
			for id := int64(1_000_003); id < int64(1_000_003+total); id++ {
				node := pubNode(id, tc.c, tc.n, tc.spread)
				if node < 0 || node >= tc.n {
					t.Fatalf("pubNode(%d) = %d, want [0,%d)", id, node, tc.n)
				}
				perNode[node]++
				ch := int(id % int64(tc.c))
				if seen[ch] == nil {
					seen[ch] = map[int]bool{}
				}
				seen[ch][node] = true
				if node == ch%tc.n { // subscriber ch is on node ch%N
					local++
				}
			}
			for i, p := range perNode {
				if d := p - total/tc.n; d < -total/100 || d > total/100 {
					t.Errorf("node %d took %d of %d publishes, want about %d", i, p, total, total/tc.n)
				}
			}
			if pct := local * 100 / total; pct < tc.wantLocalPct-1 || pct > tc.wantLocalPct+1 {
				t.Errorf("%d %% of publishes through the subscriber's node, want %d %%", pct, tc.wantLocalPct)
			}
			if tc.spread {
				for ch, nodes := range seen {
					if len(nodes) != tc.n {
						t.Fatalf("channel %d published through %d of %d nodes", ch, len(nodes), tc.n)
					}
				}
			}
		})
	}
}
