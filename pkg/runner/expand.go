package runner

import "strings"

// expand replaces $(NAME) references in s with lookup(NAME), following the
// semantics of Kubernetes (k8s.io/kubernetes
// third_party/forked/golang/expansion): "$$" is an escaped "$"; a reference
// whose name lookup does not know is left as written; a "$" that does not
// start "$(" or "$$", or a "$(" without a closing ")", is kept as is. Values
// are not expanded again.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	checkpoint := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:i])
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Incomplete reference: keep "$(" and scan on.
				b.WriteString("$(")
				i++
				break
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(s[i+1])
			i++
		}
		checkpoint = i + 1
	}
	b.WriteString(s[checkpoint:])
	return b.String()
}
