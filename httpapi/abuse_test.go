package httpapi

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/netutil"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// The attacks of docs/RELIABILITY.md ("Abuse"), one test per row, each over HTTP
// against real services.

// loopback trusts the test client (127.0.0.1) as a proxy, so that X-Forwarded-For
// plays many client addresses.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func from(addr string, h http.Header) http.Header {
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Forwarded-For", addr)
	return h
}

// writeSecret writes an HS256 secret file and returns its path.
func writeSecret(t *testing.T) (string, []byte) {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret := []byte(hex.EncodeToString(b))
	path := filepath.Join(t.TempDir(), "holder.secret")
	if err := os.WriteFile(path, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSignedHolders: with signing on, the holder is the token's sub; no token, a bad
// signature, another algorithm (none, HS256 with the public key), no exp, an expired
// token are 401; a Holder-Id that differs from sub is 400; the per-holder cap then
// binds one identity (the hoarding attack: fresh ids need fresh tokens).
func TestSignedHolders(t *testing.T) {
	t.Parallel()
	path, secret := writeSecret(t)
	auth, err := HolderSecretFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxSeatsPerHolder: 4}, Options{HolderAuth: auth})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(40)}), 201, "")
	exp := time.Now().Add(time.Hour).Unix()
	alice := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": exp})
	hold := func(h http.Header, seat string) reply {
		return a.doHeaders("POST", "/v1/shows/s/holds", h, map[string]any{"seats": []string{seat}})
	}
	r := hold(bearer(alice), "A1")
	a.want(r, 201, "")

	other, _ := writeSecret(t)
	otherSecret, _ := os.ReadFile(other)
	for name, h := range map[string]http.Header{
		"no token":       {},
		"only Holder-Id": {HolderHeader: {"alice"}},
		"not bearer":     {"Authorization": {"Basic " + alice}},
		"other secret":   bearer(sign(t, jwt.SigningMethodHS256, []byte(strings.TrimSpace(string(otherSecret))), jwt.MapClaims{"sub": "alice", "exp": exp})),
		"no exp":         bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice"})),
		"no sub":         bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"exp": exp})),
		"expired":        bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()})),
		"alg none":       bearer(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "alice", "exp": exp})),
		"HS384":          bearer(sign(t, jwt.SigningMethodHS384, secret, jwt.MapClaims{"sub": "alice", "exp": exp})),
		"garbage":        bearer("a.b.c"),
	} {
		r := hold(h, "A2")
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s: %d %s (WWW-Authenticate %q), want 401 with a challenge", name, r.status, r.raw, r.header.Get("WWW-Authenticate"))
		}
	}
	mismatch := bearer(alice)
	mismatch.Set(HolderHeader, "mallory")
	a.want(hold(mismatch, "A2"), 400, "holder-mismatch")
	same := bearer(alice)
	same.Set(HolderHeader, "alice")
	a.want(hold(same, "A2"), 201, "")

	// The hoarding attack, again: one identity holds at most its cap, however it asks.
	held := 2
	for i := 3; i <= 40; i++ {
		r := hold(bearer(alice), fmt.Sprintf("A%d", i))
		if r.status == 201 {
			held++
		} else {
			a.want(r, 409, "holder-limit")
		}
	}
	if held != 4 {
		t.Fatalf("one signed holder held %d seats, its cap is 4", held)
	}
	// A booking is the holder's: another signed holder cannot see it.
	var h holdJSON
	_ = json.Unmarshal([]byte(r.raw), &h)
	bh := bearer(alice)
	bh.Set(IdempotencyHeader, "k1")
	b := a.doHeaders("POST", "/v1/bookings", bh, h)
	a.want(b, 201, "")
	bob := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob", "exp": exp})
	a.want(a.doHeaders("GET", "/v1/bookings/"+b.body["id"].(string), bearer(bob), nil), 404, "not-found")
	a.want(a.doHeaders("GET", "/v1/bookings/"+b.body["id"].(string), bearer(alice), nil), 200, "")
	if strings.Contains(a.logs.String(), alice) {
		t.Fatal("a holder token reached the log")
	}
}

