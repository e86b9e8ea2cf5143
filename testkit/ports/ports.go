// Package ports hands out 127.0.0.1 TCP ports for processes a test starts
// and that bind them later (an agent's listen, NATS and cluster ports, a
// Consul or MinIO server).
//
// A port found by listening on port 0 and closing the listener is taken
// from the kernel's ephemeral range, the range every outgoing connection's
// local port and every later listen on port 0 are taken from too. Between
// the pick and the process's bind, another proxy or partner listening on
// port 0, or any connection going out, may get the same port, and the
// process fails to start ("address already in use"; seen in CI: an agent
// of a cell with a proxy on every link exited before it was ready). So the
// ports handed out here lie below the ephemeral range, where the kernel
// never picks one by itself, and none is handed out twice in a process.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: above the well-known and the
// commonly configured ports.
const lowest = 10000

var (
	mu        sync.Mutex
	handedOut = map[int]bool{}
	rangeOnce sync.Once
	// below is the first port of the kernel's ephemeral range (0: it
	// leaves too little room below it, so ports come from port 0).
	below int
)

// Free returns a 127.0.0.1 port that is free now, outside the kernel's
// ephemeral range when it can be, and not returned before in this process.
func Free() (int, error) {
	rangeOnce.Do(func() { below = ephemeralStart() })
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port, err := candidate()
		if err != nil {
			return 0, err
		}
		if port == 0 || handedOut[port] {
			continue
		}
		handedOut[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("free port: 1000 tries found none free and not handed out")
}

// FreeAddr is Free as "127.0.0.1:PORT".
func FreeAddr() (string, error) {
	p, err := Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// candidate is a port free at this moment (0: the one tried is taken).
func candidate() (int, error) {
	if below == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	port := lowest + rand.IntN(below-lowest)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, nil
	}
	l.Close()
	return port, nil
}

// ephemeralStart reads the first port of Linux's ephemeral range; 0 when
// it cannot, or when fewer than 2,000 ports lie between lowest and it.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first-lowest < 2000 {
		return 0
	}
	return first
}
