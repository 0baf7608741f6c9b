// Command clusterbench finds the knee of a reverbgo cluster: the highest sustained rate of
// HTTP API publishes, spread round-robin over every node, that subscribers on every node
// receive with p99 delivery latency under --p99-ms and nothing lost.
//
// It opens --subs WebSocket subscribers spread over the nodes (subscriber i on node i%N,
// channel bench-<nonce>-<i%C>), then offers each rate of --rates for --step: publish m goes
// to channel c = m%C through a node chosen by --layout (spread: the k-th publish of a channel
// through node (c+k)%N, so every channel is published through every node and 1 in N
// deliveries is local, as behind a load balancer; local: node m%N, which is the node of the
// channel's subscribers whenever C is a multiple of N) as a signed POST /apps/{id}/events whose data carries
// "cbx:<nonce>:<m>:<send_ns>" (one monotonic clock in this process). After each step it
// waits --drain for stragglers and reports offered and achieved publishes/s, deliveries/s,
// latency percentiles (every delivery, nearest rank), lost (expected from the subscriber
// count of each publish answered 200), duplicates and HTTP errors. The knee is the highest
// step that met the bounds; the run stops at the first step that does not.
//
//	clusterbench --ports 16411,16412,16413 --app-id bench --key bench-key --secret bench-secret \
//	    --subs 300 --channels 30 --rates 500,1000,2000,5000,10000,20000 --step 10s
//
// Loopback only. Readable lines first, then one JSON summary as the last line. Exit status:
// 0 ok (a knee was found), 1 could not run, 2 no step met the bounds.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

type step struct {
	Offered       int     `json:"offered_per_s"`
	Published     int     `json:"published"`
	PublishPerS   float64 `json:"publishes_per_s"`
	Deliveries    int64   `json:"deliveries"`
	DeliveryPerS  float64 `json:"deliveries_per_s"`
	P50MS         float64 `json:"p50_ms"`
	P99MS         float64 `json:"p99_ms"`
	MaxMS         float64 `json:"max_ms"`
	Lost          int64   `json:"lost"`
	Duplicates    int64   `json:"duplicates"`
	HTTPErrors    int64   `json:"http_errors"`
	ScheduleLagMS float64 `json:"max_schedule_lag_ms"`
	// The HTTP API's answer time of each publish answered 200 (request sent to response read).
	APIP50MS float64 `json:"api_p50_ms"`
	APIP99MS float64 `json:"api_p99_ms"`
	OK       bool    `json:"ok"`
	// Cost of the step (measure.go), per publish answered 200: each node's CPU (in --pids
	// order) and Redis's commands and bytes (all --redis-addrs together).
	Answered                int64     `json:"answered"`
	NodeCPUUSPerPublish     []float64 `json:"node_cpu_us_per_publish,omitempty"`
	RedisCommandsPerPublish float64   `json:"redis_commands_per_publish,omitempty"`
	RedisBytesInPerPublish  float64   `json:"redis_bytes_in_per_publish,omitempty"`
	RedisBytesOutPerPublish float64   `json:"redis_bytes_out_per_publish,omitempty"`
	// PUBLISH, SPUBLISH and EVALSHA calls per publish (measure.go's sentCommands).
	RedisCallsPerPublish map[string]float64 `json:"redis_calls_per_publish,omitempty"`
}

type delivery struct {
	sub int
	id  int64
}

type bench struct {
	host, appID, key, secret, nonce string
	ports                           []int
	subNodes, pubNodes              []int // indexes into ports (default: every node)
	spread                          bool  // --layout spread
	channels                        int
	subsPerChannel                  []int
	start                           time.Time
	client                          *http.Client

	mu        sync.Mutex
	latencies []time.Duration
	apiTimes  []time.Duration       // answer time of each publish answered 200
	seen      map[delivery]struct{} // (subscriber, publish id) pairs received
	dups      int64
	expected  atomic.Int64
	errors    atomic.Int64
	answered  atomic.Int64
}

func main() {
	os.Exit(run())
}

