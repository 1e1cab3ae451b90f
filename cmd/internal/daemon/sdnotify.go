package daemon

import (
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// sdNotifier speaks systemd's sd_notify protocol (a datagram to
// $NOTIFY_SOCKET). It is a no-op when the variable is unset, so the same
// binary runs under systemd, in a container or in a terminal.
type sdNotifier struct {
	addr *net.UnixAddr
}

func newSDNotifier(getenv func(string) string) *sdNotifier {
	name := getenv("NOTIFY_SOCKET")
	if name == "" {
		return &sdNotifier{}
	}
	if strings.HasPrefix(name, "@") { // abstract namespace
		name = "\x00" + name[1:]
	}
	return &sdNotifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
}

// send writes one notification such as "READY=1" or "STATUS=…". Errors are
// returned for logging; systemd being away must never stop the daemon.
func (n *sdNotifier) send(state string) error {
	if n.addr == nil {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}

// watchdogInterval is how often to send WATCHDOG=1: half of WATCHDOG_USEC,
// and only when WATCHDOG_PID is unset or names this process. Zero means off.
func watchdogInterval(getenv func(string) string) time.Duration {
	usec, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