// TestSignedHoldersPublicKeys: RS256, ES256 and EdDSA public keys verify their own
// algorithm only; a token signed with HS256 using the public key's bytes (the
// algorithm-confusion attack) is refused.
func TestSignedHoldersPublicKeys(t *testing.T) {
	t.Parallel()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	rdb := testsvc.Redis(t)
	pool := testsvc.Database(t)
	for _, c := range []struct {
		name   string
		pub    any
		method jwt.SigningMethod
		key    any
	}{
		{"RS256", &rsaKey.PublicKey, jwt.SigningMethodRS256, rsaKey},
		{"ES256", &ecKey.PublicKey, jwt.SigningMethodES256, ecKey},
		{"EdDSA", edPub, jwt.SigningMethodEdDSA, edKey},
	} {
		der, err := x509.MarshalPKIXPublicKey(c.pub)
		if err != nil {
			t.Fatal(err)
		}
		pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		path := filepath.Join(t.TempDir(), "holder.pub")
		if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		auth, err := HolderPublicKeyFile(path, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if auth.CanSign() {
			t.Fatalf("%s: a public key says it can sign", c.name)
		}
		cfg := engine.Config{KeyPrefix: testsvc.KeyPrefix(t)}
		a := newAPIOn(t, pool, rdb, cfg, Options{HolderAuth: auth})
		show := "pk-" + strings.ToLower(c.name)
		a.want(a.do("PUT", "/v1/shows/"+show, "", "", map[string]any{"seats": seats(3)}), 201, "")
		exp := time.Now().Add(time.Hour).Unix()
		good := sign(t, c.method, c.key, jwt.MapClaims{"sub": "carol", "exp": exp})
		a.want(a.doHeaders("POST", "/v1/shows/"+show+"/holds", bearer(good), map[string]any{"seats": []string{"A1"}}), 201, "")
		confused := sign(t, jwt.SigningMethodHS256, pemBytes, jwt.MapClaims{"sub": "carol", "exp": exp})
		a.want(a.doHeaders("POST", "/v1/shows/"+show+"/holds", bearer(confused), map[string]any{"seats": []string{"A2"}}), 401, "unauthorized")
	}
}

// TestHolderKeyRotation: a changed secret file is read again without a restart: old
// tokens stop working, new ones work; a broken file keeps the last good secret.
func TestHolderKeyRotation(t *testing.T) {
	t.Parallel()
	path, secret := writeSecret(t)
	reloadFailed := make(chan error, 10)
	auth, err := HolderSecretFile(path, func(err error) { reloadFailed <- err })
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	old := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "dave", "exp": exp})
	if _, err := auth.Verify(old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Verify until the reload has looked at the broken file (it reports it), then once more.
	deadline := time.Now().Add(10 * time.Second)
	for len(reloadFailed) == 0 {
		if _, err := auth.Verify(old); err != nil {
			t.Fatalf("a broken secret file dropped the last good secret: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken secret file was never reported")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := auth.Verify(old); err != nil {
		t.Fatalf("a broken secret file dropped the last good secret: %v", err)
	}
	fresh := []byte(strings.Repeat("0123456789abcdef", 3))
	if err := os.WriteFile(path, fresh, 0o600); err != nil {
		t.Fatal(err)
	}
	newTok := sign(t, jwt.SigningMethodHS256, fresh, jwt.MapClaims{"sub": "dave", "exp": exp})
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, errOld := auth.Verify(old)
		sub, errNew := auth.Verify(newTok)
		if errOld != nil && errNew == nil && sub == "dave" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated secret was not picked up: old %v, new %v", errOld, errNew)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDemoIdentity: with DemoIdentity the page gets a signed demo holder that works,
// a few per address; without it the route does not exist.
func TestDemoIdentity(t *testing.T) {
	t.Parallel()
	path, _ := writeSecret(t)
	auth, err := HolderSecretFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, Options{DemoIdentity: true}); err == nil {
		t.Fatal("DemoIdentity without a signing secret was accepted")
	}
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{HolderAuth: auth, DemoIdentity: true, TrustedProxies: loopback})
	a.want(a.do("PUT", "/v1/shows/demo", "", "", map[string]any{"seats": seats(5)}), 201, "")
	r := a.doHeaders("POST", "/v1/demo/identity", from("198.51.100.1", nil), nil)
	a.want(r, 201, "")
	tok, _ := r.body["token"].(string)
	h := a.doHeaders("POST", "/v1/shows/demo/holds", bearer(tok), map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	for range 2 {
		a.want(a.doHeaders("POST", "/v1/demo/identity", from("198.51.100.1", nil), nil), 201, "")
	}
	a.want(a.doHeaders("POST", "/v1/demo/identity", from("198.51.100.1", nil), nil), 429, "rate-limited")
	a.want(a.doHeaders("POST", "/v1/demo/identity", from("198.51.100.2", nil), nil), 201, "")

	off := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	off.want(off.do("POST", "/v1/demo/identity", "", "", nil), 404, "no-such-route")
}

// TestAddressSeatCap: without signing, one address that makes up 2,000 holder ids
// holds at most its cap of a show; other addresses are not affected; a release gives
// seats back.
func TestAddressSeatCap(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, MaxSeatsPerAddress: 20})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(200)}), 201, "")
	var mu sync.Mutex
	held, refused := 0, 0
	var last reply
	var lastHolder string
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				holder := fmt.Sprintf("fresh-%d", g*100+i)
				r := a.doHeaders("POST", "/v1/shows/s/holds", from("203.0.113.7", http.Header{HolderHeader: {holder}}),
					map[string]any{"count": 1})
				for try := 0; r.status == 503 && try < 3; try++ {
					// A backend slower than the hold's bound on a loaded machine: the
					// hold did not happen (never "held" or "refused"); ask again.
					r = a.doHeaders("POST", "/v1/shows/s/holds", from("203.0.113.7", http.Header{HolderHeader: {holder}}),
						map[string]any{"count": 1})
				}
				mu.Lock()
				switch {
				case r.status == 201:
					held++
					last, lastHolder = r, holder
				case r.status == 409 && r.body["type"] == problemPrefix+"address-limit":
					refused++
				default:
					t.Errorf("hold by %s: %d %s", holder, r.status, r.raw)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if held != 20 || refused != 1980 {
		t.Fatalf("one address with 2,000 holder ids held %d seats (%d refused), its cap is 20", held, refused)
	}
	a.want(a.doHeaders("POST", "/v1/shows/s/holds", from("203.0.113.8", http.Header{HolderHeader: {"honest"}}), map[string]any{"count": 2}), 201, "")
	// A release gives the address its seat back.
	r := a.doHeaders("POST", "/v1/holds/release", from("203.0.113.7", http.Header{HolderHeader: {lastHolder}}), last.body)
	a.want(r, 204, "")
	a.want(a.doHeaders("POST", "/v1/shows/s/holds", from("203.0.113.7", http.Header{HolderHeader: {"again"}}), map[string]any{"count": 1}), 201, "")
	a.want(a.doHeaders("POST", "/v1/shows/s/holds", from("203.0.113.7", http.Header{HolderHeader: {"again2"}}), map[string]any{"count": 1}), 409, "address-limit")
}

