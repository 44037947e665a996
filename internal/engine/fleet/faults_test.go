package fleet

import (
	"net"
	"sync"
	"testing"
)

// faultProxy sits between one member and Redis and fails on demand, so a
// test can fail one member's calls while the others' go through.
type faultProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool          // refuse every connection and close the open ones
	drop  bool          // the next reply from Redis is dropped, its connection closed
	hold  chan struct{} // requests are swallowed until it is closed
	held  chan struct{} // receives when a request was swallowed
	conns map[net.Conn]bool
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	go p.accept()
	return p
}

func (p *faultProxy) url() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if !down {
			p.conns[c] = true
		}
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go p.up(c, s)
		go p.downstream(c, s)
	}
}

// up copies the member's requests to Redis, or swallows them while held.
func (p *faultProxy) up(c, s net.Conn) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		hold, held := p.hold, p.held
		p.mu.Unlock()
		if hold != nil {
			held <- struct{}{}
			<-hold
			c.Close()
			return
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return
		}
	}
}

// downstream copies Redis's replies to the member, or drops one.
func (p *faultProxy) downstream(c, s net.Conn) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		drop := p.drop
		p.drop = false
		p.mu.Unlock()
		if drop {
			// Redis ran the command; its answer is lost on the way.
			s.Close()
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *faultProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// dropNextReply makes the next reply from Redis vanish.
func (p *faultProxy) dropNextReply() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = true
}

// holdRequests swallows requests from now on; each swallowed request is
// announced on the returned channel; release ends the hold (the swallowed
// requests' connections close: their calls fail).
func (p *faultProxy) holdRequests() (held <-chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ch := make(chan struct{}), make(chan struct{}, 16)
	p.hold, p.held = h, ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			p.mu.Lock()
			p.hold, p.held = nil, nil
			p.mu.Unlock()
			close(h)
		})
	}
}