func run() int {
	host := flag.String("host", "127.0.0.1", "nodes' host (loopback only)")
	portsFlag := flag.String("ports", "16411,16412,16413", "comma-separated node ports")
	appID := flag.String("app-id", "bench", "app id")
	key := flag.String("key", "bench-key", "app key")
	secret := flag.String("secret", "bench-secret", "app secret")
	subs := flag.Int("subs", 300, "subscribers, spread over the nodes")
	chans := flag.Int("channels", 30, "channels (subscriber i joins channel i%C)")
	ratesFlag := flag.String("rates", "500,1000,2000,5000,10000,20000", "publishes/s per step, ascending")
	stepDur := flag.Duration("step", 10*time.Second, "duration of each step")
	drain := flag.Duration("drain", 2*time.Second, "wait after each step for late deliveries")
	warmup := flag.Duration("warmup", 5*time.Second, "an unjudged step at the first rate before the judged ones (0: none): the first seconds after the subscribers connected carry the nodes' start-up work")
	p99 := flag.Float64("p99-ms", 100, "p99 delivery latency bound")
	workers := flag.Int("concurrency", 256, "HTTP requests in flight at most")
	timeout := flag.Duration("timeout", 10*time.Minute, "hard limit for the whole run")
	subNodes := flag.String("sub-nodes", "", "indexes (into --ports) of the nodes that hold subscribers (default every node)")
	pubNodes := flag.String("pub-nodes", "", "indexes of the nodes publishes go through (default every node)")
	layout := flag.String("layout", "spread", "which node a publish goes through: spread (each channel through every node in turn) or local (publish m through node m%N)")
	pidsFlag := flag.String("pids", "", "the nodes' process ids, in --ports order: each step reports their CPU per publish")
	redisAddrs := flag.String("redis-addrs", "", "Redis addresses (every master) whose commands and bytes per publish each step reports")
	flag.Parse()

	if ip := net.ParseIP(*host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintln(os.Stderr, "clusterbench: --host must be a loopback address")
		return 1
	}
	var ports []int
	for _, p := range strings.Split(*portsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 65535 {
			fmt.Fprintln(os.Stderr, "clusterbench: bad port", p)
			return 1
		}
		ports = append(ports, n)
	}
	subIdx, err1 := indexes(*subNodes, len(ports))
	pubIdx, err2 := indexes(*pubNodes, len(ports))
	pids, err3 := indexes(*pidsFlag, 1<<30)
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		return 1
	}
	if *layout != "spread" && *layout != "local" {
		fmt.Fprintln(os.Stderr, "clusterbench: --layout must be spread or local")
		return 1
	}
	var addrs []string
	if *redisAddrs != "" {
		addrs = strings.Split(*redisAddrs, ",")
	}
	var rates []int
	for _, r := range strings.Split(*ratesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "clusterbench: bad rate", r)
			return 1
		}
		rates = append(rates, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	b := &bench{
		host: *host, appID: *appID, key: *key, secret: *secret, ports: ports, channels: *chans, subNodes: subIdx, pubNodes: pubIdx, spread: *layout == "spread",
		nonce: strconv.FormatInt(time.Now().UnixNano()%1e9, 36), start: time.Now(), seen: map[delivery]struct{}{},
		subsPerChannel: make([]int, *chans),
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: *workers, MaxConnsPerHost: *workers, IdleConnTimeout: time.Minute,
		}},
	}
	conns, err := b.subscribe(ctx, *subs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		return 1
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	fmt.Printf("clusterbench: %d subscribers on %d nodes, %d channels\n", *subs, len(ports), *chans)
	var steps []step
	knee := 0
	m := newMeter(pids, addrs)
	if *warmup > 0 {
		w := b.step(ctx, rates[0], *warmup, *drain, *workers)
		fmt.Printf("warm-up %6d/s for %v (not judged): p99 %.1f ms, api p99 %.2f ms, lost %d\n", rates[0], *warmup, w.P99MS, w.APIP99MS, w.Lost)
	}
	for _, rate := range rates {
		if ctx.Err() != nil {
			break
		}
		m.begin(ctx)
		s := b.step(ctx, rate, *stepDur, *drain, *workers)
		m.end(ctx, &s)
		s.OK = s.Lost == 0 && s.Duplicates == 0 && s.HTTPErrors == 0 && s.P99MS <= *p99 && s.PublishPerS >= 0.95*float64(rate)
		steps = append(steps, s)
		fmt.Printf("rate %6d/s: published %.0f/s, deliveries %.0f/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, api p50 %.2f ms, api p99 %.2f ms, lost %d, dup %d, http errors %d, lag %.1f ms -> %v\n",
			rate, s.PublishPerS, s.DeliveryPerS, s.P50MS, s.P99MS, s.MaxMS, s.APIP50MS, s.APIP99MS, s.Lost, s.Duplicates, s.HTTPErrors, s.ScheduleLagMS, s.OK)
		if !s.OK {
			break
		}
		knee = rate
	}
	out, _ := json.Marshal(map[string]any{"knee_publishes_per_s": knee, "layout": *layout, "nodes": len(ports), "subscribers": *subs, "channels": *chans, "p99_bound_ms": *p99, "steps": steps})
	fmt.Println(string(out))
	if knee == 0 {
		return 2
	}
	return 0
}

