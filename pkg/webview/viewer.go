package webview

import (
	"context"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Viewer is who asks the view: a user, who sees the tasks, logs and
// names of the spools they own (a spool's owner is its directory's), or
// one who sees every spool (root, the admin group).
type Viewer struct {
	// UID is the user's.
	UID uint32
	// All: every spool is shown, whoever owns it.
	All bool
}

// OtherUsers names, in a user's charts of the machine, what the tasks
// of the spools they do not own hold together: their usage without their
// names (a task's name is a DNS label: it never has a space).
const OtherUsers = "other users"

type viewerKey struct{}

// WithViewer is ctx carrying who asks: View answers a request only with
// one (the listeners set it: the peer's credentials on the unix socket,
// the controller's own user behind the token on TCP).
func WithViewer(ctx context.Context, v Viewer) context.Context {
	return context.WithValue(ctx, viewerKey{}, v)
}

// viewerOf is who asks r, when a listener said.
func viewerOf(r *http.Request) (Viewer, bool) {
	v, ok := r.Context().Value(viewerKey{}).(Viewer)
	return v, ok
}

// As serves h to every request as v: for a listener whose every client is
// one user (the TCP view, behind its token, is the controller's user).
func As(v Viewer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithViewer(r.Context(), v)))
	})
}

// Admins says who sees every spool: root, and the members of one group
// when one is configured (run --view-admin-group).
type Admins struct {
	gid int // -1: none
}

// NoAdmins: root alone sees every spool.
var NoAdmins = Admins{gid: -1}

// AdminGroup is the admin group named (or numbered) group; "" is
// NoAdmins.
func AdminGroup(group string) (Admins, error) {
	if group == "" {
		return NoAdmins, nil
	}
	if n, err := strconv.Atoi(group); err == nil && n >= 0 {
		return Admins{gid: n}, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return NoAdmins, err
	}
	n, err := strconv.Atoi(g.Gid)
	if err != nil {
		return NoAdmins, err
	}
	return Admins{gid: n}, nil
}

// Viewer is the user uid, whose process runs with group gid: one who sees
// every spool when root or, by gid or by the group database, in the
// admin group.
func (a Admins) Viewer(uid, gid uint32) Viewer {
	v := Viewer{UID: uid, All: uid == 0}
	if v.All || a.gid < 0 {
		return v
	}
	if int(gid) == a.gid {
		v.All = true
		return v
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return v // a uid with no passwd entry is in no group it could list
	}
	groups, _ := u.GroupIds()
	want := strconv.Itoa(a.gid)
	for _, g := range groups {
		if g == want {
			v.All = true
		}
	}
	return v
}

// scope is what one request's viewer sees: the spools it owns, each
// directory's owner read once per request.
type scope struct {
	v     Viewer
	owned map[string]bool
}

func newScope(v Viewer) *scope { return &scope{v: v, owned: map[string]bool{}} }

// sees reports whether the viewer is shown the tasks of spool: every one
// to an admin, else the spools whose directory it owns (one that cannot
// be read is no one's).
func (s *scope) sees(spool string) bool {
	if s.v.All {
		return true
	}
	ok, done := s.owned[spool]
	if !done {
		if fi, err := os.Stat(spool); err == nil {
			st, isUnix := fi.Sys().(*syscall.Stat_t)
			ok = isUnix && st.Uid == s.v.UID
		}
		s.owned[spool] = ok
	}
	return ok
}

// othersMerged are points as s sees them: the tasks of the spools it does
// not own summed into one, OtherUsers (the machine's usage is everyone's
// to see, other users' task names are not). points are copies (Since).
func othersMerged(points []Point, s *scope) []Point {
	for i := range points {
		p := &points[i]
		if len(p.Tasks) == 0 {
			continue
		}
		kept := make([]TaskUse, 0, len(p.Tasks))
		others := TaskUse{Task: OtherUsers}
		merged := false
		for _, u := range p.Tasks {
			if u.Spool != "" && s.sees(u.Spool) {
				kept = append(kept, u)
				continue
			}
			merged = true
			others.Memory += u.Memory
			others.Used += u.Used
			others.Threads += u.Threads
			others.GPUMem += u.GPUMem
			others.GPUSlots += u.GPUSlots
			others.IOSlots += u.IOSlots
		}
		if merged {
			kept = append(kept, others)
		}
		p.Tasks = kept
	}
	return points
}
