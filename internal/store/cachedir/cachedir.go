// Package cachedir names sluice's files in the user's cache directory
// (~/.cache/sluice on Linux): the response cache and the observations sit
// side by side there.
package cachedir

import (
	"os"
	"path/filepath"
)

// Path is name in sluice's cache directory, or in ./.sluice when the
// user has no cache directory.
func Path(name string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(".sluice", name)
	}
	return filepath.Join(dir, "sluice", name)
}
