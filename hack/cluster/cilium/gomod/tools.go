//go:build tools

// Package tools pins the commands cilium.sh compiles; it is never built itself.
package tools

import (
	_ "github.com/cilium/cilium/daemon"
	_ "github.com/cilium/cilium/plugins/cilium-cni"
)
