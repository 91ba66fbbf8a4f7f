// Package webview is the running controller's web view: its pages (the
// machine over time, the timeline of batches, the task graph, a task's
// page), the JSON they read under /api/ (the same for scripts), and the
// Recorder that keeps the machine's series.
//
// It owns:
//
//   - Recorder: a Point every interval (DefaultInterval) for the last
//     window (DefaultWindow): each budget's capacity, margin and
//     reservations, the measured memory of the running batches, and, per
//     task, its contract and its measure. Bounded in memory (window ÷
//     interval points) and saved in the machine's state directory, beside
//     the learned history (SeriesFile, replaced whole, at most every
//     DefaultSaveEvery and when the controller stops), so that a restart
//     keeps the last hours. With
//     nobody looking, the recorder is the view's only cost.
//   - View: the HTTP handler. Everything it serves is in the binary
//     (assets/): no CDN to reach, behind a firewall either. The time
//     series are drawn by uPlot (assets/vendor, MIT): 51 KB, no
//     dependency, a canvas that stays fast with thousands of points and
//     dozens of series, kept up to date by its author; the timeline, the
//     graph and the scatter are a few SVG elements each, drawn by
//     assets/app.js, where a test can read what was drawn. It answers
//     GET and HEAD only, to a Host that names this machine (an IP
//     address, localhost or the host name), with a strict content
//     security policy; names and logs are shown as text, never as HTML.
//   - Who asks (Viewer): View answers only a request whose listener said
//     who it is (WithViewer, As, PeerViewer from a unix socket's
//     SO_PEERCRED), and shows a user only the spools whose directory they
//     own; root and the admin group (Admins) see all. The machine's
//     points keep the other users' usage summed as OtherUsers, without
//     names. TokenGate keeps a TCP port to the holders of its token
//     (the controller's, and each `lardon3d-controller view`'s own).
//   - Bounded serving: Limiter counts the connections of the listeners it
//     wraps, in all and per peer (IP address, or uid on a unix socket),
//     closing those over a bound as soon as accepted (DefaultConnLimits
//     from RLIMIT_NOFILE, leaving most descriptors to the batches);
//     ListenUnix the view's socket (SocketName, in the registry
//     directory).
//
// It never writes a manifest, never decides anything, and holds no lock
// of the controller: it reads the host through Source (reconcile.Host's
// read accessors, each safe from any goroutine), a manifest's status
// through the spool's checked paths, and a task's log where the
// controller keeps it (reconcile.TaskLogPath of the spool's state
// directory, never the status's logFile), without following a link.
//
// Locking: Recorder.mu guards its points; it calls the machine outside it.
// Limiter.mu guards its counts; nothing is called under it.
package webview
