#!/usr/bin/env python3
"""Run-queue waits of a Go runtime trace, and how many of the long ones fall in GC mark phases.

    go tool trace -d=parsed server-lat1s.trace > parsed.txt
    python3 bench/bridgebench/tracewaits.py parsed.txt

Pairs every goroutine's Runnable->Running transition with the Runnable before it (the wait on
the run queue), reports their distribution, the GC concurrent mark phases, the share of waits
over 1 ms that overlap one, the longest run slices (a GC worker's slices on a single P delay
every goroutine behind it), and for the long waits outside GC how busy the P was meanwhile (a
mostly idle P means the OS did not run the thread: other load on the machine).
"""
import bisect
import re
import sys

EV = re.compile(r'^M=\S+ P=(\S+) G=(\S+) (\w+) Time=(\d+)(.*)$')
ST = re.compile(r'GoID=(\d+) (\w+)->(\w+)')


def main(path):
    runnable, running = {}, {}
    waits, slices, gc = [], [], []
    gc_open = None
    for line in open(path):
        m = EV.match(line)
        if not m:
            continue
        _, _, kind, t, rest = m.groups()
        t = int(t)
        if kind == 'RangeBegin' and 'GC concurrent mark' in rest:
            gc_open = t
        elif kind == 'RangeEnd' and 'GC concurrent mark' in rest and gc_open is not None:
            gc.append((gc_open, t))
            gc_open = None
        if kind != 'StateTransition':
            continue
        s = ST.search(rest)
        if not s:
            continue
        gid, a, b = s.groups()
        if b == 'Runnable':
            runnable[gid] = t
        if a == 'Runnable' and b == 'Running' and gid in runnable:
            waits.append((t - runnable.pop(gid), t))
        if b == 'Running':
            running[gid] = t
        if a == 'Running' and gid in running:
            start = running.pop(gid)
            slices.append((start, t, gid))
    if not waits:
        sys.exit('no goroutine transitions in ' + path)
    d = sorted(w for w, _ in waits)
    q = lambda f: d[min(len(d) - 1, int(len(d) * f))] / 1e3
    print('run-queue waits: n=%d p50=%.0fus p99=%.0fus p99.9=%.0fus max=%.0fus' % (len(d), q(.5), q(.99), q(.999), d[-1] / 1e3))
    in_gc = lambda t: any(a <= t <= b for a, b in gc)
    span = waits[-1][1] - waits[0][1]
    print('GC mark phases: %d, %.1f%% of the trace' % (len(gc), 100 * sum(b - a for a, b in gc) / max(span, 1)))
    big = [(w, t) for w, t in waits if w > 1e6]
    print('waits > 1 ms: %d, during a GC mark phase: %d' % (len(big), sum(in_gc(t) for _, t in big)))
    print('longest run slices (goroutine, ms, in GC):')
    for a, b, gid in sorted(slices, key=lambda s: s[0] - s[1])[:8]:
        print('  g%s %.2f %s' % (gid, (b - a) / 1e6, in_gc(b)))
    runs = sorted((a, b) for a, b, _ in slices)
    starts = [a for a, _ in runs]

    def busy(a, b):
        n, i = 0, bisect.bisect_left(starts, a - 50_000_000)
        for x, y in runs[i:]:
            if x > b:
                break
            n += max(0, min(b, y) - max(a, x))
        return n

    out = sorted(busy(t - w, t) / w for w, t in big if not in_gc(t))
    if out:
        print('outside GC: P busy during the wait: p10=%.2f p50=%.2f p90=%.2f' % (
            out[len(out) // 10], out[len(out) // 2], out[9 * len(out) // 10]))


if __name__ == '__main__':
    main(sys.argv[1])
