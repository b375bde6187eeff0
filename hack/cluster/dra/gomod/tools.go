//go:build tools

// Package tools pins the command dra.sh compiles; it is never built itself.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
)
