// Command lardon3d-synth is the project's synthetic photogrammetry step. It
// stands in for a real tool (COLMAP, OpenMVS, ...) in examples, tests and
// benchmarks, so they exercise real memory and real CPU with no external
// program.
//
// One run is one batch. It reads the batch environment the controller sets
// (LARDON3D_BATCH_SIZE, LARDON3D_THREADS, LARDON3D_ITEMS_FILE,
// LARDON3D_BATCH_START, LARDON3D_TASK, LARDON3D_MEMORY_LIMIT), then:
//
//  1. maps fixed + perItem×batch + perThread×threads bytes of anonymous
//     memory (outside Go's heap, so the garbage collector neither doubles nor
//     frees it) and writes one byte per page, so the resident set is real;
//     with --grow, fixed + perThread×threads only, each item's perItem
//     being mapped when its turn comes in step 3 (memory that grows over
//     the batch, as a reconstruction's does);
//  2. appends "TASK<TAB>ITEM" per item to --record FILE, if given (one write,
//     O_APPEND: concurrent batches do not interleave lines), so tests can
//     count how often each item was started;
//  3. burns cpu-per-item×batch of CPU time split evenly over LARDON3D_THREADS
//     OS threads, each measuring its own thread CPU clock (so a slow or
//     stopped machine stretches the wall time, never the CPU work); with
//     --progress, item by item, printing "LARDON3D_PROGRESS i/batch" to
//     stdout after each item, as a long step reports its progress (and
//     with --grow, item by item too);
//  4. keeps the memory resident for --hold more, prints one line to stdout
//     ("synth: batch of N items, X MiB resident, Y CPU-s on T threads");
//  5. exits 0; or --fail-exit N (N != 0) always; or, with --fail-on-item K,
//     exits N (1 when --fail-exit is 0) only when the batch holds item K —
//     K is a line of the items file or a 0-based global item index in
//     [LARDON3D_BATCH_START, LARDON3D_BATCH_START+batch).
//
// Flags may also come from the environment (a flag on the command line wins):
// LARDON3D_SYNTH_FIXED, LARDON3D_SYNTH_PER_ITEM, LARDON3D_SYNTH_PER_THREAD,
// LARDON3D_SYNTH_CPU_PER_ITEM, LARDON3D_SYNTH_FAIL_EXIT,
// LARDON3D_SYNTH_FAIL_ON_ITEM, LARDON3D_SYNTH_HOLD, LARDON3D_SYNTH_RECORD,
// LARDON3D_SYNTH_PROGRESS, LARDON3D_SYNTH_GROW.
// Quantities use Kubernetes notation (300Mi, 1.5G); durations Go's (200ms).
//
// It must never read or write anything of the controller's (spool, status):
// it only consumes the batch environment, like any real step. Exit code 2
// means a usage or environment error.
package main
