// Package pipenet is an in-memory network: a net.Listener whose connections
// are net.Pipe pairs. Servers that accept any net.Listener (the simulator)
// and clients with a DialContext hook run over it inside testing/synctest
// bubbles, where loopback TCP would hang once fake time must advance.
package pipenet

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Listener is an in-memory net.Listener. The zero value is not usable; call
// Listen. It is safe for concurrent use.
type Listener struct {
	conns     chan net.Conn
	closeOnce sync.Once
	done      chan struct{}
}

// ErrClosed is returned by Accept and Dial after Close.
var ErrClosed = errors.New("pipenet: listener closed")

// Listen returns a new listener.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	}
}

// Close stops Accept and Dial. Connections already made stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr returns a placeholder address.
func (l *Listener) Addr() net.Addr { return addr{} }

// DialContext connects to the listener; its signature fits
// http.Transport.DialContext, whatever address is asked for.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe" }
