package testsvc

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// TestRedisOnATakenPortIsNoticed: a redis-server whose port was taken between FreePort
// and its bind exits; start reports that (false) instead of failing the test after 10 s,
// so that StartRedis can try other ports.
func TestRedisOnATakenPortIsNoticed(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed; run `make services` (it installs it)")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	s := &RedisServer{t: t, Port: port, dir: t.TempDir()}
	s.args = []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", s.dir, "--save", ""}
	if s.start(bin) {
		s.Stop()
		t.Fatalf("a redis-server on taken port %d answered", port)
	}
	if s.Running() {
		t.Fatal("the exited server still counts as running")
	}
	// StartRedis itself starts on a free port, and Stop ends it.
	r := StartRedis(t, "--cluster-port", FreePortArg, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if !r.Running() {
		t.Fatal("StartRedis returned a server that is not running")
	}
	r.Stop()
}
