package main

import (
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// alignColumns lays out lines (cells separated by tabs, no newline), each
// followed by a newline, as text/tabwriter.NewWriter(w, 0, 0, padding, ' ',
// 0) does: every cell but a line's last is padded with spaces to the
// width of its column's widest cell (in runes) plus padding. It writes the
// text once, into a buffer of its final size; tabwriter keeps a record of
// each cell and copies the text three times, a fifth of get's time for ten
// thousand rows. A table whose lines do not all have as many cells, or
// that holds a character tabwriter treats as a layout command (newline,
// vertical tab, form feed), goes through tabwriter itself, whose column
// blocks then apply (TestAlignColumnsIsTabwriter holds the two to the same
// output).
func alignColumns(lines []string, padding int) string {
	if out, _, ok := layColumns(lines, padding, nil); ok {
		return out
	}
	return viaTabwriter(lines, padding)
}

// tablePrinter lays out the tables of one listing and of the rows printed
// after it (get -w), as cli-runtime's printers do: each column is padded
// to the widest cell it has held in anything printed so far, so that later
// rows line up under the first table's header and a column never gets
// narrower. A table it cannot lay out itself (see alignColumns) goes
// through tabwriter, alone.
type tablePrinter struct {
	padding int
	// widths are the widest cell of each column printed so far, in
	// runes, padding excluded.
	widths []int
}

// lay lays out lines (cells separated by tabs, no newline) each followed
// by a newline, and remembers the widths of their columns.
func (p *tablePrinter) lay(lines []string) string {
	if out, widths, ok := layColumns(lines, p.padding, p.widths); ok {
		p.widths = widths
		return out
	}
	return viaTabwriter(lines, p.padding)
}

// layColumns is alignColumns for a table of lines with as many cells
// each and no layout character, each column at least as wide as least
// says (in runes, padding excluded; least may be shorter than a line's
// cells, or nil); it returns the widths it used. ok is false for any
// other table.
func layColumns(lines []string, padding int, least []int) (out string, widths []int, ok bool) {
	if len(lines) == 0 {
		return "", least, true
	}
	cells := strings.Count(lines[0], "\t")
	widths = make([]int, max(cells, len(least)))
	copy(widths, least)
	size := 0 // of the output: each aligned cell's bytes, its tab turned into its padding
	for _, line := range lines {
		if !plainLine(line) || strings.Count(line, "\t") != cells {
			return "", nil, false
		}
		size += len(line) + 1 - cells // its newline in, its tabs out
		for c, rest := 0, line; c < cells; c++ {
			tab := strings.IndexByte(rest, '\t')
			runes := utf8.RuneCountInString(rest[:tab])
			widths[c] = max(widths[c], runes)
			size -= runes
			rest = rest[tab+1:]
		}
	}
	for c := range cells {
		size += len(lines) * (widths[c] + padding)
	}
	var b strings.Builder
	b.Grow(size)
	for _, line := range lines {
		rest := line
		for c := range cells {
			tab := strings.IndexByte(rest, '\t')
			b.WriteString(rest[:tab])
			for pad := widths[c] + padding - utf8.RuneCountInString(rest[:tab]); pad > 0; pad-- {
				b.WriteByte(' ')
			}
			rest = rest[tab+1:]
		}
		b.WriteString(rest)
		b.WriteByte('\n')
	}
	return b.String(), widths, true
}

// plainLine reports whether line is cells and tabs alone: no newline,
// vertical tab or form feed.
func plainLine(line string) bool {
	return strings.IndexByte(line, '\n') < 0 && strings.IndexByte(line, '\v') < 0 && strings.IndexByte(line, '\f') < 0
}

// viaTabwriter is alignColumns done by text/tabwriter, for the tables it
// does not lay out itself.
func viaTabwriter(lines []string, padding int) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, padding, ' ', 0)
	for _, line := range lines {
		_, _ = tw.Write([]byte(line + "\n"))
	}
	_ = tw.Flush()
	return b.String()
}
