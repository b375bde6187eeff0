//go:build tools

// Package tools pins the command kueue.sh compiles; it is never built itself.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
