package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// bom is the UTF-8 byte order mark some editors put at the start of a file.
var bom = []byte("\xEF\xBB\xBF")

// Reader returns the non-blank lines of a JSON Lines stream, one at a time.
//
// Lines have no maximum length. Memory is bounded by the longest line: a
// short line is returned straight from a 64 KiB read buffer, a longer one is
// assembled in a buffer the Reader keeps and reuses.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	br   *bufio.Reader
	long []byte // assembles lines longer than br's buffer; grows to the longest
	line int    // number of the last line read, blank ones included
	off  int64  // bytes consumed through the end of the last line read
	err  error  // sticky: io.EOF or the read error
}

// NewReader returns a Reader of r. It buffers r itself.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next non-blank line and its 1-based number in the stream.
//
// The line has its trailing "\n" or "\r\n" removed, and on line 1 a leading
// UTF-8 byte order mark. A line is blank when it holds nothing but spaces,
// tabs and carriage returns; blank lines are skipped but counted. The last
// line need not end in a newline.
//
// The returned slice is only valid until the next call to Next, which may
// overwrite it: copy what must outlive it.
//
// At the end of the stream Next returns io.EOF. A read error is returned as
// is, with the number of the line being read, and every later call returns
// it again; a partial line before a read error is never returned.
func (r *Reader) Next() (line []byte, lineNo int, err error) {
	for {
		if r.err == io.EOF {
			return nil, r.line, io.EOF
		}
		if r.err != nil {
			return nil, r.line + 1, r.err
		}
		b, err := r.readLine()
		if err != nil && (err != io.EOF || len(b) == 0) {
			r.err = err
			continue
		}
		r.line++
		r.off += int64(len(b))
		if err == io.EOF {
			r.err = io.EOF // the last line had no newline; it is still a line
		}
		b = bytes.TrimSuffix(b, []byte{'\n'})
		b = bytes.TrimSuffix(b, []byte{'\r'})
		if r.line == 1 {
			b = bytes.TrimPrefix(b, bom)
		}
		if !blank(b) {
			return b, r.line, nil
		}
	}
}

// Offset returns the number of bytes of the stream consumed through the end
// of the last line Next read (blank lines included), for progress reports.
func (r *Reader) Offset() int64 { return r.off }

// readLine returns the next line with its newline, or what is left before
// the end of the stream or a read error.
func (r *Reader) readLine() ([]byte, error) {
	frag, err := r.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return frag, err
	}
	r.long = append(r.long[:0], frag...)
	for errors.Is(err, bufio.ErrBufferFull) {
		frag, err = r.br.ReadSlice('\n')
		r.long = append(r.long, frag...)
	}
	return r.long, err
}

// blank reports whether b holds only spaces, tabs and carriage returns.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
