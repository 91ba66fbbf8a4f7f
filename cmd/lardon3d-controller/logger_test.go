package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleLogWritesListsAsText: the console log writes a list of
// strings (the spools of "serving") and an object as their JSON text, not
// as the codes of its bytes, and escapes what a terminal would obey.
func TestConsoleLogWritesListsAsText(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&globals{logFormat: "console", logLevel: "info"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Strs("spools", []string{"/tmp/a b", "/srv/spool\x1b[2J"}).
		Interface("limits", map[string]int{"n": 2}).Int("count", 3).Str("task", "t1").Msg("serving")
	// Colours off: the console writer's own escapes are not the fields'.
	out := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(buf.String(), "")
	for _, want := range []string{`spools=["/tmp/a b","/srv/spool\\u001b[2J"]`, `limits={"n":2}`, "count=3", "task=t1", "serving"} {
		if !strings.Contains(out, want) {
			t.Errorf("console log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "[91 34") || strings.Contains(out, "\x1b[2J") {
		t.Errorf("console log wrote byte codes, or a raw escape:\n%q", out)
	}
}
