package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUsageNeverPrintsSecrets: --help prints flag defaults and a usage error the error,
// with the URLs and tokens set in the environment: no password, no token.
func TestUsageNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{
		"DATABASE_URL":            "postgres://app:pg-Secret-Pass@127.0.0.1:1/x",
		"REDIS_URL":               "redis://:redis-Secret-Pass@127.0.0.1:1/0",
		"HOLDFAST_OPERATOR_TOKEN": "operator-Secret-Token-0123",
		"HOLDFAST_LOG_KEY":        "log-Secret-Key",
	})
	for _, args := range [][]string{{"serve", "--help"}, {"serve", "--bogus"}, {"migrate", "--help"}, {"demo", "--help"},
		{"resync", "--bogus"}, {"bench", "--help"}} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), args, vars, &out, &errOut)
		all := out.String() + errOut.String()
		if err != nil {
			all += err.Error()
		}
		if args[1] == "--help" && !strings.Contains(all, "-database-url") {
			t.Fatalf("%v printed no flags: %q", args, all)
		}
		if args[1] == "--bogus" && (exitCode(err) != exitUsage || !strings.HasPrefix(all, "flag provided but not defined: -bogus\nusage: holdfast "+args[0])) {
			t.Fatalf("%v: want the error first, then the usage line: %q", args, all)
		}
		for _, secret := range []string{"pg-Secret-Pass", "redis-Secret-Pass", "operator-Secret-Token", "log-Secret-Key"} {
			if strings.Contains(all, secret) {
				t.Fatalf("%v printed a secret (%s):\n%s", args, secret, all)
			}
		}
	}
}

// selfSigned writes a certificate and key for 127.0.0.1 and returns the certificate.
func selfSigned(t *testing.T, certFile, keyFile, name string) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	// The key first, then the certificate: a reader between the two writes sees a
	// pair that does not match, and keeps the last good one.
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

// TestServeTLS: with --tls-cert/--tls-key, serve speaks HTTPS and HTTP/2, sends HSTS,
// and serves a renewed certificate without a restart.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := selfSigned(t, certFile, keyFile, "first")
	base, _, _ := startServe(t, migratedEnv(t, nil), "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve with a certificate listens on %s", base)
	}
	get := func() (*http.Response, *x509.Certificate) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(base + "/livez")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, resp.TLS.PeerCertificates[0]
	}
	resp, cert := get()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") == "" {
		t.Fatalf("over TLS: %s %d, HSTS %q", resp.Proto, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"))
	}
	if !cert.Equal(first) {
		t.Fatal("not the configured certificate")
	}
	second := selfSigned(t, certFile, keyFile, "second")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, cert := get(); cert.Equal(second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeSignedHolders: serve with --holder-jwt-secret-file and --demo-show gives the
// page a signed demo identity that holds; a bare Holder-Id is refused; without
// signing, serve warns that it belongs behind a backend.
func TestServeSignedHolders(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := migratedEnv(t, nil)
	base, _, _ := startServe(t, vars, "--holder-jwt-secret-file", secret, "--demo-show", "gala", "--demo-seats", "10")
	post := func(path string, h http.Header, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	status, id := post("/v1/demo/identity", http.Header{}, "")
	if status != 201 || id["token"] == nil {
		t.Fatalf("demo identity: %d %v", status, id)
	}
	if status, m := post("/v1/shows/gala/holds", http.Header{"Holder-Id": {"alice"}}, `{"seats":["R01-001"]}`); status != 401 {
		t.Fatalf("a bare Holder-Id with signing on: %d %v", status, m)
	}
	if status, m := post("/v1/shows/gala/holds", http.Header{"Authorization": {"Bearer " + id["token"].(string)}}, `{"seats":["R01-001"]}`); status != 201 {
		t.Fatalf("a hold with the demo identity: %d %v", status, m)
	}

	var out bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	lw := &lineWriter{lines: make(chan string, 64)}
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, vars, lw, &out)
	}()
	deadline := time.After(20 * time.Second)
	for warned := false; !warned; {
		select {
		case line := <-lw.lines:
			warned = strings.Contains(line, "warning: holder ids are not signed") && strings.Contains(line, "behind a backend")
		case err := <-done:
			t.Fatalf("serve ended: %v", err)
		case <-deadline:
			t.Fatal("serve without signing did not warn")
		}
	}
	cancel()
	<-done
}