// TestWriteLimitPerAddress: rotating holder ids does not get past the address's
// write bucket; another address has its own.
func TestWriteLimitPerAddress(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, AddrRateLimit: 0.001, AddrRateBurst: 5})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(50)}), 201, "")
	got := map[int]int{}
	for i := range 20 {
		r := a.doHeaders("POST", "/v1/shows/s/holds", from("192.0.2.9", http.Header{HolderHeader: {fmt.Sprintf("rot-%d", i)}}), map[string]any{"count": 1})
		got[r.status]++
	}
	if got[201] != 5 || got[429] != 15 {
		t.Fatalf("20 holds under rotating ids from one address: %v, want 5 × 201 and 15 × 429", got)
	}
	a.want(a.doHeaders("POST", "/v1/shows/s/holds", from("192.0.2.10", http.Header{HolderHeader: {"x"}}), map[string]any{"count": 1}), 201, "")
	if n := testCounter(t, a, `holdfast_http_refused_total{reason="address-writes"}`); n != 15 {
		t.Fatalf("refusals counted %v, want 15", n)
	}
}

// TestTrustedProxy: X-Forwarded-For is believed from a trusted proxy only, and the
// address taken is the rightmost one that is not a trusted proxy.
func TestTrustedProxy(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, c := range []struct{ peer, xff, want string }{
		{"10.1.2.3:5000", "198.51.100.4", "198.51.100.4"},
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.4, 10.9.9.9", "198.51.100.4"}, // a client's own XFF entry is not believed
		{"192.0.2.1:5000", "198.51.100.4", "192.0.2.1"},                      // not a trusted peer: its header is ignored
		{"10.1.2.3:5000", "", "10.1.2.3"},
		{"10.1.2.3:5000", "junk", "10.1.2.3"},
		{"[::ffff:10.1.2.3]:5000", "2001:db8::1", "2001:db8::1"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := s.clientAddr(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	// Behind the proxy, one flooder does not make other users' reads 429.
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, ReadRateLimit: 0.001, ReadRateBurst: 3})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(5)}), 201, "")
	for range 10 {
		a.doHeaders("GET", "/v1/shows/s/layout", from("198.51.100.66", nil), nil)
	}
	a.want(a.doHeaders("GET", "/v1/shows/s/layout", from("198.51.100.66", nil), nil), 429, "rate-limited")
	a.want(a.doHeaders("GET", "/v1/shows/s/layout", from("198.51.100.67", nil), nil), 200, "")
}

