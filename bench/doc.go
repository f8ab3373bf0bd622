// Package bench is `metaplane bench`: the side-by-side benchmark of the
// metadata backends on the rows of the design documents' performance
// table.
//
// Run starts everything it measures itself (a ZooKeeper server from
// Debian's jars on loopback with production durability, Raft voters as real
// plugin processes with their data in a temporary directory, the memory
// plugin, and a coordinator server on each backend), runs every row on
// every backend interleaved (round by round, row by row, alternating the
// backends' order), and returns a Report: p50, p99, mean and ops/s per row
// and backend, the ZooKeeper/Raft ratio, the peak resident memory of every
// process under the write-throughput rows, the machine, and the issue's
// targets with met / not met. A Report is written as a text table, JSON,
// Markdown and an SVG chart, and read back from JSON to redraw the chart.
//
// Everything listens on 127.0.0.1 only and every loop is bounded (a count
// and a time limit per batch, a time limit on every wait). Rows whose
// component is missing report "not available" with the reason instead of a
// number. The statistics (Percentile, Summarize, Speedup) are pure and
// tested on their own.
package bench
