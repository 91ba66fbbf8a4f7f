package runner

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// BatchSize is the number of the batch's items: len(Items), or ItemCount
// when the items are a count's range.
func (s Spec) BatchSize() int64 {
	if s.Items == nil {
		return max(s.ItemCount, 0)
	}
	return int64(len(s.Items))
}

// ItemStrings are the batch's items as strings; a count's range is made
// here, one string per item, for a caller that needs them so (a Pod's
// items, bounded by its own cap).
func (s Spec) ItemStrings() []string {
	if s.Items != nil || s.ItemCount <= 0 {
		return s.Items
	}
	out := make([]string, s.ItemCount)
	for i := range out {
		out[i] = strconv.FormatInt(s.BatchStart+int64(i), 10)
	}
	return out
}

// checkItems refuses an item that would not be one line of the items
// file.
func checkItems(s Spec) error {
	for _, it := range s.Items {
		if strings.ContainsAny(it, "\n\r") {
			return fmt.Errorf("%w: item %q contains a line break", ErrInvalidSpec, it)
		}
	}
	return nil
}

// writeItemsTo writes the items file's content, one item per line, and
// returns its size. A count's range is written straight as its decimals:
// no string per item and, through a buffered w, no list held whole, so a
// batch of millions of counted items costs the controller a buffer.
func writeItemsTo(w io.Writer, s Spec) (int64, error) {
	var n int64
	if s.Items == nil {
		var buf []byte
		for i := range s.BatchSize() {
			buf = strconv.AppendInt(buf[:0], s.BatchStart+i, 10)
			buf = append(buf, '\n')
			m, err := w.Write(buf)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	nl := []byte{'\n'}
	for _, it := range s.Items {
		m, err := io.WriteString(w, it)
		n += int64(m)
		if err == nil {
			m, err = w.Write(nl)
			n += int64(m)
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