// TestLimiterMemoryIsBounded: 350,000 distinct ids leave at most LimiterSize buckets.
func TestLimiterMemoryIsBounded(t *testing.T) {
	t.Parallel()
	b := newBuckets(10, 10, 65_536)
	for i := range 350_000 {
		b.allow(fmt.Sprintf("holder-%d", i))
	}
	if n := b.m.Len(); n != 65_536 {
		t.Fatalf("%d buckets after 350,000 ids, want the cap 65,536", n)
	}
	if !b.allow("holder-349999") { // the most recent stay
		t.Fatal("a recent bucket was dropped")
	}
}

// TestStreamCaps: one address gets at most its streams (429), the server at most its
// own (503, once no address holds two more than the newcomer), and /livez answers all
// the while.
func TestStreamCaps(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, MaxStreams: 5, MaxStreamsPerAddress: 2})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(5)}), 201, "")
	open := func(addr string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/shows/s/events", nil)
		req.Header.Set("X-Forwarded-For", addr)
		resp, err := a.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
		} else {
			t.Cleanup(func() { resp.Body.Close() })
		}
		return resp.StatusCode
	}
	if open("198.51.100.1") != 200 || open("198.51.100.1") != 200 {
		t.Fatal("an address's first streams were refused")
	}
	if got := open("198.51.100.1"); got != 429 {
		t.Fatalf("an address's third stream: %d, want 429", got)
	}
	for i := range 3 {
		if got := open(fmt.Sprintf("198.51.100.%d", 10+i)); got != 200 {
			t.Fatalf("stream %d: %d", i, got)
		}
	}
	// Full: a newcomer takes the oldest stream of the address holding two more than it.
	if got := open("198.51.100.20"); got != 200 {
		t.Fatalf("a newcomer with an address holding 2 streams: %d, want 200", got)
	}
	if got := open("198.51.100.21"); got != 503 {
		t.Fatalf("a stream past the server's cap, every address holding one: %d, want 503", got)
	}
	a.want(a.do("GET", "/livez", "", "", nil), 200, "")
}

// TestStreamConnectRate: a reconnect storm from many addresses is bounded by the
// streams opened per second in all (503 with Retry-After past it).
func TestStreamConnectRate(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, StreamConnectRate: 0.001})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(5)}), 201, "")
	st, _ := a.openEvents("s", "")
	st.next(5 * time.Second)
	st.close()
	r := a.doHeaders("GET", "/v1/shows/s/events", from("198.51.100.99", nil), nil)
	a.want(r, 503, "too-many-streams")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

// TestStreamBufferBehindAConnectionLimit: the stream's connection is found under the
// connection limit serve puts on its listener, so that its send buffer can shrink.
func TestStreamBufferBehindAConnectionLimit(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	limited := netutil.LimitListener(ln, 4)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := limited.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); ok {
		t.Fatal("the limit no longer wraps its connections: this test tests nothing")
	}
	if tcpConn(c) == nil {
		t.Fatal("the TCP connection under the connection limit was not found")
	}
}

// TestStreamsPastTheWatchedPool: with every watched-show slot taken by open streams,
// another show's stream is served (snapshots of a shared map, about a second apart),
// not refused, and its map reads too.
func TestStreamsPastTheWatchedPool(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxWatchedShows: 2}, Options{})
	for _, s := range []string{"w1", "w2", "other"} {
		a.want(a.do("PUT", "/v1/shows/"+s, "", "", map[string]any{"seats": seats(5)}), 201, "")
	}
	for _, s := range []string{"w1", "w2"} {
		st, _ := a.openEvents(s, "")
		st.next(5 * time.Second)
	}
	st, resp := a.openEvents("other", "")
	if st == nil {
		t.Fatalf("a stream past the watched pool: %d", resp.StatusCode)
	}
	if ev := st.next(5 * time.Second); ev.event != "snapshot" || ev.data["states"] != "fffff" {
		t.Fatalf("first event %+v", ev)
	}
	a.want(a.do("POST", "/v1/shows/other/holds", "eve", "", map[string]any{"seats": []string{"A2"}}), 201, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		ev := st.next(time.Until(deadline))
		if ev.event == "snapshot" && ev.data["states"] == "fhfff" {
			break
		}
	}
	r := a.do("GET", "/v1/shows/other/seats", "", "", nil)
	a.want(r, 200, "")
}

