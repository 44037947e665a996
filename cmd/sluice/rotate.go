package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/keys"
)

// keyFilePoll is how often the key files are looked at for a change.
const keyFilePoll = 2 * time.Second

// watchKeys re-reads the key sources on SIGHUP and whenever the keys file
// (or ./.env) changes and then holds still for one poll (a file half-way
// through a save is not read), and sends what changed: keys added and removed, by
// value, relative to pool and every rotation since. A source that fails to
// load is logged and ignored (the run keeps its keys). Redaction follows:
// from the first change on, every log line redacts the new keys' values as
// well as every key ever loaded. The process environment cannot change
// under a running process; its keys stay.
func (f *engineFlags) watchKeys(ctx context.Context, pool *keys.Pool, log *slog.Logger) <-chan keys.Rotation {
	out := make(chan keys.Rotation)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	files := []string{}
	if f.keysFile != "" {
		files = append(files, f.keysFile)
	}
	if !f.noDotEnv {
		files = append(files, ".env")
	}
	go func() {
		defer signal.Stop(hup)
		seen := stamps(files)
		pending := "" // a change seen once: read only when it holds still
		tick := time.NewTicker(keyFilePoll)
		defer tick.Stop()
		cur := pool
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the key sources again")
			case <-tick.C:
				now := stamps(files)
				if now == seen {
					pending = ""
					continue
				}
				if now != pending {
					// Changed since the last look: an editor may be
					// half-way through writing it.
					pending = now
					continue
				}
				seen, pending = now, ""
				log.Info("a key file changed: reading the key sources again")
			}
			next, err := f.loadPool()
			if err != nil {
				log.Warn("could not read the key sources again; keeping the keys in use", "err", err)
				continue
			}
			added, removed := cur.Diff(next)
			if len(added)+len(removed) == 0 {
				continue
			}
			cur = cur.Rotated(added, removed)
			redact := cur.Redact
			logRedact.Store(&redact)
			log.Info("keys changed", "added", len(added), "removed", len(removed))
			select {
			case out <- keys.Rotation{Added: added, Removed: removed}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// stamps is what a change of the files shows in: mtime and size (an
// editor's save and an atomic rename both change the mtime).
func stamps(files []string) string {
	s := ""
	for _, name := range files {
		fi, err := os.Stat(name)
		if err != nil {
			s += name + ":absent;"
			continue
		}
		s += fmt.Sprintf("%s:%d:%d;", name, fi.ModTime().UnixNano(), fi.Size())
	}
	return s
}
