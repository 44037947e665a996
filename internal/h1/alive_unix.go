//go:build unix

package h1

import "syscall"

// alive reports whether an idle connection is still usable: the server
// has neither closed it (recv returns 0, or an error) nor sent anything
// unasked (recv returns data), asked without blocking and without taking
// a byte. A connection with no socket under it cannot be asked and is
// taken as alive.
func (c *conn) alive() bool {
	if c.raw == nil {
		return true
	}
	if c.peek == nil {
		// Made once a connection: a closure made per call was an
		// allocation an attempt.
		c.peek = func(fd uintptr) {
			var b [1]byte
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			c.peekOK = n <= 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		}
	}
	c.peekOK = false
	err := c.raw.Control(c.peek)
	return err == nil && c.peekOK
}