// TestSlowReaderIsCut: a client that opens a stream and never reads is disconnected
// once its small send buffer is full and a write waits past StreamWriteTimeout.
func TestSlowReaderIsCut(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{StreamWriteTimeout: 500 * time.Millisecond, StreamSendBuffer: 4096})
	ids := seats(2000)
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": ids}), 201, "")
	conn, err := net.Dial("tcp", a.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /v1/shows/s/events HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	a.waitStreams(1)
	// Changes, many: each is an event the stalled reader does not take. Each seat is
	// held on one pass and released on the next, so that every call changes the map
	// (a hold released within the same feed read would change nothing a watcher sees).
	deadline := time.Now().Add(30 * time.Second)
	held := make([]map[string]any, len(ids))
	for i := 0; a.s.streams.open() > 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("a reader that never reads is still connected after 30 s (%d changes)", i)
		}
		k := i % len(ids)
		if held[k] != nil {
			a.want(a.do("POST", "/v1/holds/release", fmt.Sprint("w", k), "", held[k]), 204, "")
			held[k] = nil
			continue
		}
		h := a.do("POST", "/v1/shows/s/holds", fmt.Sprint("w", k), "", map[string]any{"seats": []string{ids[k]}})
		a.want(h, 201, "")
		held[k] = h.body
	}
}

// TestSnapshotsEncodedOncePerVersion: a reconnect storm at one version is answered
// from one encoded snapshot.
func TestSnapshotsEncodedOncePerVersion(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(500)}), 201, "")
	var ids []string
	for range 30 {
		st, _ := a.openEvents("s", "")
		ev := st.next(5 * time.Second)
		ids = append(ids, strings.SplitN(ev.id, ".", 3)[1])
		st.close()
	}
	if n := a.s.events.encodes.Load(); n != 1 {
		t.Fatalf("30 connects at version %v encoded %d snapshots, want 1", ids[0], n)
	}
}

// TestReconnectsWhileTheMapChanges: streams that connect one after another while the
// map changes between them (a reconnect storm on a busy show) start from the last
// snapshot built within a second and the changes since it, so snapshots are encoded
// about once a second, not once per version; and each stream's first events give the
// map as it is (every hold made before it connected shows held).
func TestReconnectsWhileTheMapChanges(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/busy", "", "", map[string]any{"seats": seats(500)}), 201, "")
	at := a.layoutIndex("busy")
	const connects = 20
	start := time.Now()
	for k := range connects {
		seat := fmt.Sprintf("A%d", k+1)
		a.want(a.do("POST", "/v1/shows/busy/holds", fmt.Sprintf("h%d", k), "", map[string]any{"seats": []string{seat}}), 201, "")
		st, _ := a.openEvents("busy", "")
		states := st.mapAfter(func(states []byte) bool { return states[at[seat]] == 'h' }, 5*time.Second)
		st.close()
		for j := range k + 1 {
			if states[at[fmt.Sprintf("A%d", j+1)]] != 'h' {
				t.Fatalf("connect %d: A%d (held before it) is %q in the stream's map", k, j+1, states[at[fmt.Sprintf("A%d", j+1)]])
			}
		}
	}
	// A snapshot a second at most (and the first), however many versions went by.
	if n, most := a.s.events.encodes.Load(), int64(time.Since(start)/time.Second)+1; n > most || n >= connects {
		t.Fatalf("%d connects at %d versions in %v encoded %d snapshots, want at most %d", connects, connects, time.Since(start), n, most)
	}
}

// mapAfter applies the stream's events (a snapshot, then changes) until done holds for
// the map they give, and returns it.
func (s *sseStream) mapAfter(done func(states []byte) bool, within time.Duration) []byte {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var states []byte
	for {
		ev := s.next(time.Until(deadline))
		switch ev.event {
		case "snapshot":
			states = []byte(ev.data["states"].(string))
		case "changes":
			if states == nil {
				s.t.Fatalf("changes before a snapshot: %+v", ev)
			}
			for _, c := range ev.data["changes"].([]any) {
				m := c.(map[string]any)
				states[int(m["i"].(float64))] = m["s"].(string)[0]
			}
		}
		if states != nil && done(states) {
			return states
		}
	}
}

