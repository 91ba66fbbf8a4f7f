package main

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// TestCleanAgreesWithTheRuneScan holds clean's bytewise fast path to the
// plain rule, rune by rune, on every byte alone and on random mixes of
// ASCII, layout characters, controls, bidi characters and broken UTF-8.
func TestCleanAgreesWithTheRuneScan(t *testing.T) {
	byRunes := func(s string, keepLayout bool) bool {
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if (r == utf8.RuneError && n <= 1) || unsafeRune(r, keepLayout) || r == '\\' && !keepLayout {
				return false
			}
			i += n
		}
		return true
	}
	var inputs []string
	for b := range 256 {
		inputs = append(inputs, string([]byte{byte(b)}), "a"+string([]byte{byte(b)})+"z")
	}
	pieces := []string{"a", "Z", " ", "~", "\\", "\t", "\n", "\r", "\x1b", "\x7f", "\u0085", "é", "日", "\u202e", "\u2066", "\u200f", "\xff", "\xe6\x97", "-"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		s := ""
		for range r.IntN(8) {
			s += pieces[r.IntN(len(pieces))]
		}
		inputs = append(inputs, s)
	}
	for _, s := range inputs {
		for _, keep := range []bool{false, true} {
			if got, want := clean(s, keep), byRunes(s, keep); got != want {
				t.Fatalf("clean(%q, %v) = %v, the rune scan says %v", s, keep, got, want)
			}
		}
	}
}
