package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// systemdTimeout bounds every question to a systemd manager at Open: a
// manager that does not answer within it counts as absent.
const systemdTimeout = 20 * time.Second

// systemdBooted reports whether systemd is the init system, as
// sd_booted(3) tells it.
func systemdBooted() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// manager is a connection to one systemd manager: the system's, or the
// user manager of the controller's user.
type manager struct {
	conn *sddbus.Conn
	// name says which, for messages: "the system manager", "the user
	// manager of uid 1000".
	name string
}

func (m *manager) Close() { m.conn.Close() }

// dialSystem connects to the system manager: through its private socket
// as root (no D-Bus daemon needed), else through the system bus.
func dialSystem(ctx context.Context) (*manager, error) {
	var errs []error
	if os.Geteuid() == 0 {
		c, err := sddbus.NewSystemdConnectionContext(ctx)
		if err == nil {
			return &manager{conn: c, name: "the system manager"}, nil
		}
		errs = append(errs, err)
	}
	c, err := sddbus.NewSystemConnectionContext(ctx)
	if err == nil {
		return &manager{conn: c, name: "the system manager"}, nil
	}
	return nil, fmt.Errorf("connect to the system manager: %w", errors.Join(append(errs, err)...))
}

// userRuntimeDir is the controller's user's runtime directory
// ($XDG_RUNTIME_DIR, else /run/user/UID as pam_systemd makes it).
func userRuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d
	}
	return "/run/user/" + strconv.Itoa(os.Getuid())
}

