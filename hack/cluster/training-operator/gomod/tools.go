//go:build tools

// Package tools pins the command training-operator.sh compiles; it is never built itself.
package tools

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
)
