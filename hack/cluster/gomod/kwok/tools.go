//go:build tools

// Package tools pins the commands build.sh compiles; it is never built itself.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
