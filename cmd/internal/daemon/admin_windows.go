package daemon

import (
	"errors"
	"net"
)

// HasSocket is false on Windows. Windows has AF_UNIX sockets, but a socket
// file's mode bits do not limit who may connect there, so an admin socket
// would hand jobs, retry and resolve to every local account. Without it,
// those commands open the state file directly while the daemon is stopped.
const HasSocket = false

func listenAdmin(string) (net.Listener, error) {
	return nil, errors.New("splatd has no admin socket on Windows")
}
