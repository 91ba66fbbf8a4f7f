// Package v1alpha1 is the Task API: the manifest users drop into the spool
// directory (apiVersion lardon3d.io/v1alpha1, kind Task) and the status the
// controller writes back into it.
//
// It owns the Go types (types.go), strict decoding with line numbers
// (ParseManifest, and DecodeStrict for other files such as the controller's
// --config), the "did you mean" of every name (ClosestName), quantity
// hints (QuantityError), warnings for legal but likely mistaken values
// (Warnings), defaults (SetDefaults), validation (Validate), the
// spec's identity (SpecHash), item resolution (ResolveItems,
// ResolveWorkingDir, Glob with ** and braces), the phase machine
// (AllowedTransition, IsTerminal, and TaskStatus.SetPhase, through which
// every phase is written), the one way to set a condition
// (TaskStatus.SetCondition), when two statuses are the same (SameStatus),
// and the JSON Schema generated from the types (JSONSchema, committed as
// schemas/task.schema.json by `make schemas`).
//
// Decoding: the YAML is parsed into a node tree (YAML 1.2, like editors),
// walked along the Go types so that every unknown field, duplicate key and
// wrongly typed value is reported with its line, and only then converted to
// a Task through strict JSON decoding. Validation uses go-playground
// validator tags plus cross-field checks; every FieldError carries the path
// as the user wrote it (spec.resources.batch.max), the rule, the value and
// the line. All problems of a file come at once.
//
// It must never: read or write the spool (package spool does), rewrite a
// file, or talk to the governor; apart from ResolveItems and Glob, which list
// the working directory, it does no I/O. It holds no locks and no global
// mutable state besides the validator built once.
package v1alpha1