// subscribe opens n subscribers round-robin over the nodes and waits for every
// subscription_succeeded; each gets a reader goroutine.
func (b *bench) subscribe(ctx context.Context, n int) ([]*pusherclient.Conn, error) {
	conns := make([]*pusherclient.Conn, 0, n)
	for i := range n {
		port := b.ports[b.subNodes[i%len(b.subNodes)]]
		c, err := pusherclient.DialWith(ctx, net.JoinHostPort(b.host, strconv.Itoa(port)), b.key,
			pusherclient.Options{Client: "clusterbench", Version: "1", Timeout: 10 * time.Second})
		if err != nil {
			return conns, fmt.Errorf("subscriber %d on port %d: %w", i, port, err)
		}
		conns = append(conns, c)
		ch := i % b.channels
		b.subsPerChannel[ch]++
		if _, err := c.Subscribe(b.app(), b.channel(ch), ""); err != nil {
			return conns, fmt.Errorf("subscriber %d: %w", i, err)
		}
		go b.read(c, i)
	}
	return conns, nil
}

func (b *bench) app() pusherclient.App {
	return pusherclient.App{ID: b.appID, Key: b.key, Secret: b.secret}
}

func (b *bench) channel(i int) string { return "bench-" + b.nonce + "-" + strconv.Itoa(i) }

var marker = []byte("cbx:")

// read records every delivery's latency from the marker's send time.
func (b *bench) read(c *pusherclient.Conn, sub int) {
	for {
		_, msg, err := c.WS.ReadMessage()
		if err != nil {
			return
		}
		now := time.Since(b.start)
		i := bytes.Index(msg, marker)
		if i < 0 {
			if bytes.Contains(msg, []byte("pusher:ping")) {
				_ = c.Pong()
			}
			continue
		}
		f := bytes.SplitN(msg[i+len(marker):], []byte(":"), 3)
		if len(f) < 3 || string(f[0]) != b.nonce {
			continue
		}
		id, _ := strconv.ParseInt(string(f[1]), 10, 64)
		end := bytes.IndexAny(f[2], `\"`)
		if end < 0 {
			end = len(f[2])
		}
		sent, _ := strconv.ParseInt(string(f[2][:end]), 10, 64)
		k := delivery{sub, id}
		b.mu.Lock()
		if _, dup := b.seen[k]; dup {
			b.dups++
		} else {
			b.seen[k] = struct{}{}
			b.latencies = append(b.latencies, now-time.Duration(sent))
		}
		b.mu.Unlock()
	}
}

