//go:build !linux

package ws

import "testing"

func requireURing(t testing.TB) { t.Helper(); t.Skip("io_uring is Linux only") }
