package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// A worker process holds --n sockets (these machines cap a process at 20,000 open files,
// so the 100,000 are spread over several), first all on its home node, each subscribed to
// the one broadcast channel. It reports on stdout, one JSON object per line: "ready" once
// every socket is subscribed, a "status" whenever the number subscribed changed (every
// 100 ms at most), and per "mark" event the latencies of its deliveries (µs, from the
// publish's timestamp in its data; one clock: loopback, one machine). A socket whose node
// went away reconnects to the next node of --addrs and subscribes again.

type worker struct {
	addrs      []string
	channel    string
	subscribed atomic.Int64
	errors     atomic.Int64
	reconnects atomic.Int64
	out        *json.Encoder
	omu        sync.Mutex
	// dials bounds the attempts in flight (dial, handshake, subscribe), the first ones and
	// the reconnects after a node died alike. Unbounded, the 16,500 sockets of a killed node
	// dialled at once from this one process: on this 2-core machine the tool itself then
	// spent ~80 % of a core in the kernel, most dials timed out (28,085 failed attempts) and
	// resubscribing took 1m44s (an earlier run: not all in 3 minutes) while the five
	// surviving nodes used 4 s of CPU each: the figure measured the tool, not the servers.
	dials chan struct{}

	mu    sync.Mutex
	marks map[string][]int64 // mark id → delivery latencies (µs)
}

func (w *worker) emit(v any) {
	w.omu.Lock()
	defer w.omu.Unlock()
	_ = w.out.Encode(v)
}

func runWorker(args []string) int {
	fs := newFlags("worker")
	addrs := fs.String("addrs", "", "every node's host:port, comma-separated")
	home := fs.Int("home", 0, "index of the node the sockets connect to first")
	n := fs.Int("n", 15500, "sockets")
	conc := fs.Int("concurrency", 100, "dials in flight")
	channel := fs.String("channel", "all", "channel every socket subscribes to")
	if fs.Parse(args) != nil {
		return 2
	}
	w := &worker{addrs: strings.Split(*addrs, ","), channel: *channel, out: json.NewEncoder(os.Stdout), marks: map[string][]int64{},
		dials: make(chan struct{}, *conc)}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range *n {
		wg.Add(1)
		first := make(chan struct{})
		go w.hold(ctx, *home, first)
		go func() { <-first; wg.Done() }()
	}
	wg.Wait()
	w.emit(map[string]any{"ready": w.subscribed.Load(), "errors": w.errors.Load()})
	go w.report()
	// The driver tells the worker to report a mark's latencies ("flush <id>") on stdin.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "flush "); ok {
			w.mu.Lock()
			lat := w.marks[id]
			delete(w.marks, id)
			w.mu.Unlock()
			w.emit(map[string]any{"mark": id, "lat_us": lat})
		}
	}
	return 0
}

// hold keeps one socket subscribed, starting on node at; first is closed after its first
// attempt (subscribed or not), so the dial concurrency is bounded.
func (w *worker) hold(ctx context.Context, at int, first chan struct{}) {
	once := sync.OnceFunc(func() { close(first) })
	defer once()
	again := false
	for attempt := 0; ; attempt++ {
		addr := w.addrs[(at+attempt)%len(w.addrs)]
		w.dials <- struct{}{}
		// From one of 127.0.0.2-.201 at random (pusherclient.Options.Source: not every socket of the
		// machine on 127.0.0.1's ephemeral range).
		c, err := pusherclient.DialWith(ctx, addr, app.Key, pusherclient.Options{Client: "hundredk", Timeout: 20 * time.Second, Source: net.IPv4(127, 0, 0, byte(2+rand.IntN(200)))})
		if err == nil {
			if _, err = c.Subscribe(app, w.channel, ""); err != nil {
				c.Close()
			}
		}
		<-w.dials
		if err != nil {
			if n := w.errors.Add(1); n <= 20 || n%1000 == 0 {
				// The first failures and every thousandth, with their cause, on stderr (the
				// driver keeps it as workerN.log): a run that does not converge says why.
				fmt.Fprintf(os.Stderr, "%s attempt %d to %s failed (%d so far): %v\n", time.Now().Format("15:04:05.000"), attempt, addr, n, err)
			}
			once()
			// Back off exponentially with full jitter (50 ms doubling to 3.2 s), as clients
			// of a restarting service should, so failed attempts do not come back in step.
			time.Sleep(time.Duration(rand.Int64N(int64(50*time.Millisecond) << min(attempt, 6))))
			continue
		}
		if again {
			w.reconnects.Add(1)
		}
		w.subscribed.Add(1)
		once()
		for {
			f, err := c.Read()
			if err != nil {
				break
			}
			if f.Event == "mark" {
				now := time.Now().UnixNano()
				id, ns, _ := strings.Cut(f.Str(), ":")
				sent, _ := strconv.ParseInt(ns, 10, 64)
				w.mu.Lock()
				w.marks[id] = append(w.marks[id], (now-sent)/1000)
				w.mu.Unlock()
			}
		}
		w.subscribed.Add(-1)
		c.Close()
		// The node went away: start with one of the others, at random (as a load balancer
		// would spread them).
		at = (at + attempt + 1 + rand.IntN(max(len(w.addrs)-1, 1))) % len(w.addrs)
		attempt, again = -1, true
	}
}

// report prints the subscribed count whenever it changed.
func (w *worker) report() {
	last := int64(-1)
	for range time.Tick(100 * time.Millisecond) {
		if s := w.subscribed.Load(); s != last {
			last = s
			w.emit(map[string]any{"status": s, "errors": w.errors.Load(), "reconnects": w.reconnects.Load(), "at_ms": time.Now().UnixMilli()})
		}
	}
}