// TestReadsEncodedOnce: a layout is encoded once per show, a seat map once per version
// (each form), and revalidation is 304 without a body.
func TestReadsEncodedOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(1500)}), 201, "")
	for _, path := range []string{"/v1/shows/s/layout", "/v1/shows/s/seats", "/v1/shows/s/seats?format=json"} {
		r := a.do("GET", path, "", "", nil)
		a.want(r, 200, "")
		again := a.do("GET", path, "", "", nil)
		if again.raw != r.raw || again.header.Get("ETag") != r.header.Get("ETag") {
			t.Fatalf("%s: a second read at the same version differs", path)
		}
		nm := a.doHeaders("GET", path, http.Header{"If-None-Match": {r.header.Get("ETag")}}, nil)
		if nm.status != 304 || nm.raw != "" {
			t.Fatalf("%s: revalidation %d with %d bytes", path, nm.status, len(nm.raw))
		}
	}
	if a.s.layouts.get("s") == nil {
		t.Fatal("the layout is not kept encoded")
	}
	// The per-seat form of a large show is encoded at most once a second while the map
	// changes, and it catches up: a hold shows in it within a few seconds.
	a.want(a.do("POST", "/v1/shows/s/holds", "h", "", map[string]any{"seats": []string{"A7"}}), 201, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := a.do("GET", "/v1/shows/s/seats?format=json", "", "", nil)
		seats, _ := r.body["seats"].([]any)
		held := false
		for _, x := range seats {
			if m := x.(map[string]any); m["seat"] == "A7" {
				held = m["status"] == "held"
			}
		}
		if held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the per-seat form never showed the hold")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestUnknownShowsLimited: requests for shows that do not exist are limited per
// address (each is a database query); known shows are not affected.
func TestUnknownShowsLimited(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, UnknownShowRate: 0.001})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(5)}), 201, "")
	got := map[int]int{}
	for i := range 20 {
		r := a.doHeaders("GET", fmt.Sprintf("/v1/shows/random-%d/seats", i), from("198.51.100.9", nil), nil)
		got[r.status]++
	}
	if got[404] != 1 || got[429] != 19 {
		t.Fatalf("20 random show ids from one address, a burst of 1: %v, want 1 × 404 then 429", got)
	}
	// Until its bucket refills (a fifth of a second by default), the address is refused
	// on every show route: telling known from unknown is the lookup the limit saves.
	a.want(a.doHeaders("GET", "/v1/shows/s/seats", from("198.51.100.9", nil), nil), 429, "rate-limited")
	a.want(a.doHeaders("POST", "/v1/shows/random-x/holds", from("198.51.100.9", http.Header{HolderHeader: {"h"}}), map[string]any{"seats": []string{"A1"}}), 429, "rate-limited")
	a.want(a.doHeaders("GET", "/v1/shows/random-1/seats", from("198.51.100.10", nil), nil), 404, "not-found")
}

// TestAdminListener: /metrics and the operator routes are on the admin listener only;
// the public /readyz tells only ready or not.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	tok := http.Header{"Authorization": {"Bearer " + testOperatorToken}}
	a.want(a.doOn(a.srv, "GET", "/metrics", nil, nil), 404, "no-such-route")
	a.want(a.doOn(a.srv, "PUT", "/v1/shows/s", tok, map[string]any{"seats": seats(2)}), 404, "no-such-route")
	a.want(a.doOn(a.srv, "POST", "/v1/shows/s/resync", tok, nil), 404, "no-such-route")
	if r := a.doOn(a.admin, "GET", "/metrics", nil, nil); r.status != 200 || !strings.Contains(r.raw, "holdfast_http_requests_total") {
		t.Fatalf("admin /metrics: %d", r.status)
	}
	a.want(a.doOn(a.admin, "PUT", "/v1/shows/s", tok, map[string]any{"seats": seats(2)}), 201, "")
	a.want(a.doOn(a.admin, "GET", "/v1/shows/s/seats", nil, nil), 404, "no-such-route")
	a.want(a.doOn(a.srv, "GET", "/readyz", nil, nil), 200, "")
}

