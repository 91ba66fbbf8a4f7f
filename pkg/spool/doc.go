// Package spool owns the spool directory: it watches the manifests users
// drop there and writes status back into them without ever losing a byte
// the user wrote.
//
// # What it owns, what it must never do
//
// It owns the in-memory view of the directory (which files exist, the
// version of each last reported) and the byte-exact editing of manifests.
// It never interprets a task (the reconciler does), never rewrites a file
// that is not one YAML document holding a block mapping (an unparseable
// file is only reported), never follows a symlink out of the spool, never
// takes a file owned by another user (root aside), and never rewrites a
// byte outside the status block (or, for SetSpecPaused, outside the value
// of spec.paused).
//
// # Watching: one owner, events as hints
//
// Run is the only goroutine that touches the view (watcher.files), so the
// view has no mutex, as in the kubelet's file source. It lists the
// directory at start, then re-reads one file for every fsnotify event
// naming it, relists every Options.Relist (10 s) and relists at once when
// fsnotify reports an error such as a queue overflow (fsnotify#148: the
// kernel drops events under load, so events are hints and the relist is
// the truth). A relist reads only the files whose inode, size or
// modification time changed since they were last read, so a spool of
// thousands of finished manifests costs a directory listing and a stat each.
//
// Taken: *.yaml and *.yml. Ignored: dotfiles (which covers vim's .x.swp and
// emacs' .#x, and this package's own temp files), x~ backups, vim's 4913
// probe and everything else; ignored with a logged reason (once per
// reason): files owned by another user than the controller's (root
// aside), symlinks resolving outside the spool, non-regular files. Refused
// with an event: files over Options.MaxFileSize (1 MiB).
//
// # Events
//
// Events() is buffered and Run blocks rather than drop an event (while it
// blocks, fsnotify may overflow, which triggers a relist: nothing is lost).
// Events of one file are in the order of the changes seen. Types:
//
//   - Added / Modified: a parseable version (Added the first time, or the
//     first time after Deleted). Task is non-nil; Err is the ErrorList of
//     an invalid spec (the reconciler rejects it). A parseable file is
//     emitted as soon as it is read.
//   - Invalid: not parseable YAML (a *v1alpha1.SyntaxError). Such a version
//     is not judged at once, since it may be caught mid-write: the file
//     must stay unchanged for Options.Settle (300 ms), then it is re-read,
//     and only if still broken is Invalid emitted. A broken file already
//     untouched for that long (by its modification time) is judged at once.
//   - Refused: too large.
//   - Deleted: gone (seen by an event or by a relist), or now ignored,
//     after any other event was emitted for it.
//   - Synced: once, after the events of every manifest present when Run
//     started; a controller that must know the whole spool (to exit when
//     everything is done) waits for it.
//
// Nothing is emitted when the user-owned part of a file (everything but
// its status block) has the same SHA-256 as the version last emitted.
// This is how the controller's own write-backs, which change only status,
// never come back as user edits — even when a write-back carries a user
// edit it re-applied status onto, since that edit changes the user part.
//
// # Write-back
//
// ReplaceStatus and SetSpecPaused are pure. They parse the file into a
// yaml.Node tree, map the top-level keys' line/column to byte offsets and
// splice: the status entry runs from the start of its key's line to the
// start of the next top-level key's line (or the document's end, before a
// "..." or "---" marker), minus the trailing blank lines and top-level
// comments, which belong to what follows. The new block is rendered by
// sigs.k8s.io/yaml, indented under "status:" with the file's line ending
// (LF or CRLF); a file without a final newline keeps none. Then a
// self-check decodes the result and requires every top-level value but
// status to decode as before and status to decode as written; any doubt
// (anchors, flow-style top level, several documents, lone CR line breaks,
// duplicate keys) is ErrNotRewritable and the file is left alone.
//
// EditFile (and Spool.WriteStatus / Spool.SetPaused on top of it) writes
// with a read/check/swap loop, bounded to maxEditAttempts rounds:
//
//  1. open the file, read it, note its identity (inode, size, mtime, hash);
//  2. apply the edit; write the result to a dotfile in the same directory,
//     fchown/fchmod it to the file's owner and mode, fsync it;
//  3. check the file is still the version read (same inode, and re-read
//     through the open descriptor: same size, mtime and hash); if not,
//     drop the dotfile and start again from the new version;
//  4. swap dotfile and file atomically with renameat2(RENAME_EXCHANGE);
//  5. check the displaced file (now under the dotfile's name) is still the
//     version read; if so delete it and fsync the directory: done. If not,
//     someone wrote between 3 and 4: swap back (their version is the
//     manifest again, the same inode, so an editor's open descriptor stays
//     valid) and start again from their version.
//
// # The remaining window
//
// What can still be lost is a write into the old inode through a
// descriptor opened before step 4 and written after step 5, i.e. an
// in-place writer that holds the file open across a whole write-back
// round (a few hundred microseconds). Editors replace files by rename or
// truncate-and-write in one go, so this needs a writer that is descheduled
// mid-write. Between steps 4 and 5 a reader may also see the status
// written onto the previous version for a few microseconds; step 5 puts the
// newer version back. On file systems without RENAME_EXCHANGE (EINVAL)
// EditFile falls back to rename(2) after step 3 and the window widens to
// the time between step 3 and the rename. TestConcurrentSpecEditsSurvive
// measures this: 1,000 spec edits by a writer (temp+rename, and in-place
// truncate+write) against continuous write-backs, each edit checked after
// two further write-back rounds; it logs how many conflicts step 3 and
// step 5 caught. Without the step-5 check it fails within a few hundred
// edits.
//
// # Locking
//
// Run's view has no lock (one owner). Write-backs may come from any
// goroutine: Spool.mu guards only the map of per-path locks; a write-back
// takes mu, finds or creates the path's lock, releases mu, then holds the
// path lock for the whole read/check/swap loop, so write-backs of one file
// are serialised and in call order. mu and a path lock are never held
// together. Run and the write-backs share no memory.
package spool
