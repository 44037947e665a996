package results

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Open prepares the results file at path for appending and returns its
// Writer, which the caller must Close.
//
// st must be what Scan(path) returned, with nothing written to the file
// since; a nil st makes Open call Scan itself. If the file's size is not
// st.Size+st.TornBytes, Open refuses: the file changed under it.
//
// Before appending, Open repairs the file:
//
//   - a torn tail (st.TornBytes) is cut off;
//   - each id of st.Done for which drop returns true is removed, as are the
//     earlier records of st.Duplicates. Removing rewrites the file
//     atomically: the kept lines go to path+".tmp", which is fsynced and
//     renamed over path, and then the directory is fsynced. A crash leaves
//     either the old file or the new one.
//
// drop may be nil. Typically it selects transport-class rows and ids whose
// params hash changed, so the run drives them again. Open updates st to
// describe the file as it leaves it: dropped ids are deleted from st.Done,
// Lines, Size and line numbers are those of the rewritten file, TornBytes
// is 0 and Duplicates nil.
//
// The directory of path must exist; the file is created (mode 0644) if
// missing. Unless opts.NoSync, every change Open makes is fsynced, the
// directory included, before it returns.
func Open(path string, st *State, drop func(id string, e Entry) bool, opts Options) (*Writer, error) {
	if st == nil {
		var err error
		if st, err = Scan(path); err != nil {
			return nil, err
		}
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	var size int64
	fi, err := os.Stat(path)
	exists := err == nil
	switch {
	case exists:
		size = fi.Size()
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("results: %w", err)
	}
	if want := st.Size + st.TornBytes; size != want {
		return nil, fmt.Errorf("results: %s is %d bytes, Scan saw %d: it changed since", path, size, want)
	}

	dropped := make(map[string]bool)
	if drop != nil {
		for id, e := range st.Done {
			if drop(id, e) {
				dropped[id] = true
			}
		}
	}
	switch {
	case len(dropped) > 0 || len(st.Duplicates) > 0:
		if err := rewrite(path, st, dropped, opts.NoSync); err != nil {
			return nil, err
		}
	case st.TornBytes > 0:
		if err := truncate(path, st.Size, opts.NoSync); err != nil {
			return nil, err
		}
		st.TornBytes = 0
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	if !exists && !opts.NoSync {
		// A new file's directory entry must be durable before any record
		// in it is reported durable.
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	return newWriter(f, opts), nil
}

// truncate cuts the file at path to size bytes.
func truncate(path string, size int64, noSync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	err = f.Truncate(size)
	if err == nil && !noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("results: cut torn tail: %w", err)
	}
	return nil
}

// rewrite replaces the file at path by its complete lines minus the records
// of dropped ids and all but the last record of each id, and updates st on
// success.
func rewrite(path string, st *State, dropped map[string]bool, noSync bool) error {
	src, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	defer src.Close()
	tmp := path + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			dst.Close()
			os.Remove(tmp)
		}
	}()

	done := make(map[string]Entry, len(st.Done))
	bw := bufio.NewWriterSize(dst, 1<<20)
	lr := newLineReader(io.LimitReader(src, st.Size))
	var size int64
	lines := 0
	for n := 1; ; n++ {
		raw, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("results: rewrite: %w", err)
		}
		if blank(raw) {
			continue
		}
		id, _, err := parse(raw)
		if err != nil {
			return fmt.Errorf("results: rewrite: %s: line %d: %v", path, n, err)
		}
		e, ok := st.Done[id]
		if !ok || dropped[id] || e.Line != n {
			continue
		}
		if _, err := bw.Write(raw); err != nil {
			return fmt.Errorf("results: rewrite: %w", err)
		}
		lines++
		e.Line = lines
		done[id] = e
		size += int64(len(raw))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("results: rewrite: %w", err)
	}
	if !noSync {
		if err := dst.Sync(); err != nil {
			return fmt.Errorf("results: rewrite: %w", err)
		}
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("results: rewrite: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("results: rewrite: %w", err)
	}
	renamed = true
	st.Done, st.Lines, st.Size, st.TornBytes, st.Duplicates = done, lines, size, 0, nil
	if !noSync {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// syncDir fsyncs the directory dir, making renames and creations in it
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("results: fsync directory: %w", err)
	}
	return nil
}
