//go:build tools

// Package tools pins the command objectstores.sh compiles; it is never built itself.
package tools

import (
	_ "github.com/fsouza/fake-gcs-server"
)
