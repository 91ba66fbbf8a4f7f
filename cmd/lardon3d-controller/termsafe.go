package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// File names and manifest fields are the users' (or an attacker's) bytes:
// none reaches a terminal as is. cell escapes one value for a table or a
// describe line (layout characters included); safeText escapes a whole
// rendered text but keeps its newlines and tabs, as the last line of
// defence.

// cell escapes s for one table cell or field: every control character
// (tab and newline included), bidirectional formatting character and
// invalid UTF-8 byte becomes a Go-style escape.
func cell(s string) string { return escape(s, false, false) }

// safeText escapes a rendered text: as cell, but newlines and tabs stay.
func safeText(s string) string { return escape(s, true, false) }

// safeJSON escapes what encoding/json leaves raw (DEL, C1 controls, bidi
// characters) as \u escapes, valid in the JSON strings they can only be in.
func safeJSON(s string) string { return escape(s, true, true) }

func escape(s string, keepLayout, json bool) string {
	if clean(s, keepLayout) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case json && unsafeRune(r, keepLayout):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && !keepLayout:
			b.WriteString(`\\`)
		case r == '\t' && !keepLayout:
			b.WriteString(`\t`)
		case r == '\n' && !keepLayout:
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == 0x1b:
			b.WriteString(`\e`)
		case unsafeRune(r, keepLayout) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r, keepLayout):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean reports whether escape leaves s as it is: no invalid UTF-8, no
// unsafe rune, no backslash unless keepLayout.
func clean(s string, keepLayout bool) bool {
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f && c != '\\' || keepLayout && (c == '\n' || c == '\t' || c == '\\') {
			i++ // printable ASCII: the whole of most texts, read bytewise
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || unsafeRune(r, keepLayout) || r == '\\' && !keepLayout {
			return false
		}
		i += n
	}
	return true
}

// unsafeRune reports a rune a terminal may act on: C0 and C1 controls,
// DEL, and the bidirectional embedding, override and isolate characters.
func unsafeRune(r rune, keepLayout bool) bool {
	if keepLayout && (r == '\n' || r == '\t') {
		return false
	}
	switch {
	case unicode.IsControl(r):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
