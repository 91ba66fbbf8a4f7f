// Package spool owns the spool directory: it watches the manifests users
// drop there and writes status back into them without ever losing a byte
// the user wrote, whatever way they write their files.
//
// # What it owns, what it must never do
//
// It owns the in-memory view of the directory (which files exist, the
// version of each last reported), the byte-exact editing of manifests, the
// one-controller lock (Lock) and the clean-up of its own temporary files.
// It never interprets a task (the reconciler does), never rewrites a file
// that is not one YAML document holding a block mapping (an unparseable
// file is only reported), never reads a file before its writer closed it,
// never opens anything but a regular file, never follows a symlink out of
// the spool or one that changed since it was judged, never takes a file,
// a symlink or a directory owned by another user (root aside), and never
// rewrites a byte outside the status block (or, for SetSpecPaused, outside
// the value of spec.paused). The modification time of a manifest stays the
// user's: a write-back keeps it, so editors that compare it before saving
// (vim, emacs) do not mistake a status write for an edit of their text.
//
// # The checked path
//
// Every read and every write-back reaches a manifest from a descriptor of
// the spool directory opened once (root), never through a path the kernel
// resolves: the name is fstatat'ed without following; a symlink's owner is
// checked, its target read with readlinkat and mapped inside the spool
// (or refused), and so on for at most eight links; each directory on the
// way is opened with O_NOFOLLOW and its owner checked; the file itself is
// opened with O_NOFOLLOW|O_NONBLOCK from its directory's descriptor and
// fstat'ed to be the regular file judged. A FIFO, socket or device is
// refused from the stat alone, before any open. The verbs (get, describe,
// pause, resume) use the same path (ReadManifest, Spool.SetPaused).
// The owners accepted, of a manifest, a link or a directory on the way,
// are root and the controller's user; for a controller running as root,
// root and the spool directory's owner, as whom it runs them.
//
// # Watching: one owner, events as hints, the writer's word
//
// Run is the only goroutine that touches the view (watcher.files), so the
// view has no mutex, as in the kubelet's file source. It removes leftover
// temporary files (this package's only, by exact name), lists the
// directory, then re-reads one file for every inotify event naming it
// (read with golang.org/x/sys/unix: fsnotify v1.10 keeps IN_CLOSE_WRITE
// unexported), relists every Options.Relist (10 s; a spool whose listing
// takes longer than 20 ms waits 500 times as long, so that listing costs at
// most a five-hundredth of a core) and relists at once on a queue overflow
// (events are hints, the listing is the truth). A relist stats every file
// and opens only those whose inode, size or modification time changed.
//
// A file is read only once nobody holds it open for writing. The watcher
// asks the kernel: a read lease (fcntl F_SETLEASE F_RDLCK) is refused while
// any process has the file open for writing; then the file is marked
// writing and read again on its IN_CLOSE_WRITE. Granted, the lease is held
// during the read, so no writer can start meanwhile (one that tries waits
// microseconds). Where no lease can be had (a file system without leases,
// a root-owned file and a controller that is not root), the kernel's
// IN_CLOSE_WRITE or IN_MOVED_TO is taken as the writer's word, and other
// hints wait until the file's modification time is Options.Settle old.
//
// Taken: *.yaml and *.yml. Ignored: dotfiles (which covers vim's .x.swp and
// emacs' .#x, and this package's own temp files), x~ backups, vim's 4913
// probe and everything else; ignored with a logged reason (once per
// reason): what the checked path refuses, counted by Spool.Refused while
// they are there (--exit-when-done counts them as not Done). Refused with
// an event: files over Options.MaxFileSize (1 MiB).
//
// # Events
//
// Events() is buffered and Run blocks rather than drop an event. Events of
// one file are in the order of the changes seen. Types:
//
//   - Added / Modified: a parseable version (Added the first time, or the
//     first time after Deleted). Task is non-nil; Err is the ErrorList of
//     an invalid spec (the reconciler rejects it).
//   - Invalid: not parseable YAML (a *v1alpha1.SyntaxError), emitted once
//     the version stayed unchanged for Options.Settle (300 ms).
//   - Refused: too large.
//   - Deleted: gone for Options.DeleteGrace (3 s) without coming back, or
//     now ignored. A manifest that vanishes and comes back under the same
//     name within the grace (an editor's save: mv x x~; write x) is the
//     same manifest: nothing is emitted but a Modified if its user part
//     changed.
//   - Renamed: a vanished manifest (in its grace) whose metadata.name shows
//     up in another file: OldPath → Path. No Deleted follows. If the new
//     file held another task, Deleted for that one comes first.
//   - Synced: once, after the events of every manifest present when Run
//     started.
//
// Nothing is emitted when the user-owned part of a file (everything but
// its status block) has the same SHA-256 as the version last emitted, so
// the controller's own write-backs never come back as user edits.
//
// # Write-back
//
// ReplaceStatus and SetSpecPaused are pure: they splice the file's bytes
// (see rewrite.go) and any doubt is ErrNotRewritable. WriteStatus and
// SetPaused write with a read/check/swap loop, at most maxEditAttempts
// rounds that lost to a concurrent change:
//
//  1. open the file by the checked path, read it, note its identity
//     (inode, size, mtime, SHA-256);
//  2. apply the edit; write the result to a dotfile beside the file, with
//     the file's owner, mode and times, fsynced;
//  3. take a read lease on the file (refused: a writer has it open, the
//     round is busy); take one on the dotfile;
//  4. check the file is still the version read (else retry) and that
//     nobody started opening it for writing (else the writer goes first:
//     busy);
//  5. swap dotfile and file with renameat2(RENAME_EXCHANGE);
//  6. check the displaced inode is the one read and its lease intact:
//     nobody began writing it. If so, unlink it at once (no dotfile is left
//     if the process dies now) and hand it, still open and leased, to the
//     keeper: done. If not, swap back (the writer's inode is the manifest
//     again) and retry; if our version was opened for writing between the
//     two swaps, the keeper gets it instead. When the swap back fails, or
//     what comes back is a third writer's version, the displaced version is
//     kept as NAME.yaml.lardon3d-conflict-HEX (never under the temp name,
//     which start-up removes).
//
// After the second lost round the lease is taken before the read (step 1),
// so that a stream of writers cannot starve the write-back: a writer that
// starts then waits for the round (milliseconds). A round busy for longer
// than Options.BusyWait (50 ms) ends with ErrBusy; WriteStatus then defers
// the write (ErrDeferred), as after maxEditAttempts lost rounds
// (ErrConflict) or when the file is gone for a moment (an editor's save), and Run's retry goroutine makes it when the watcher sees
// the file closed or back, or within a second. The latest status wins.
//
// # Group commit
//
// WriteStatuses makes several status write-backs as one group: under the
// path locks of every file (taken in path order), steps 1 and 2 for each
// (the temp files written, not yet flushed), then one syncfs(2) for all (an
// fsync of each where it fails or for a file on another file system), then
// steps 3 to 6 for each, then one fsync per directory. Nothing is reported
// written before that fsync; a kill at any moment leaves each manifest its
// old or its new version. A file whose round does not end at the exchange
// (busy, changed, gone) is then written alone by WriteStatus's loop, with
// its deferral. A file still exactly as the last group left it (inode,
// size, modification and change time) and given the same status again is
// not read at all.
//
// The status block is emitted directly (emit.go), not through a YAML ->
// JSON -> YAML round trip, and checked against the reader (its YAML-to-JSON
// form must be the status's JSON form) once per block shape (shape.go: the
// structure is the shape's, each scalar's text is proven for every value
// by FuzzEmitScalars). The first write-back of a file checks what the
// splice does to the user's part with a placeholder block of the real
// block's shape (check.go), the full edited file where no placeholder
// applies. The version a write-back produced is remembered by its SHA-256
// with where its status entry is (a layout): the next write-back of that
// version replaces the entry in place without parsing the file, and the
// watcher and keeper take its user part from the layout; the bytes around
// the entry are those that passed the first check, so only the new block
// is checked.
//
// The keeper watches each displaced inode for Options.DisplacedGrace
// (100 ms; up to keeperSweep, 25 ms, longer). The kernel signals a lease
// broken (SIGIO, which wakes the keeper: the writer's open() waits well
// under a millisecond for it, TestALeaseBreakWakesTheKeeper), and the
// keeper looks at every lease each sweep besides. A broken lease
// means a writer whose open() looked the name up before the swap is
// writing into it: the keeper lets it, waits until it closes the file
// (looking every 5 ms, keeperPoll),
// and merges what it wrote into the manifest (the user's version with the
// latest edit re-applied when only status changed since, the appended
// bytes when it was an append, the user's version then the lines appended
// to the manifest when the manifest only gained lines at its end since;
// otherwise the version is kept beside the manifest as
// NAME.yaml.lardon3d-conflict-HEX and logged).
//
// # The remaining window
//
// With leases, a write is lost only if an open() looked the name up before
// the swap and reached the lease check in the kernel more than
// DisplacedGrace later (it would then write into an unlinked inode nobody
// watches): a writer descheduled for 100 ms inside open(). Measured with
// go test -count 5 -run 'TestAppendsDuringStatusWrites|TestMixedWriters|
// TestInPlaceWrites|TestConcurrentSpecEdits' -v ./pkg/spool (about 16,000
// writes against 32,343 write-back rounds): a lease broke between the
// check and the swap 85 times (each swapped back, nothing lost) and the
// keeper never saw a broken lease: the window was not hit once.
//
// Without leases, step 4 and 6 compare content instead, and the keeper
// compares the displaced inode (and, after a swap back, our version) at
// the end of the grace: a writer that keeps the old inode open for longer
// than DisplacedGrace can still lose what it writes after. With leases
// disabled, 5 × 1,500 appends gave 5 merges and lost nothing; with the
// keeper disabled too they lost 46 of 7,500 (0.6 %), which is the window
// the keeper closes. On file systems without RENAME_EXCHANGE (EINVAL) the
// swap is a rename(2) after step 4, and the keeper watches the old inode.
//
// # Locking
//
// Run's view has no lock (one owner). Write-backs may come from any
// goroutine. Spool.mu guards the per-path locks map, the deferred and last
// edits and the running flag; a write-back takes mu to find its path lock,
// releases it, then holds the path lock for the whole loop, taking mu
// again only briefly: a path lock is never taken while mu is held. A group
// holds several path locks, always taken in path order. kmu guards the
// keeper's list and lmu the layouts and what the last group left; each is
// taken alone. Write-backs of one file are
// serialised and in call order; the keeper's merge takes the path lock
// like any write-back.
package spool
