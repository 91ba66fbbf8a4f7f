package v1alpha1

import (
	"sigs.k8s.io/yaml"
)

// ParseManifest decodes a manifest strictly, applies defaults (the name from
// fileName) and validates it. PLACEHOLDER: the apis work replaces this body.
//
// Errors: a *SyntaxError when data is not parseable YAML (such a file must
// never be rewritten); an ErrorList when it parses but breaks the schema or a
// rule (the task is then Rejected with reason InvalidSpec). On an ErrorList
// the returned Task is non-nil and holds whatever could be decoded, so that
// its status can still be written.
func ParseManifest(fileName string, data []byte) (*Task, error) {
	var t Task
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return nil, &SyntaxError{Err: err}
	}
	return &t, nil
}

// SyntaxError reports a manifest that is not parseable YAML.
type SyntaxError struct {
	// Line is the 1-based line of the error, 0 when unknown.
	Line int
	// Err is the parser's error.
	Err error
}

func (e *SyntaxError) Error() string { return "not parseable YAML: " + e.Err.Error() }

// Unwrap returns the parser's error.
func (e *SyntaxError) Unwrap() error { return e.Err }
