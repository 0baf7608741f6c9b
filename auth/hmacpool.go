package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
)

// maxPooledSecrets bounds the secrets that get a pool of keyed HMACs (a deployment has a few
// apps; beyond the bound each use keys a fresh HMAC, as before).
const maxPooledSecrets = 1024

// hmacPools holds, per secret, HMAC-SHA256 states already keyed with it. Keying costs the
// hmac, two sha256 states and the pads (~6 allocations) on every signed request and every
// signature; a pooled one is Reset to its keyed state after use instead. The secrets are
// the server's own (app config), never request input.
var hmacPools struct {
	mu sync.RWMutex
	m  map[string]*sync.Pool
}

// keyedMAC is one pooled HMAC state with its own buffers: hash.Hash is an interface, so a
// message or sum slice handed to it escapes; copying through these keeps the callers'
// stack buffers on the stack.
type keyedMAC struct {
	h   hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// keyedHMAC returns an HMAC-SHA256 keyed with secret, ready to write, and the pool to give
// it back to with releaseHMAC (nil when the secret has none).
func keyedHMAC(secret string) (*keyedMAC, *sync.Pool) {
	hmacPools.mu.RLock()
	p := hmacPools.m[secret]
	hmacPools.mu.RUnlock()
	if p == nil {
		hmacPools.mu.Lock()
		if p = hmacPools.m[secret]; p == nil && len(hmacPools.m) < maxPooledSecrets {
			if hmacPools.m == nil {
				hmacPools.m = map[string]*sync.Pool{}
			}
			key := []byte(secret)
			p = &sync.Pool{New: func() any { return &keyedMAC{h: hmac.New(sha256.New, key)} }}
			hmacPools.m[secret] = p
		}
		hmacPools.mu.Unlock()
		if p == nil {
			return &keyedMAC{h: hmac.New(sha256.New, []byte(secret))}, nil
		}
	}
	return p.Get().(*keyedMAC), p
}

// maxPooledMsg bounds the message buffer a pooled state keeps.
const maxPooledMsg = 4096

// hmacSum writes HMAC-SHA256(secret, msg) into sum.
func hmacSum(secret string, msg []byte, sum *[sha256.Size]byte) {
	m, p := keyedHMAC(secret)
	m.msg = append(m.msg[:0], msg...)
	m.h.Write(m.msg)
	m.h.Sum(m.sum[:0])
	*sum = m.sum
	if p != nil {
		m.h.Reset()
		if cap(m.msg) > maxPooledMsg {
			m.msg = nil
		}
		p.Put(m)
	}
}
