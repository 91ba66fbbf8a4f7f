package runner

import "testing"

// The cases follow Kubernetes' third_party/forked/golang/expansion tests,
// which define the semantics this package copies.
func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": "",
	}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	cases := []struct{ name, in, want string }{
		{"whole string", "$(VAR_A)", "A"},
		{"repeat", "$(VAR_A)-$(VAR_A)", "A-A"},
		{"beginning", "$(VAR_A)-1", "A-1"},
		{"middle", "___$(VAR_B)___", "___B___"},
		{"end", "___$(VAR_C)", "___C"},
		{"compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"},
		{"escape and expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"},
		{"compound escape", "$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"},
		{"mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"},
		{"backslash escape ignored", `foo\$(VAR_C)bar`, `foo\Cbar`},
		{"two backslashes", `foo\\$(VAR_C)bar`, `foo\\Cbar`},
		{"nested var references", "$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"},
		{"nested var references second type", "$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"},
		{"value is a reference", "$(VAR_REF)", "$(VAR_A)"},
		{"value is a reference x 2", "%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"},
		{"empty var", "foo$(VAR_EMPTY)bar", "foobar"},
		{"unterminated expression", "foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"},
		{"expression without operator", "f00__(VAR_A)__", "f00__(VAR_A)__"},
		{"shell special vars pass through", "$?_boo_$!", "$?_boo_$!"},
		{"bare operators are ignored", "$VAR_A", "$VAR_A"},
		{"undefined vars are passed through", "$(VAR_DNE)", "$(VAR_DNE)"},
		{"even operators, var undefined", "$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"},
		{"even operators, var defined", "$$$$$$(VAR_A)", "$$$(VAR_A)"},
		{"odd operators, var undefined", "$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"},
		{"odd operators, var defined", "$$$$$$$(VAR_A)", "$$$A"},
		{"missing open expression", "$VAR_A)", "$VAR_A)"},
		{"shell syntax ignored", "${VAR_A}", "${VAR_A}"},
		{"trailing incomplete expression", "$(VAR_B)_______$(A", "B_______$(A"},
		{"trailing incomplete expression, no content", "$(VAR_C)_______$(", "C_______$("},
		{"operator at end preserved", "$(VAR_A)foobarzab$", "Afoobarzab$"},
		{"shell escaped incomplete expr", `foo-\$(VAR_A`, `foo-\$(VAR_A`},
		{"lots of $( in middle", "--$($($($($--", "--$($($($($--"},
		{"lots of $( in beginning", "$($($($($--foo$(", "$($($($($--foo$("},
		{"lots of $( at end", "foo0--$($($($(", "foo0--$($($($("},
		{"escaped operators in names are not escaped", "$(foo$$var)", "$(foo$$var)"},
		{"newline not expanded", "\n", "\n"},
		{"empty", "", ""},
		{"lone operator", "$", "$"},
		{"empty name undefined", "$()", "$()"},
	}
	for _, tc := range cases {
		if got := expand(tc.in, lookup); got != tc.want {
			t.Errorf("%s: expand(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestBuildEnv(t *testing.T) {
	s := Spec{
		Task: "t1", Command: []string{"prog", "$(LARDON3D_ITEMS_FILE)", "$$(HOME)", "$(NOPE)", "$(LATE)"},
		Items: []string{"a", "b", "c"}, BatchIndex: 2, BatchStart: 10, ItemsTotal: 40,
		Threads: 3, MemoryLimit: 1 << 30, ScratchDir: "/scratch/x",
		Env: []EnvVar{
			{"OUT", "$(LARDON3D_SCRATCH_DIR)/b$(LARDON3D_BATCH_INDEX)"},
			{"EARLY", "$(LATE)"}, // LATE is not yet defined: left as written
			{"LATE", "late"},
			{"OMP_NUM_THREADS", "1"}, // spec.env wins over the contract's default
			{"HOME", "/h2"},
		},
	}
	env, argv, err := buildEnv([]string{"PATH=/bin", "HOME=/root", "OMP_NUM_THREADS=64", "junk"}, s, "/run/items")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, kv := range env {
		n, v, _ := cutEq(kv)
		if _, dup := got[n]; dup {
			t.Errorf("duplicate %s at %d", n, i)
		}
		got[n] = v
	}
	want := map[string]string{
		"PATH": "/bin", "HOME": "/h2", "LARDON3D_TASK": "t1", "LARDON3D_BATCH_INDEX": "2",
		"LARDON3D_BATCH_START": "10", "LARDON3D_BATCH_SIZE": "3", "LARDON3D_ITEMS_TOTAL": "40",
		"LARDON3D_ITEMS_FILE": "/run/items", "LARDON3D_THREADS": "3", "LARDON3D_MEMORY_LIMIT": "1073741824",
		"LARDON3D_SCRATCH_DIR": "/scratch/x", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "3",
		"MKL_NUM_THREADS": "3", "GOMAXPROCS": "3", "OUT": "/scratch/x/b2", "EARLY": "$(LATE)", "LATE": "late",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("env has %d variables, want %d: %v", len(got), len(want), env)
	}
	if env[0] != "PATH=/bin" {
		t.Errorf("inherited order not kept: %v", env[:2])
	}
	wantArgv := []string{"prog", "/run/items", "$(HOME)", "$(NOPE)", "late"}
	for i := range wantArgv {
		if argv[i] != wantArgv[i] {
			t.Errorf("argv[%d] = %q, want %q", i, argv[i], wantArgv[i])
		}
	}
	s.Env = []EnvVar{{"A=B", "x"}}
	if _, _, err := buildEnv(nil, s, "f"); err == nil {
		t.Error("env name with '=' accepted")
	}
}

func cutEq(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func TestPercent(t *testing.T) {
	if got := percent(0.1); got != "10%" {
		t.Errorf("percent(0.1) = %q", got)
	}
}
