// Package trust decides whether the controller may write into a directory
// by path: one that no one but the controller (or root) can change, so
// that no entry in it can be swapped for a link between a check and a
// use.
//
// It owns that one rule (ControllerOnly, OwnDir), used for the state
// directory and its logs and run directories, and for the directories a
// root controller writes into for a batch run as another user. It only
// reads: it never creates, changes or removes anything, and holds no
// state (no locks).
package trust
