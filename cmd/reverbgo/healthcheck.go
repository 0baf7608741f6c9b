package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// runHealthcheck is "reverbgo healthcheck [--config PATH]": exit 0 when GET {path}/up of the
// configured server answers 200, 1 otherwise. The distroless image has no curl, so this is
// what the Dockerfile's HEALTHCHECK runs.
func runHealthcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (default ./config.yaml)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: config:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	body, err := checkUp(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: healthcheck:", err)
		return 1
	}
	fmt.Fprintln(stdout, body)
	return 0
}

// upURL is where the server of cfg answers /up from this machine: a wildcard listen host
// is reached on loopback.
func upURL(cfg *config.Config) string {
	host := cfg.Server.Host
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	scheme := "http"
	if tlsEnabled(cfg) {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(cfg.Server.Port)) + cfg.Server.Path + "/up"
}

func tlsEnabled(cfg *config.Config) bool {
	return cfg.Server.TLS.Cert != "" && cfg.Server.TLS.Key != ""
}

func checkUp(ctx context.Context, cfg *config.Config) (string, error) {
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if tlsEnabled(cfg) {
		tc, err := pinnedTLS(cfg.Server.TLS.Cert)
		if err != nil {
			return "", err
		}
		tr.TLSClientConfig = tc
	}
	client := &http.Client{Transport: tr}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, upURL(cfg), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %d: %s", req.URL, resp.StatusCode, bytes.TrimSpace(b))
	}
	return string(bytes.TrimSpace(b)), nil
}

// pinnedTLS accepts exactly the certificate in the configured file: the server's name
// (often a public host name) rarely matches 127.0.0.1, and its CA may not be in this
// image's trust store, but what matters is that our own server answers.
func pinnedTLS(certFile string) (*tls.Config, error) {
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls.cert: %w", err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("server.tls.cert: no PEM certificate in " + certFile)
	}
	want, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("server.tls.cert: %w", err)
	}
	return &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 && bytes.Equal(raw[0], want.Raw) {
				return nil
			}
			return errors.New("the server does not present the certificate in server.tls.cert")
		},
	}, nil
}
