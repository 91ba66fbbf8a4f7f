// Command schemagen writes the JSON Schema of a Task manifest, generated
// from the Go types of pkg/apis/v1alpha1 (v1alpha1.JSONSchema):
//
//	go run ./hack/schemagen -o schemas/task.schema.json
//
// Without -o it prints to standard output. With -o the file is replaced
// atomically, and left alone when generation fails.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func main() {
	out := flag.String("o", "", "write the schema to this file instead of standard output")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	b, err := v1alpha1.JSONSchema()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".schemagen-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