// TestOperatorTokenThrottledAndRotated: wrong operator tokens are throttled per
// address (the right one never is) and each is logged at warn with the address; a
// token file is read again when it changes.
func TestOperatorTokenThrottledAndRotated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "operator.token")
	first, second := "first-operator-token-0123", "second-operator-token-4567"
	if err := os.WriteFile(path, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{OperatorTokenFile: path, OperatorFailures: 3, TrustedProxies: loopback})
	put := func(addr, tok string) reply {
		return a.doOn(a.admin, "PUT", "/v1/shows/s", from(addr, http.Header{"Authorization": {"Bearer " + tok}}), map[string]any{"seats": seats(2)})
	}
	for range 3 {
		a.want(put("192.0.2.50", "wrong-guess-0000000000"), 401, "unauthorized")
	}
	a.want(put("192.0.2.50", "wrong-guess-0000000000"), 429, "rate-limited")
	a.want(put("192.0.2.50", first), 201, "") // throttled guesses, yet the right token from there is served
	a.want(put("192.0.2.51", first), 200, "") // the same show again, from another address
	if n := strings.Count(a.logs.String(), `"msg":"operator token refused"`); n != 3 {
		t.Fatalf("%d failures logged, want 3", n)
	}
	if !strings.Contains(a.logs.String(), `"addr":"192.0.2.50"`) || !strings.Contains(a.logs.String(), `"level":"WARN","msg":"operator token refused"`) {
		t.Fatal("a failure is not logged at warn with its address")
	}
	if err := os.WriteFile(path, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; put(fmt.Sprintf("192.0.2.%d", 100+i), second).status != 200; i++ { // a fresh address each try: failures are throttled
		if time.Now().After(deadline) {
			t.Fatal("the rotated operator token was not picked up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.want(put("192.0.2.53", first), 401, "unauthorized")
}

// TestSecurityHeaders: every response, problems and streams included, forbids framing
// and sniffing; pages carry their CSP; HSTS with TLS.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TLS: true})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(2)}), 201, "")
	for _, path := range []string{"/", "/shows/s", "/static/app.js", "/static/nope.js", "/v1/shows/s/seats", "/v1/shows/nope/seats", "/livez", "/nowhere"} {
		r := a.do("GET", path, "", "", nil)
		h := r.header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			h.Get("Strict-Transport-Security") == "" || len(h.Get(RequestIDHeader)) != 16 {
			t.Fatalf("%s: headers %v", path, h)
		}
		if strings.HasPrefix(h.Get("Content-Type"), "text/html") && !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Fatalf("%s: a page without its CSP", path)
		}
	}
	st, resp := a.openEvents("s", "")
	if st == nil || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatal("the event stream lacks the headers")
	}
	plain := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	if plain.do("GET", "/livez", "", "", nil).header.Get("Strict-Transport-Security") != "" {
		t.Fatal("HSTS without TLS")
	}
}

// TestRequestIDsAndSampledRefusals: each response's request id is on its log line,
// with the peer hashed; a flood of refusals is counted in full and logged sampled.
func TestRequestIDsAndSampledRefusals(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{ReadRateLimit: 0.001, ReadRateBurst: 1})
	r := a.do("GET", "/livez", "", "", nil)
	id := r.header.Get(RequestIDHeader)
	var line map[string]any
	for _, l := range strings.Split(a.logs.String(), "\n") {
		if strings.Contains(l, id) {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line["request_id"] != id || line["peer"] == nil || strings.Contains(a.logs.String(), "127.0.0.1") {
		t.Fatalf("the request's log line: %v", line)
	}
	for range 200 {
		a.do("GET", "/v1/shows/x/seats", "", "", nil)
	}
	if n := testCounter(t, a, `holdfast_http_refused_total{reason="address-reads"}`); n < 199 {
		t.Fatalf("refusals counted: %v", n)
	}
	if n := strings.Count(a.logs.String(), `"status":429`); n == 0 || n > 50 {
		t.Fatalf("%d of 200 refusals logged, want a sample", n)
	}
}

// TestErrorsTellNoInternals: a generation past 2^53-1, and JSON of the wrong type, are
// refused naming what the client sent, never Redis, Go types or decoder internals.
func TestErrorsTellNoInternals(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(2)}), 201, "")
	h := a.do("POST", "/v1/shows/s/holds", "al", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	big := fmt.Sprintf(`{"show":"s","seats":["A1"],"token":%q,"generation":9007199254740992}`, h.body["token"])
	for _, c := range []struct{ path, body, field, want string }{
		{"/v1/bookings", big, "generation", "9007199254740991"},
		{"/v1/holds/release", big, "generation", "9007199254740991"},
		{"/v1/bookings", `{"show":"s","seats":["A1"],"token":"x","generation":"7"}`, "", "at /generation: want an integer"},
		{"/v1/bookings", `{"show":"s","seats":[1],"token":"x","generation":7}`, "", "at /seats/0: want a string"},
		{"/v1/bookings", `{"show":"s","seats":["A1"],"token":"x","generation":1e400}`, "", "/generation"},
		{"/v1/bookings", `{"show":"s","seats":["A1"],"tok`, "", "ends before"},
		{"/v1/bookings", `{"show":"s","extra":1}`, "", "at /extra: unknown member"},
	} {
		r := a.do("POST", c.path, "al", "", c.body)
		if r.status != 400 || !strings.Contains(r.raw, c.want) || (c.field != "" && r.body["field"] != c.field) {
			t.Fatalf("%s %s: %d %s", c.path, c.body, r.status, r.raw)
		}
		for _, leak := range []string{"redis", "HOLDFAST_BADARG", "int64", "Go ", "jsontext", "json:", "[]string"} {
			if strings.Contains(r.raw, leak) {
				t.Fatalf("%s: the answer tells %q: %s", c.body, leak, r.raw)
			}
		}
	}
	r := a.do("GET", "/static/nope.js", "", "", nil)
	a.want(r, 404, "no-such-route")
}

