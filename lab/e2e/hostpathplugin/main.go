// Command hostpathplugin is the one mode of SIG Storage's csi-driver-host-path that upstream's DRA
// e2e tests use (test/e2e/dra/utils/deploy.go, Driver.listen): a socket pair that forwards the
// kubelet's connections to the test driver inside e2e.test. The image of that name cannot be
// downloaded on the lab's machines and its module is not served by the Go module proxy here, so
// the lab builds this small stand-in and puts it in an image under the name the suite asks for.
//
//	hostpathplugin --endpoint=/var/lib/kubelet/plugins/x/dra.sock --proxy-endpoint=tcp://:9000
//
// Both sockets listen for as long as the process runs. Each connection accepted on --endpoint
// (kubelet) is paired with the next one accepted on --proxy-endpoint (e2e.test, which dials
// through port forwarding ahead of time: the kernel accepts those while nobody waits), and bytes
// are copied both ways until either side closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
)

func listen(endpoint string) (net.Listener, error) {
	network, address, ok := strings.Cut(endpoint, "://")
	if !ok {
		network, address = "unix", endpoint
	}
	if network == "unix" {
		// A socket left by an earlier run (killed with its exec session) would make bind fail.
		if err := os.Remove(address); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return net.Listen(network, address)
}

// pipe copies from one connection to the other and closes the receiver when the sender is done,
// so that the receiver's peer sees the end too.
func pipe(from, to net.Conn) {
	defer to.Close()
	_, _ = io.Copy(to, from)
}

func main() {
	endpoint := flag.String("endpoint", "", "the socket the kubelet connects to (unix path or unix://, tcp://)")
	proxyEndpoint := flag.String("proxy-endpoint", "", "the socket the test driver connects to (tcp://:PORT)")
	flag.Int("v", 0, "verbosity (accepted for compatibility; this program logs only errors and pairings)")
	flag.Parse()
	if *endpoint == "" || *proxyEndpoint == "" {
		fmt.Fprintln(os.Stderr, "hostpathplugin: both --endpoint and --proxy-endpoint are required (only the proxy mode exists here)")
		os.Exit(2)
	}
	inner, err := listen(*endpoint)
	if err != nil {
		log.Fatalf("listen on %s: %v", *endpoint, err)
	}
	outer, err := listen(*proxyEndpoint)
	if err != nil {
		log.Fatalf("listen on %s: %v", *proxyEndpoint, err)
	}
	log.Printf("proxying %s to %s", *endpoint, *proxyEndpoint)
	for {
		a, err := inner.Accept()
		if err != nil {
			log.Fatalf("accept on %s: %v", *endpoint, err)
		}
		b, err := outer.Accept()
		if err != nil {
			log.Fatalf("accept on %s: %v", *proxyEndpoint, err)
		}
		log.Printf("paired a connection of %s with one of %s", *endpoint, *proxyEndpoint)
		go pipe(a, b)
		go pipe(b, a)
	}
}
