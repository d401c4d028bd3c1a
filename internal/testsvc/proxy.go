package testsvc

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on loopback for fault tests. Cut decides, for each chunk a client
// sends, whether to forward it and then drop the connection before any reply comes back:
// the request reaches the server, its reply is lost.
type Proxy struct {
	ln     net.Listener
	target string
	// Cut sees each client->server chunk; returning true forwards the chunk, then closes
	// both sides without relaying the reply.
	Cut  func(chunk []byte) bool
	Cuts atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target; it stops when the
// test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.wg.Go(func() {
			defer func() {
				client.Close()
				server.Close()
				p.track(client, false)
				p.track(server, false)
			}()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(client, server)
				close(done)
			}()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					chunk := buf[:n]
					cut := p.Cut != nil && p.Cut(bytes.Clone(chunk))
					if cut {
						// Stop relaying replies first, then let the request through.
						client.(*net.TCPConn).CloseWrite()
					}
					if _, werr := server.Write(chunk); werr != nil {
						return
					}
					if cut {
						p.Cuts.Add(1)
						return
					}
				}
				if err != nil {
					<-done
					return
				}
			}
		})
	}
}
