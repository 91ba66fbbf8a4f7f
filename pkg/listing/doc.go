// Package listing is the read model of `get`: what a listing shows of each
// manifest of a spool, as rows, not rendered text.
//
// It owns:
//
//   - Row, what get's table (plain and wide), its sort orders, its label
//     selector and -o name read of a task (RowOf), and how a manifest's
//     phase and reason are shown (File.Phase, File.Reason): the one place
//     that says "New", "Invalid", "NotRead";
//   - the read of a spool into Files: every manifest parsed (Spool.Read),
//     or, for a listing, the manifests a running controller holds a row of
//     (Rows, in the version the file still is: FileVersion) taken from it
//     and only the others parsed (Spool.ReadListed);
//   - the listing protocol: a running controller serves the Files of its
//     spool over a unix socket in its state directory (Serve, Socket), one
//     encoded row a line (Protocol versions it); a client (Ask) takes them,
//     or gets nothing and reads the spool's files itself.
//
// It never renders a table (the command does, from rows, with its own
// printer), never writes a manifest, and never imports the controller
// (pkg/reconcile imports it: a controller's in-memory rows are Rows).
//
// Locking: Server.mu guards the connections being served; a listing holds
// Server.one (a slot, not a lock) while it reads the spool. Rows are read
// from any goroutine; their implementation guards itself.
package listing