// dialUser connects to the user manager of the controller's user: through
// its private socket (RUNTIME_DIR/systemd/private, which needs no D-Bus
// daemon), else through the user's session bus (dbus-user-session).
func dialUser(ctx context.Context) (*manager, error) {
	name := "the user manager of uid " + strconv.Itoa(os.Getuid())
	dir := userRuntimeDir()
	auth := func(c *dbus.Conn) error {
		return c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))})
	}
	private := func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+filepath.Join(dir, "systemd/private"), dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := auth(c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil // a peer connection to the manager: no Hello
	}
	c, perr := sddbus.NewConnection(private)
	if perr == nil {
		return &manager{conn: c, name: name}, nil
	}
	addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	if addr == "" {
		addr = "unix:path=" + filepath.Join(dir, "bus")
	}
	session := func() (*dbus.Conn, error) {
		c, err := dbus.Dial(addr, dbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := auth(c); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, serr := sddbus.NewConnection(session)
	if serr == nil {
		return &manager{conn: c, name: name}, nil
	}
	return nil, fmt.Errorf("connect to %s (runtime directory %s): private socket: %v; session bus %s: %v", name, dir, perr, addr, serr)
}

// userManagerOwns reports whether the cgroup path lies in the subtree of
// uid's user manager (user@UID.service), which that manager, not the
// system's, manages.
func userManagerOwns(cgPath string, uid int) bool {
	return strings.Contains(cgPath+"/", "/user@"+strconv.Itoa(uid)+".service/")
}

// ownerOf connects to the manager that manages cgroup path cgPath: the
// user manager of the controller's user for a path in its subtree, else
// the system manager.
func ownerOf(ctx context.Context, cgPath string) (*manager, error) {
	if userManagerOwns(cgPath, os.Getuid()) {
		return dialUser(ctx)
	}
	return dialSystem(ctx)
}

// unitDelegates asks m which unit process pid belongs to and whether that
// unit has Delegate=yes, that is whether its manager leaves the cgroup's
// subtree to the unit's processes.
func (m *manager) unitDelegates(ctx context.Context, pid int) (unit string, delegated bool, err error) {
	unit, err = m.conn.GetUnitNameByPID(ctx, uint32(pid))
	if err != nil {
		return "", false, fmt.Errorf("ask %s for the unit of pid %d: %w", m.name, pid, err)
	}
	var iface string
	switch {
	case strings.HasSuffix(unit, ".service"):
		iface = "Service"
	case strings.HasSuffix(unit, ".scope"):
		iface = "Scope"
	default:
		return unit, false, nil // a slice or another kind: never delegated to us
	}
	p, err := m.conn.GetUnitTypePropertyContext(ctx, unit, iface, "Delegate")
	if err != nil {
		return unit, false, fmt.Errorf("ask %s for %s's Delegate: %w", m.name, unit, err)
	}
	on, _ := p.Value.Value().(bool)
	return unit, on, nil
}

// delegatedScope moves process pid into the transient scope unit (NAME.scope)
// with Delegate=yes, asking m to create it, PartOf= the unit partOf when
// set (stopping that unit stops the scope); when a controller that crashed
// left the scope (with its batches' groups), pid joins it instead, in the
// leaf the controller keeps for itself. It returns the scope's cgroup path.
func (m *manager) delegatedScope(ctx context.Context, unit string, pid int, partOf string) (string, error) {
	props := []sddbus.Property{
		sddbus.PropDescription("lardon3d-controller and its batches' cgroups"),
		sddbus.PropPids(uint32(pid)),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
	}
	// Asked for where the manager knows them, dropped one by one (last
	// first) where it refuses: a memory kill in a batch's group is the
	// controller's to handle, the scope is not stopped for it
	// (OOMPolicy=continue); the service that started the controller
	// stops it (PartOf=, After=).
	extras := []sddbus.Property{{Name: "OOMPolicy", Value: dbus.MakeVariant("continue")}}
	if partOf != "" {
		extras = append(extras, sddbus.Property{Name: "PartOf", Value: dbus.MakeVariant([]string{partOf})}, sddbus.PropAfter(partOf))
	}
	done := make(chan string, 1)
	var err error
	var derr dbus.Error
	for n := len(extras); n >= 0; n-- {
		_, err = m.conn.StartTransientUnitContext(ctx, unit, "fail", append(slices.Clone(props), extras[:n]...), done)
		if err == nil || !errors.As(err, &derr) || derr.Name == "org.freedesktop.systemd1.UnitExists" {
			break
		}
	}
	switch {
	case err == nil:
		select {
		case result := <-done:
			if result != "done" {
				return "", fmt.Errorf("%s: start the scope %s: job %s", m.name, unit, result)
			}
		case <-ctx.Done():
			return "", fmt.Errorf("%s: start the scope %s: %w", m.name, unit, ctx.Err())
		}
	case errors.As(err, &derr) && derr.Name == "org.freedesktop.systemd1.UnitExists":
		if aerr := m.conn.AttachProcessesToUnit(ctx, unit, "/"+controllerLeaf, []uint32{uint32(pid)}); aerr != nil {
			return "", fmt.Errorf("%s: the scope %s exists (a controller on this state directory runs, or left batches) and pid %d cannot join it: %w", m.name, unit, pid, aerr)
		}
	default:
		return "", fmt.Errorf("%s: start the scope %s: %w", m.name, unit, err)
	}
	p, err := m.conn.GetUnitTypePropertyContext(ctx, unit, "Scope", "ControlGroup")
	if err != nil {
		return "", fmt.Errorf("%s: the scope %s's cgroup: %w", m.name, unit, err)
	}
	cg, _ := p.Value.Value().(string)
	if cg == "" {
		return "", fmt.Errorf("%s: the scope %s has no cgroup", m.name, unit)
	}
	return cg, nil
}

// enforcementHint says what a person can do where batch cgroups cannot be
// had, for the controller's user.
func enforcementHint() string {
	if os.Geteuid() == 0 {
		return "run the controller as a service with Delegate=yes (deploy/systemd/lardon3d-controller.service), or under `systemd-run --scope -p Delegate=yes lardon3d-controller run ...`"
	}
	return "start it through your user manager: `systemd-run --user --scope -p Delegate=yes lardon3d-controller run ...`, or the user unit deploy/systemd/user/lardon3d-controller.service; a user manager runs while you are logged in through PAM (libpam-systemd), or always after `loginctl enable-linger " + userName() + "`, and needs the memory controller delegated to it (systemd's default user@.service does)"
}

// userName is $USER, else the uid.
func userName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return strconv.Itoa(os.Getuid())
}
