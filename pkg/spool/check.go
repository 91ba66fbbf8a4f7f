package spool

import (
	"bytes"
	"strings"

	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"
)

// The first write-back into a file (its layout unknown) must prove that
// the user's part, every byte outside the status entry, decodes to the same
// values after the splice and that the file keeps a JSON form. Decoding the
// whole edited file does that but parses the status block again, twice
// (yaml.v3 and YAMLToJSON), after checkBlock parsed it once, and the block
// is often bigger than the user's part. placeholder gives a small block
// that the edit is checked with instead: the same splice (same offsets,
// same lead) with the placeholder in place of the block decodes, outside
// the status entry, to what the real edit decodes to, and fails exactly
// when it fails (but for the alias limit below), because what the parser does outside the entry does not
// depend on what is inside it, only on what both blocks share:
//
//   - the first line, pad + "status:" + nl, identical: the parser reaches
//     the status value in the same state (the bytes before are the same);
//   - every other line indented deeper than the top level (pad + two
//     spaces at least), none blank, each ending with nl (but the last one
//     where the real block lost it at the end of a file without a final
//     newline, and then the placeholder's too): the status value goes on
//     until the first line at the top level or less, in both;
//   - the same state of the scanner at the end of the block, the only
//     thing that looks past it: the block-indentation stack (the emitter
//     indents every level by two spaces and its sequences not at all, so
//     a last line at depth k leaves pad, pad+2, ..., pad+2k, as the
//     placeholder's chain of k nested keys does) and the style of the last
//     scalar. A plain scalar scans on into the following lines (blank
//     lines, and a tab in their indentation is an error or not depending on
//     the innermost indentation), a double-quoted one does not (there a tab
//     after a line's leading spaces is always an error). This is why a one-line
//     "status:\n  phase: Pending" placeholder would not do: after a block
//     ending with "    itemsTotal: 0", the line "   \t" (three spaces, a
//     tab) is refused by both parsers, and after "  phase: Pending" taken;
//   - no anchor, alias, tag, comment or document marker in either block
//     (the emitter's keys are words, its plain scalars start with a letter,
//     a digit or '-', everything else is double-quoted on one line; checkBlock
//     proves the block decodes to the status, which a stray anchor or tag
//     would change), so nothing after the entry can refer into it and
//     nothing in it can refer out;
//   - every top-level key a plain or quoted string (tag !!str), so that
//     only the key "status" decodes to "status" (a !!binary key or a merge
//     key "<<" could set it too, and would make the check compare the
//     placeholder's value, not the user's part: such a file gets the full
//     check).
//
// A line after the entry indented deeper than the top level would be read
// into the status value with either block, and both checks then fail (the
// value is not the block's, nor the placeholder's); entryRange never leaves
// one there anyway. The status value itself is the block's by checkBlock,
// which reads it alone, and reading it in the file cannot differ since the
// parser enters it in the same state as alone (the first point) and reads
// no byte before it again.
//
// What the full check proved and this one does not: that yaml.v3 (which
// ParseManifest uses), not only the YAMLToJSON reader of checkBlock, reads
// the block. Every later write
// (replaceStatusAt) already relies on that without a check; it is the
// emitter's tested property (TestEmitStatusRoundTrip reads every emitted
// block with yaml.v3). And one way the checks differ, in the safe
// direction: both yaml libraries refuse, against alias bombs, a document
// whose decoded nodes are nearly all (99 % in a small file) alias
// expansions, counting as they go; the real block's forty-odd nodes lower
// that ratio, the placeholder's few do not, so a file just at that limit,
// with the status entry before its aliases, may be refused here where the
// full check took it (TestPlaceholderAliasLimit). FuzzPlaceholderCheck
// compares the two checks on arbitrary files.
//
// placeholder returns that block for the real block (its final line ending
// already trimmed when trim) and the value yaml.v3 decodes its status to;
// ok is false when the block or the document is not of the shape the
// argument needs, and the edit then gets the full check.
func placeholder(d *doc, block []byte, trim bool) (ph []byte, value any, ok bool) {
	if len(block) == 0 || !plainKeys(d.root) {
		return nil, nil, false
	}
	pad := strings.Repeat(" ", d.indent)
	head := pad + statusKey + ":" + d.nl
	if !bytes.HasPrefix(block, []byte(head)) {
		return nil, nil, false
	}
	body := block[len(head):]
	if !trim {
		if !bytes.HasSuffix(body, []byte(d.nl)) {
			return nil, nil, false
		}
		body = body[:len(body)-len(d.nl)]
	}
	if len(body) == 0 {
		return nil, nil, false
	}
	// Every line of body: pad, two spaces or more, then not a blank.
	deeper := pad + "  "
	last := body
	for rest := body; ; {
		line := rest
		i := bytes.Index(rest, []byte(d.nl))
		if i >= 0 {
			line, rest = rest[:i], rest[i+len(d.nl):]
		}
		if !bytes.HasPrefix(line, []byte(deeper)) || len(bytes.TrimLeft(line, " ")) == 0 || bytes.ContainsAny(line, "\r\n\t") {
			return nil, nil, false
		}
		if i < 0 {
			last = line
			break
		}
	}
	// The last line: pad, 2k spaces, a word key, ": " and a plain scalar
	// starting with a letter, a digit or '-', or a double-quoted one.
	rest := last[len(pad):]
	sp := len(rest) - len(bytes.TrimLeft(rest, " "))
	rest = rest[sp:]
	if sp%2 != 0 {
		return nil, nil, false
	}
	k := 0
	for k < len(rest) && (rest[k] >= 'a' && rest[k] <= 'z' || rest[k] >= 'A' && rest[k] <= 'Z') {
		k++
	}
	if k == 0 || !bytes.HasPrefix(rest[k:], []byte(": ")) || k+2 >= len(rest) {
		return nil, nil, false
	}
	v := rest[k+2:]
	var scalar string
	switch c := v[0]; {
	case c == '"' && len(v) >= 2 && v[len(v)-1] == '"':
		scalar = `"x"`
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' && len(v) > 1 && v[1] != ' ':
		scalar = "x"
	default:
		return nil, nil, false
	}
	depth := sp / 2
	b := make([]byte, 0, len(head)+depth*(len(pad)+2*depth+4)+8)
	b = append(b, head...)
	for j := 1; j < depth; j++ {
		b = append(b, pad...)
		b = append(b, strings.Repeat("  ", j)...)
		b = append(b, "p:"...)
		b = append(b, d.nl...)
	}
	b = append(b, pad...)
	b = append(b, strings.Repeat("  ", depth)...)
	b = append(b, "x: "...)
	b = append(b, scalar...)
	if !trim {
		b = append(b, d.nl...)
	}
	value = map[string]any{"x": "x"}
	for j := 1; j < depth; j++ {
		value = map[string]any{"p": value}
	}
	return b, value, true
}

// plainKeys reports whether every key of the mapping m is a scalar tagged
// !!str (a plain or quoted string, which decodes to its text).
func plainKeys(m *yamlv3.Node) bool {
	for i := 0; i < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind != yamlv3.ScalarNode || k.ShortTag() != "!!str" {
			return false
		}
	}
	return true
}
