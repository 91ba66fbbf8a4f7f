// Package control is the machine control socket of a running controller:
// what a user's process asks of it, authenticated by the peer's
// credentials (SO_PEERCRED), never by what the request says.
//
// It owns:
//
//   - the socket, DIR/controller-PID.sock beside the controller's claim in
//     the registry directory (SocketPath), mode 0666: anyone may connect,
//     and each request is judged by the kernel's word on who sent it
//     (Peer). A socket left there by a dead controller of the same PID is
//     replaced; anything else there is left alone;
//   - the protocol, JSON lines (Request, Reply; Protocol versions it): one
//     request per connection, its answers as lines. A hold (OpHold) is
//     tied to its connection: the backend's reservation is released
//     exactly once when the connection ends, however the client ends
//     (kill -9 closes it); a spool to add (OpSpoolAdd) comes with the
//     opened directory's descriptor (SCM_RIGHTS), so that the backend
//     judges the directory the client opened, not a path that may have
//     been swapped since, as atd judges a job by its file's owner;
//   - the client side (Find, Dial): it talks only to a live controller of
//     the registry that is root's or the caller's own, and checks the
//     server's credentials (the claim's PID and user, as the kernel says
//     them) before it sends a byte, so a socket planted in the registry
//     directory is never told anything.
//
// It never decides a reservation or serves a spool itself: Backend does
// (the controller's reconcile.Host, through the command). It keeps no
// state beyond the connections open, capped in all and per user (one
// user's many connections never lock the others out).
//
// Locking: Server.mu guards the connections open; nothing else is shared.
// A backend's callbacks are called without it.
package control
