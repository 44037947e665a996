package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/internal/store/cachedir"
)

// cacheFlags choose the response cache of a command.
type cacheFlags struct {
	path string
	mode string
}

// defaultCachePath is $SLUICE_CACHE, else responses.db in the user's cache
// directory (~/.cache/sluice on Linux).
func defaultCachePath() string {
	if p := os.Getenv("SLUICE_CACHE"); p != "" {
		return p
	}
	return cachedir.Path("responses.db")
}

func (f *cacheFlags) register(fl *pflag.FlagSet, defaultMode string) {
	fl.StringVar(&f.path, "cache", defaultCachePath(), "response cache file (env SLUICE_CACHE)")
	fl.StringVar(&f.mode, "cache-mode", defaultMode, "response cache: on (read and store answers), read-only, or off")
}

// open opens the cache as the flags say; Off gives a nil cache. Naming a
// file with --cache turns it on unless --cache-mode says otherwise. A cache
// another sluice holds is not worth failing a run for: the run goes on
// without it, and says so.
func (f *cacheFlags) open(cmd *cobra.Command, log *slog.Logger) (*cache.Cache, error) {
	if cmd.Flags().Changed("cache") && !cmd.Flags().Changed("cache-mode") {
		f.mode = "on"
	}
	mode, err := cache.ParseMode(f.mode)
	if err != nil {
		return nil, err
	}
	if mode == cache.Off {
		return nil, nil
	}
	c, err := cache.Open(f.path, mode)
	if errors.Is(err, cache.ErrLocked) {
		log.Warn("the response cache is in use by another sluice; running without it (pass --cache with another file to keep one)", "cache", f.path)
		return nil, nil
	}
	return c, err
}

func cacheCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Inspect or prune the response cache",
		Long: `The response cache holds real answers to Messages requests, addressed by
the canonical request (and, for judge rows, the rubric's fingerprint). It never
holds an error, a rate-limit or overload answer, an expired batch row, a
truncated or refused reply; a row of one reads as a miss. See docs/judge.md.`,
	}
	var path string
	var asJSON bool
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Rows, bytes and file size of the cache",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cache.Open(path, cache.ReadOnly)
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Stats()
			if err != nil {
				return err
			}
			if asJSON {
				b, _ := json.MarshalIndent(s, "", "  ")
				fmt.Println(string(b))
				return nil
			}
			fmt.Printf("%s: %d answers, %s of rows, file %s\n", s.Path, s.Entries, fmtBytes(s.Bytes), fmtBytes(s.FileBytes))
			return nil
		},
	}
	stats.Flags().StringVar(&path, "cache", defaultCachePath(), "response cache file (env SLUICE_CACHE)")
	stats.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var olderThan time.Duration
	var maxBytes string
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove rows that are not answers, rows older than --older-than, then the oldest until --max-bytes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limit, err := parseBytes(maxBytes)
			if err != nil {
				return err
			}
			c, err := cache.Open(path, cache.On)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.Prune(cache.PruneOptions{OlderThan: olderThan, MaxBytes: limit})
			if err != nil {
				return err
			}
			fmt.Printf("%s: removed %d rows (%d not answers); %d answers left, %s\n", path, res.Removed, res.RemovedBad, res.Entries, fmtBytes(res.Bytes))
			return nil
		},
	}
	prune.Flags().StringVar(&path, "cache", defaultCachePath(), "response cache file (env SLUICE_CACHE)")
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "remove rows stored longer ago than this (e.g. 720h; 0: keep)")
	prune.Flags().StringVar(&maxBytes, "max-bytes", "", "then remove the oldest rows until the rest fit (e.g. 2GB; empty: no limit)")
	cmd.AddCommand(stats, prune)
	return cmd
}

// parseBytes reads 1500, 10KB, 2.5MB, 1GB (powers of 1024); "" is 0.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("--max-bytes: %q is not a size like 500MB", s)
	}
	return int64(f * float64(mult)), nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
