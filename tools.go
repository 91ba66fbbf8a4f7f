//go:build tools

// Package tools pins dependencies that packages of this module are adopting,
// so that go mod tidy keeps them while the code that uses them lands.
package tools

import (
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/go-playground/validator/v10"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/procfs"
	_ "github.com/rs/zerolog"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/utils/clock/testing"
	_ "pgregory.net/rapid"
	_ "sigs.k8s.io/yaml"
	_ "sigs.k8s.io/yaml/goyaml.v3"
)
