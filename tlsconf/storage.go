package tlsconf

import (
	"os"
	"path/filepath"
)

// DefaultStorageDir is where ACME certificates, keys and the account are
// kept when no directory is configured and no shared storage is used:
// $XDG_DATA_HOME/idemgate/certmagic, else
// $HOME/.local/share/idemgate/certmagic (certmagic's own convention, under
// idemgate's name), else /var/lib/idemgate/certmagic. It is data, not a
// cache: losing it means ordering every certificate again.
func DefaultStorageDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "idemgate", "certmagic")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" && h != "/" {
		return filepath.Join(h, ".local", "share", "idemgate", "certmagic")
	}
	return filepath.Join("/var", "lib", "idemgate", "certmagic")
}
