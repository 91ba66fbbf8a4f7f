package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A batch run as another uid than the controller's starts from its
// user's login environment, nothing of the controller's; one run as the
// controller's own user (no User, or root's own task for a root
// controller) from the controller's environment, as before.
func TestBaseEnvOfAnotherUserIsBuiltFromNothing(t *testing.T) {
	controller := []string{"AWS_SECRET_ACCESS_KEY=s3cr3t", "PATH=/root/bin:/usr/sbin:/usr/bin", "HOME=/root", "LD_PRELOAD=/root/x.so"}
	ann := &User{UID: 1000, GID: 1000, Name: "ann", Home: "/home/ann", Shell: "/bin/bash"}
	for _, tc := range []struct {
		name  string
		runAs *User
		euid  int
		want  []string
	}{
		{"another user", ann, 0, []string{"HOME=/home/ann", "USER=ann", "LOGNAME=ann", "SHELL=/bin/bash", "PATH=" + DefaultPath}},
		{"no passwd entry", &User{UID: 4242, GID: 4242, Home: "/"}, 0, []string{"HOME=/", "SHELL=" + DefaultShell, "PATH=" + DefaultPath}},
		{"no home", &User{UID: 4242}, 0, []string{"SHELL=" + DefaultShell, "PATH=" + DefaultPath}},
		{"root's own task", &User{UID: 0, Name: "root", Home: "/root"}, 0, controller},
		{"the controller's own user", nil, 1000, controller},
		{"no user", nil, 0, controller},
	} {
		if got := baseEnv(tc.runAs, tc.euid, controller); !slices.Equal(got, tc.want) {
			t.Errorf("%s: base %q, want %q", tc.name, got, tc.want)
		}
	}
	// Over that base, the batch's variables, then spec.env, which may set
	// PATH and SHELL.
	s := Spec{Task: "t", Command: []string{"true"}, Items: []string{"a"}, Threads: 1, User: ann,
		Env: []EnvVar{{"PATH", "/opt/ann/bin:$(PATH)"}, {"SHELL", "/bin/zsh"}}}
	env, _, err := buildEnv(baseEnv(ann, 0, controller), s, "/run/items")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		if strings.Contains(kv, "s3cr3t") || strings.HasPrefix(kv, "LD_PRELOAD=") || strings.Contains(kv, "/root") {
			t.Errorf("the controller's %q reached another user's batch", kv)
		}
	}
	for _, want := range []string{"PATH=/opt/ann/bin:" + DefaultPath, "SHELL=/bin/zsh", "LARDON3D_TASK=t", "LARDON3D_ITEMS_FILE=/run/items", "HOME=/home/ann"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment %q lacks %q", env, want)
		}
	}
}

// The shell is the passwd entry's: the first line of the uid, the rest of
// the file (comments, short lines, other users) ignored.
func TestPasswdShell(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	body := "# a comment\nroot:x:0:0:root:/root:/bin/bash\nshort:x:1000\nann:x:1000:1000:Ann,,,:/home/ann:/usr/bin/fish\nann2:x:1000:1000::/home/ann2:/bin/sh\nnoshell:x:1001:1001::/home/n:\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[uint32]string{0: "/bin/bash", 1000: "/usr/bin/fish", 1001: "", 4242: ""} {
		if got := passwdShell(path, uid); got != want {
			t.Errorf("uid %d: shell %q, want %q", uid, got, want)
		}
	}
	if got := passwdShell(filepath.Join(t.TempDir(), "none"), 0); got != "" {
		t.Errorf("no file: shell %q", got)
	}
}

// A real batch run as nobody by a root controller whose environment holds
// secrets and root's PATH sees none of it: exactly its login variables,
// the documented LARDON3D_* and thread variables and its spec.env.
// The controller's own batches keep the controller's environment.
func TestABatchOfAnotherUserGetsNoneOfTheControllersEnvironment(t *testing.T) {
	needRoot(t)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cr3t")
	t.Setenv("SECRET_TOKEN", "tok3n")
	t.Setenv("PATH", "/root/bin:"+os.Getenv("PATH"))
	nobody := lookupUser(t, 65534, 65534)
	s, _ := userSpec(t, nobody, "env")
	s.Env = []EnvVar{{"OWN", "mine"}}
	res := start(t, s).Wait()
	log := readLog(t, s)
	if res.ExitCode != 0 {
		t.Fatalf("result %+v, log:\n%s", res, log)
	}
	got := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if name, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "===") {
			got[name] = value
		}
	}
	want := map[string]string{"HOME": nobody.Home, "USER": "nobody", "LOGNAME": "nobody", "PATH": DefaultPath, "OWN": "mine", "LARDON3D_TASK": "t"}
	if nobody.Shell != "" {
		want["SHELL"] = nobody.Shell
	}
	for name, value := range want {
		if got[name] != value {
			t.Errorf("%s=%q, want %q", name, got[name], value)
		}
	}
	allowed := map[string]bool{"HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "PATH": true, "OWN": true,
		"OMP_NUM_THREADS": true, "OPENBLAS_NUM_THREADS": true, "MKL_NUM_THREADS": true, "GOMAXPROCS": true}
	for name, value := range got {
		if !allowed[name] && !strings.HasPrefix(name, "LARDON3D_") {
			t.Errorf("the controller's %s=%q reached another user's batch", name, value)
		}
	}
	if strings.Contains(log, "s3cr3t") || strings.Contains(log, "tok3n") || strings.Contains(log, "/root/bin") {
		t.Errorf("a secret of the controller's environment reached the batch:\n%s", log)
	}

	// Its own user's batch: the controller's environment, as before.
	own := testSpec(t, "env")
	if res := start(t, own).Wait(); res.ExitCode != 0 || !strings.Contains(readLog(t, own), "\nAWS_SECRET_ACCESS_KEY=aws-s3cr3t\n") {
		t.Errorf("the controller's own batch lost its environment: %+v\n%s", res, readLog(t, own))
	}
}
