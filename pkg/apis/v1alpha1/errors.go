package v1alpha1

import (
	"strconv"
	"strings"
)

// Rules name the kind of problem a FieldError reports; they are stable and
// machine-readable, the Detail is for humans.
const (
	// RuleUnknownField: a key that the schema does not know (a typo such as perltem).
	RuleUnknownField = "unknownField"
	// RuleDuplicateKey: the same key twice in one mapping.
	RuleDuplicateKey = "duplicateKey"
	// RuleType: a value of the wrong YAML type (a list where a string is expected).
	RuleType = "type"
	// RuleDocument: more than one YAML document in the file.
	RuleDocument = "singleDocument"
	// RuleRequired: a required field is missing or empty.
	RuleRequired = "required"
	// RuleOneOf: a constraint between sibling fields (exactly one of ...).
	RuleOneOf = "oneOf"
	// RuleRange: a number or quantity outside its bounds, including bounds
	// given by another field (batch.max >= batch.min).
	RuleRange = "range"
	// RuleEnum: a value outside a closed set.
	RuleEnum = "enum"
	// RuleFormat: a string of the wrong shape (name, env var name, glob, quantity).
	RuleFormat = "format"
	// RuleUnique: a repeated entry in a list that must not repeat.
	RuleUnique = "unique"
	// RuleSelfReference: a task depending on itself.
	RuleSelfReference = "selfReference"
	// RuleTooMany: the last entry of a truncated ErrorList (see MaxErrors).
	RuleTooMany = "tooManyErrors"
)

// FieldError is one problem found in a manifest.
type FieldError struct {
	// Path is the field as the user wrote it: spec.resources.batch.max,
	// spec.command[0], metadata.labels[project]. Empty for the whole file.
	Path string
	// Rule is one of the Rule* constants.
	Rule string
	// Detail says what the rule demands, e.g. "must be >= batch.min (1)".
	Detail string
	// Value is the offending value as text, empty when there is none to
	// show (a missing field).
	Value string
	// Line is the 1-based line in the manifest, 0 when unknown (a defaulted
	// field, or a Task validated without its source).
	Line int
}

// Error formats the problem as "path: detail, got value", e.g.
// "spec.resources.batch.max: must be >= batch.min (1), got 0". The line is
// not part of it; ErrorList.Error adds it.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Detail)
	if e.Value != "" {
		b.WriteString(", got ")
		b.WriteString(e.Value)
	}
	return b.String()
}

// ErrorList is every problem found in one manifest. ParseManifest returns
// all of them at once, sorted by line (unknown lines last).
type ErrorList []*FieldError

// Error joins the problems with "; ", each prefixed with "line N: " when its
// line is known.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteString("; ")
		}
		if e.Line > 0 {
			b.WriteString("line ")
			b.WriteString(strconv.Itoa(e.Line))
			b.WriteString(": ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Err returns l as an error, or nil when l is empty. Use it rather than
// assigning an ErrorList to an error variable: a nil ErrorList stored in an
// error interface is not a nil error.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// Paths returns the paths of the problems, in order; handy in tests and logs.
func (l ErrorList) Paths() []string {
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.Path
	}
	return out
}
