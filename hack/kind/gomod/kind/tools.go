//go:build tools

// Package tools pins the command hack/kind/build.sh compiles; it is never built itself.
package tools

import (
	_ "sigs.k8s.io/kind"
)
