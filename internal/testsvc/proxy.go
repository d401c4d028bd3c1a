package testsvc

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback for fault tests. It can lose replies (SetCut), stop
// relaying in both directions while keeping the connections open (Partition: a network
// partition, as a replication link sees one) or only the replies (HoldReplies), delay
// every chunk (Delay) and drop every connection (Sever).
type Proxy struct {
	ln     net.Listener
	target string
	cut    atomic.Pointer[func(chunk []byte) bool] // SetCut
	Cuts   atomic.Int64

	delay atomic.Int64 // ns added before each chunk is relayed

	mu          sync.Mutex
	conns       map[net.Conn]bool
	partitioned bool
	holding     bool // replies wait (HoldReplies)
	healed      *sync.Cond
	wg          sync.WaitGroup
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
	p.healed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Partition stops (true) or resumes (false) relaying in both directions. Connections
// stay open and what was sent waits, as across a partition: the ends see silence, not
// a reset, until their own timeouts.
func (p *Proxy) Partition(on bool) {
	p.mu.Lock()
	p.partitioned = on
	p.mu.Unlock()
	p.healed.Broadcast()
}

// HoldReplies stops (true) or resumes (false) relaying server->client, while requests
// still pass: the server does what it is asked and its replies wait, as when the path
// back to the client is cut.
func (p *Proxy) HoldReplies(on bool) {
	p.mu.Lock()
	p.holding = on
	p.mu.Unlock()
	p.healed.Broadcast()
}

// SetCut has f see each client->server chunk from now on, on connections open already
// too; f returning true forwards the chunk, then closes both sides without relaying the
// reply.
func (p *Proxy) SetCut(f func(chunk []byte) bool) { p.cut.Store(&f) }

// Delay adds d before each chunk is relayed, in both directions (0: none).
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Sever closes every connection the proxy relays now; new ones are accepted.
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.HoldReplies(false)
	p.Partition(false)
	p.Sever()
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

// pass waits out a partition (and, for a reply, HoldReplies) and the delay before a
// chunk is relayed.
func (p *Proxy) pass(reply bool) {
	if d := p.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	p.mu.Lock()
	for p.partitioned || (reply && p.holding) {
		p.healed.Wait()
	}
	p.mu.Unlock()
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
			var cutting atomic.Bool // replies are read and dropped until the server closes
			go func() {
				defer close(done)
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 && !cutting.Load() {
						p.pass(true)
						if _, werr := client.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						client.(*net.TCPConn).CloseWrite()
						return
					}
				}
			}()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					chunk := buf[:n]
					f := p.cut.Load()
					cut := f != nil && (*f)(bytes.Clone(chunk))
					if cut {
						// Stop relaying replies first, then let the request through.
						cutting.Store(true)
						client.(*net.TCPConn).CloseWrite()
					}
					p.pass(false)
					if _, werr := server.Write(chunk); werr != nil {
						return
					}
					if cut {
						// Close toward the server only after it has read the request and
						// answered: a close with its replies unread would reset the
						// connection, and a reset can drop the request unread (a COMMIT
						// lost, not its reply).
						p.Cuts.Add(1)
						server.(*net.TCPConn).CloseWrite()
						select {
						case <-done:
						case <-time.After(5 * time.Second):
						}
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