// TestHoldAdmissionPerShow: with a show's holds in flight at the cap (Redis pauses its
// writes, so the admitted ones cannot finish), every other hold waits briefly, then is
// 503 overloaded with Retry-After, and nothing changed for it; once Redis goes on, the
// admitted ones finish.
func TestHoldAdmissionPerShow(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	a := newAPI(t, srv.Client(), engine.Config{MaxHoldsInFlight: 2}, Options{})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(20)}), 201, "")
	a.want(a.do("POST", "/v1/shows/s/holds", "warm", "", map[string]any{"count": 1}), 201, "") // the show is loaded
	if err := srv.Client().Do(t.Context(), "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int]int{}
	answered := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a.do("POST", "/v1/shows/s/holds", fmt.Sprintf("b%d", i), "", map[string]any{"count": 1})
			mu.Lock()
			got[r.status]++
			if r.status == 503 && (r.body["type"] != problemPrefix+"overloaded" || r.header.Get("Retry-After") == "") {
				t.Errorf("a refusal: %s", r.raw)
			}
			mu.Unlock()
			answered <- struct{}{}
		}()
	}
	// Two holds hold the slots while Redis is paused: the other 8 are answered first.
	for range 8 {
		select {
		case <-answered:
		case <-time.After(30 * time.Second):
			t.Fatal("the holds past the cap were not answered while the admitted ones were stuck")
		}
	}
	mu.Lock()
	refused := got[503]
	mu.Unlock()
	if err := srv.Client().Do(t.Context(), "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if refused != 8 || got[201] != 2 || got[503] != 8 {
		t.Fatalf("10 holds with 2 slots, the admitted ones stuck: %d refused while stuck, then %v; want 8 × 503 and 2 × 201", refused, got)
	}
	m := a.do("GET", "/v1/shows/s/seats?format=compact", "", "", nil)
	if n := strings.Count(m.body["states"].(string), "h"); n != 3 {
		t.Fatalf("%d seats held after 3 granted holds: a refused hold changed something", n)
	}
}

// testCounter reads one counter from the admin /metrics.
func testCounter(t *testing.T, a *api, name string) float64 {
	t.Helper()
	r := a.doOn(a.admin, "GET", "/metrics", nil, nil)
	for _, l := range strings.Split(r.raw, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// BenchmarkLimiterMemory reports the heap a table of limits keeps after 350,000
// distinct keys (the review's rotating-ids attack kept ~470 B per id for minutes):
// go test -run '^$' -bench LimiterMemory ./httpapi
func BenchmarkLimiterMemory(b *testing.B) {
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t := newBuckets(10, 10, 65_536)
		for i := range 350_000 {
			t.allow("holder-" + strconv.Itoa(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MB/table")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(t.m.Len()), "B/key")
		runtime.KeepAlive(t)
	}
}

// TestEventCacheIsBounded: formatted events are kept up to a count and a byte size: a
// storm across many versions of a large show's snapshots does not pile them up.
func TestEventCacheIsBounded(t *testing.T) {
	t.Parallel()
	var c eventCache
	big := make([]byte, 100<<10) // a 100,000-seat snapshot
	for v := range 500 {
		c.put(eventKey{show: "s", version: uint64(v), snapshot: true}, big)
	}
	if c.bytes > eventCacheBytes || len(c.m) != len(c.order) || len(c.m) != eventCacheBytes/len(big) {
		t.Fatalf("%d events, %d bytes kept (bound %d)", len(c.m), c.bytes, eventCacheBytes)
	}
	if c.get(eventKey{show: "s", version: 499, snapshot: true}) == nil || c.get(eventKey{show: "s", version: 0, snapshot: true}) != nil {
		t.Fatal("not the newest events kept")
	}
}
