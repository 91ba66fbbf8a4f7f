package governor

import "testing"

func TestCountSaysOneInTheSingular(t *testing.T) {
	for _, c := range []struct {
		n    int64
		noun string
		want string
	}{
		{1, "thread", "1 thread"},
		{2, "thread", "2 threads"},
		{0, "batch", "0 batches"},
		{1, "batch", "1 batch"},
		{3, "batch", "3 batches"},
		{1, "item", "1 item"},
	} {
		if got := Count(c.n, c.noun); got != c.want {
			t.Errorf("Count(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}
