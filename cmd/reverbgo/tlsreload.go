package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// certReloader serves the certificate of server.tls.cert/key through
// tls.Config.GetCertificate and swaps it atomically on reload (SIGHUP): handshakes from then
// on use the new pair, established connections keep theirs, and nothing is dropped.
type certReloader struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// reload reads both files again. A pair that does not load (missing file, mismatched key,
// half-written PEM) leaves the current certificate in place and returns the error.
func (r *certReloader) reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("server.tls: loading %s and %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&c)
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// tlsConfig is the listener's TLS configuration: Go's defaults (as ServeTLS with the files
// had) except that the certificate comes from the reloader.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.getCertificate}
}

// onSIGHUP reloads and logs the outcome.
func (r *certReloader) onSIGHUP(logger *slog.Logger) {
	if err := r.reload(); err != nil {
		logger.Error("TLS certificate reload failed; keeping the previous certificate", "error", err)
		return
	}
	var notAfter any
	if c := r.cert.Load(); c.Leaf != nil {
		notAfter = c.Leaf.NotAfter
	}
	logger.Info("TLS certificate reloaded", "cert", r.certFile, "not_after", notAfter)
}
