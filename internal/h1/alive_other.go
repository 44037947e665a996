//go:build !unix

package h1

// alive cannot ask the socket here: an idle connection the server closed
// is found out by the request that uses it.
func (c *conn) alive() bool { return true }
