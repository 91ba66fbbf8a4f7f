package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

type fixedBudgets governor.BudgetsView

func (f fixedBudgets) Budgets() governor.BudgetsView { return governor.BudgetsView(f) }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestEndpoints(t *testing.T) {
	m := New(fixedBudgets{
		Memory:       governor.BudgetState{Capacity: 8 << 30, Margin: 512 << 20, Reserved: 3 << 30, Free: 4.5 * (1 << 30)},
		CPU:          governor.BudgetState{Capacity: 2, Reserved: 1, Free: 1},
		Reservations: 2, Generation: 3, LoadDeferred: true,
	})
	h := m.Handler(false)
	if code, _ := get(t, h, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	if code, _ := get(t, m.Handler(true), "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ with --pprof: %d, want 200", code)
	}
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the spool is listed: %d, want 503", code)
	}
	m.SetReady(true)
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when ready: %d", code)
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	m.ObserveDecision(governor.Decision{Verdict: governor.Wait, Reason: governor.ReasonInsufficientMemory})
	m.ObserveDecision(governor.Decision{Verdict: governor.Admit, Reason: governor.ReasonFits})
	m.ObserveBatch("features", 1500*time.Millisecond, 300<<20)
	m.ObserveStatusWrite(2*time.Millisecond, nil)
	m.ObserveStatusWrite(time.Millisecond, errors.New("conflict"))
	m.ObserveListing(30*time.Millisecond, true)
	m.ObserveListing(time.Millisecond, false)
	m.ObserveListing(time.Millisecond, false)
	m.SetPhases(map[v1alpha1.Phase]int{v1alpha1.PhaseRunning: 2, v1alpha1.PhaseDone: 5})

	code, body := get(t, h, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`lardon3d_budget_capacity{resource="memory"} 8.589934592e+09`,
		`lardon3d_budget_free{resource="memory"} 4.831838208e+09`,
		`lardon3d_budget_reserved{resource="cpu"} 1`,
		`lardon3d_governor_active_reservations 2`,
		`lardon3d_governor_generation 3`,
		`lardon3d_governor_admission_deferred{signal="load"} 1`,
		`lardon3d_governor_admission_deferred{signal="io_pressure"} 0`,
		`lardon3d_governor_decisions_total{reason="InsufficientMemory",verdict="WAIT"} 1`,
		`lardon3d_governor_decisions_total{reason="Fits",verdict="ADMIT"} 1`,
		`lardon3d_tasks{phase="Running"} 2`,
		`lardon3d_tasks{phase="Pending"} 0`,
		`lardon3d_batch_duration_seconds_count{class="features"} 1`,
		`lardon3d_batch_peak_memory_bytes_sum{class="features"} 3.145728e+08`,
		`lardon3d_status_write_duration_seconds_count{result="error"} 1`,
		`lardon3d_get_listing_duration_seconds_count{result="served"} 1`,
		`lardon3d_get_listing_duration_seconds_count{result="declined"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
