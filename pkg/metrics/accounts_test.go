package metrics

import (
	"fmt"
	"strings"
	"testing"
)

// The accounts' standings are exported per account, and the label stays
// bounded: past MaxAccountLabels accounts the rest are summed as "(other)".
func TestAccountsAreExportedWithABoundedLabel(t *testing.T) {
	m := New(nil)
	var samples []AccountSample
	for i := range MaxAccountLabels + 8 {
		samples = append(samples, AccountSample{Account: fmt.Sprintf("user%02d", i), Usage: 10, MemoryBytes: 1 << 30, Running: 1, Pending: 2})
	}
	m.WatchAccounts(func() []AccountSample { return samples })
	_, body := get(t, m.Handler(false), "/metrics")
	if !strings.Contains(body, `lardon3d_account_reserved_memory_bytes{account="user00"} 1.073741824e+09`) ||
		!strings.Contains(body, `lardon3d_account_tasks{account="user00",state="pending"} 2`) {
		t.Errorf("user00's series missing:\n%s", body)
	}
	if n := strings.Count(body, "lardon3d_account_usage_byte_seconds{"); n != MaxAccountLabels {
		t.Errorf("%d usage series, want %d", n, MaxAccountLabels)
	}
	if !strings.Contains(body, `lardon3d_account_tasks{account="(other)",state="running"} 9`) {
		t.Errorf("the accounts past the bound are not summed as (other):\n%s", body)
	}
	if strings.Contains(body, `account="user39"`) {
		t.Error("an account past the bound has its own label")
	}
}
