// Command coredns is CoreDNS with the plugins the local cluster's real node needs, and no
// others: kubernetes (answers for Services and pods, so that JobSet's pod host names resolve in
// its pods), forward (everything else, to this machine's resolver), bind, cache, errors and log.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func init() {
	dnsserver.Directives = []string{"bind", "errors", "log", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
