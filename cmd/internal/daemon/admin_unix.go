//go:build unix

package daemon

import (
	"net"
	"os"
	"syscall"
)

// HasSocket says whether this platform has the admin socket.
const HasSocket = true

// listenAdmin listens on the admin socket, mode 0600 from the first moment:
// the umask closes the window between bind and chmod in which another local
// user could connect.
func listenAdmin(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
