package cgroup

import "testing"

func TestUserManagerOwns(t *testing.T) {
	for _, c := range []struct {
		path string
		uid  int
		want bool
	}{
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.service", 1000, true},
		{"/user.slice/user-1000.slice/user@1000.service", 1000, true},
		{"/user.slice/user-1000.slice/session-c1.scope", 1000, false},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", 1001, false},
		{"/user.slice/user-10000.slice/user@10000.service/app.slice/x.service", 1000, false},
		{"/system.slice/lardon3d-controller.service", 0, false},
	} {
		if got := userManagerOwns(c.path, c.uid); got != c.want {
			t.Errorf("userManagerOwns(%q, %d) = %v, want %v", c.path, c.uid, got, c.want)
		}
	}
}
