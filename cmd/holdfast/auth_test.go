package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesUnsignedHoldersOnAPublicAddress: serve on an address that is not
// loopback (":0": every interface) without signed holders refuses to start, naming the
// two ways out; with --trusted-holder-header (a backend in front sets Holder-Id) or a
// holder key it serves. Such a server would hand anyone who knew a holder id that
// holder's bookings and holds, and let them cancel them.
func TestServeRefusesUnsignedHoldersOnAPublicAddress(t *testing.T) {
	t.Parallel()
	const opToken = "operator-token-0123456789"
	vars := migratedEnv(t, map[string]string{"HOLDFAST_OPERATOR_TOKEN": opToken})
	base, admin, _, err := tryServe(t, vars, "--addr", ":0")
	if err == nil {
		t.Fatalf("serve on %s without signed holders started: %s", base, attackByHolderID(t, onLoopback(t, base), admin, opToken))
	}
	msg := err.Error()
	if exitCode(err) != exitUsage {
		t.Fatalf("refused with exit %d, want %d (configuration): %v", exitCode(err), exitUsage, err)
	}
	for _, want := range []string{`--addr ":0"`, "--holder-jwt-secret-file", "--holder-jwt-key", "--trusted-holder-header"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the refusal does not name %s: %s", want, msg)
		}
	}

	// The two ways out.
	base, _, _ = startServe(t, vars, "--addr", ":0", "--trusted-holder-header")
	if st := get(t, onLoopback(t, base)+"/v1/holders/me/bookings", http.Header{"Holder-Id": {"alice"}}); st != 200 {
		t.Fatalf("with --trusted-holder-header, a read by Holder-Id: %d", st)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ = startServe(t, vars, "--addr", ":0", "--holder-jwt-secret-file", secret)
	if st := get(t, onLoopback(t, base)+"/v1/holders/me/bookings", http.Header{"Holder-Id": {"alice"}}); st != 401 {
		t.Fatalf("with signed holders, a read by Holder-Id alone: %d", st)
	}
	// Both at once contradict each other; on loopback neither is needed.
	if _, _, _, err := tryServe(t, vars, "--trusted-holder-header", "--holder-jwt-secret-file", secret); exitCode(err) != exitUsage {
		t.Fatalf("--trusted-holder-header with --holder-jwt-secret-file: %v, want a usage error", err)
	}
	startServe(t, vars, "--addr", "127.0.7.5:0")
}

// TestLoopbackAddress: a listen address is loopback when its host is a loopback IP or
// "localhost"; an empty host is every interface.
func TestLoopbackAddress(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.7.66:0": true, "[::1]:8080": true, "localhost:8080": true, "[::ffff:127.0.0.1]:80": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.5:8080": false, "example.com:80": false,
		"localhost.example.com:80": false, "[fe80::1%eth0]:80": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

// onLoopback turns a listener's address on every interface (http://[::]:PORT) into one
// this machine reaches it on.
func onLoopback(t *testing.T, base string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return "http://127.0.0.1:" + port
}

func get(t *testing.T, url string, h http.Header) int {
	t.Helper()
	st, _ := send(t, "GET", url, h, "")
	return st
}

func send(t *testing.T, method, url string, h http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, m
}

// attackByHolderID is the review's attack on an unsigned server: alice books a seat;
// anyone who names her lists her bookings and cancels one.
func attackByHolderID(t *testing.T, base, admin, opToken string) string {
	t.Helper()
	if st, m := send(t, "PUT", admin+"/v1/shows/gala", http.Header{"Authorization": {"Bearer " + opToken}}, `{"seats":["A1","A2"]}`); st != 201 {
		t.Fatalf("create a show: %d %v", st, m)
	}
	alice := http.Header{"Holder-Id": {"alice"}}
	_, hold := send(t, "POST", base+"/v1/shows/gala/holds", alice, `{"seats":["A1"]}`)
	body, _ := json.Marshal(hold)
	if st, m := send(t, "POST", base+"/v1/bookings", http.Header{"Holder-Id": {"alice"}, "Idempotency-Key": {"k1"}}, string(body)); st != 201 {
		t.Fatalf("alice's booking: %d %v", st, m)
	}
	st, list := send(t, "GET", base+"/v1/holders/me/bookings", alice, "")
	bookings, _ := list["bookings"].([]any)
	if len(bookings) == 0 {
		return "listing by Holder-Id: " + http.StatusText(st)
	}
	id := bookings[0].(map[string]any)["id"].(string)
	cancelled, _ := send(t, "DELETE", base+"/v1/bookings/"+id, alice, "")
	return fmt.Sprintf("anyone naming alice listed her bookings (%d, %d of them) and cancelled one (%d)", st, len(bookings), cancelled)
}
