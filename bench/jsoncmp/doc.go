// Package jsoncmp benchmarks reverbgo's hand-written JSON fast paths against libraries.
package jsoncmp
