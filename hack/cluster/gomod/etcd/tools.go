//go:build tools

// Package tools pins the commands build.sh compiles; it is never built itself.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
