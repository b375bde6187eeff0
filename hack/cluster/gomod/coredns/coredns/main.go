// Command coredns is CoreDNS with only the plugins our clusters' Corefiles use, instead of
// all ~60 of upstream's default build (its cloud backends pull in the AWS, Azure and Google
// SDKs and double the cold compile). build.sh builds it as $BIN/coredns.
//
// Two Corefiles run it:
//   - the real node's (hack/cluster/node.sh): bind, errors, health, ready, kubernetes, cache;
//   - kubeadm's default (the kind node image of hack/kind/node-image.sh ships this binary as
//     its CoreDNS image): errors, health, ready, kubernetes, prometheus, forward, cache, loop,
//     reload, loadbalance.
//
// A plugin is in the build when its package is imported (its init registers it with Caddy);
// Corefile directives run in the order of dnsserver.Directives, set below to upstream's order
// (core/dnsserver/zdirectives.go, generated from plugin.cfg) restricted to these plugins. A
// directive the list lacks is rejected when the Corefile is parsed, so a Corefile that needs
// another plugin fails at start, not at query time. build.sh's sanity check serves a copy of
// the node's Corefile with this binary and queries it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives: upstream's order, only the plugins imported above ("prometheus" is the
// directive of plugin/metrics).
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"prometheus",
	"errors",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