// step offers rate publishes/s for d, then waits drain, and measures.
func (b *bench) step(ctx context.Context, rate int, d, drain time.Duration, workers int) step {
	b.mu.Lock()
	b.latencies = b.latencies[:0]
	b.apiTimes = b.apiTimes[:0]
	clear(b.seen)
	b.dups = 0
	b.mu.Unlock()
	b.expected.Store(0)
	b.errors.Store(0)
	b.answered.Store(0)
	jobs := make(chan int64, workers*4)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range jobs {
				b.publish(ctx, id)
			}
		}()
	}
	total := int64(float64(rate) * d.Seconds())
	t0 := time.Now()
	var lag time.Duration
	base := time.Since(b.start).Nanoseconds() // ids unique across steps
	for m := int64(0); m < total && ctx.Err() == nil; m++ {
		due := t0.Add(time.Duration(float64(m) * float64(time.Second) / float64(rate)))
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		} else if -w > lag {
			lag = -w
		}
		jobs <- base + m
	}
	close(jobs)
	wg.Wait()
	sendDur := time.Since(t0)
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		got := int64(len(b.latencies))
		b.mu.Unlock()
		if got >= b.expected.Load() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lat := slices.Clone(b.latencies)
	slices.Sort(lat)
	dup := b.dups
	got := int64(len(lat))
	s := step{
		Offered: rate, Published: int(total), PublishPerS: float64(total) / sendDur.Seconds(),
		Deliveries: got, DeliveryPerS: float64(got) / time.Since(t0).Seconds(),
		Lost: max(0, b.expected.Load()-got), Duplicates: dup, HTTPErrors: b.errors.Load(),
		ScheduleLagMS: float64(lag.Microseconds()) / 1000, Answered: b.answered.Load(),
	}
	if len(lat) > 0 {
		s.P50MS = ms(lat[(len(lat)-1)*50/100])
		s.P99MS = ms(lat[(len(lat)-1)*99/100])
		s.MaxMS = ms(lat[len(lat)-1])
	}
	if api := slices.Sorted(slices.Values(b.apiTimes)); len(api) > 0 {
		s.APIP50MS = ms(api[(len(api)-1)*50/100])
		s.APIP99MS = ms(api[(len(api)-1)*99/100])
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// publish sends publish id to channel id%C through one of the --pub-nodes (pubNode).
func (b *bench) publish(ctx context.Context, id int64) {
	ch := int(id % int64(b.channels))
	port := b.ports[b.pubNodes[pubNode(id, b.channels, len(b.pubNodes), b.spread)]]
	data := fmt.Sprintf("cbx:%s:%d:%d", b.nonce, id, time.Since(b.start).Nanoseconds())
	body, _ := json.Marshal(map[string]any{"name": "bench", "channel": b.channel(ch), "data": data})
	req, err := pusherclient.NewRequest(ctx, net.JoinHostPort(b.host, strconv.Itoa(port)), b.app(), http.MethodPost, "/apps/"+b.appID+"/events", url.Values{}, body)
	if err != nil {
		b.errors.Add(1)
		return
	}
	sent := time.Now()
	res, err := b.client.Do(req)
	if err != nil {
		b.errors.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.errors.Add(1)
		return
	}
	took := time.Since(sent)
	b.expected.Add(int64(b.subsPerChannel[ch]))
	b.answered.Add(1)
	b.mu.Lock()
	b.apiTimes = append(b.apiTimes, took)
	b.mu.Unlock()
}

// pubNode is the index (of n publishing nodes) publish id to channel id%c goes through:
// spread sends the k-th publish of a channel (k = id/c) through node (id%c + k)%n, so each
// channel is published through every node in turn whatever c and n are; otherwise id%n.
func pubNode(id int64, c, n int, spread bool) int {
	if !spread {
		return int(id % int64(n))
	}
	return int((id%int64(c) + id/int64(c)) % int64(n))
}

// indexes parses a comma-separated list of integers in [0, n) ("" = 0..n-1).
func indexes(s string, n int) ([]int, error) {
	if s == "" {
		if n >= 1<<30 {
			return nil, nil
		}
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v >= n {
			return nil, fmt.Errorf("bad index %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}
