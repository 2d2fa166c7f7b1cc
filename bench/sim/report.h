// fedfs-bench output: CSV files (one per run, header row), summary.md (what
// each plot shows and the key figures) and PNG plots drawn by gnuplot when it
// is installed (without it, CSV and Markdown are still written and the
// summary says the plots are missing).
//
// Numbers are printed with fixed precision ("%.3f") so that two runs with the
// same seed write identical CSV files. Wall-clock figures appear only in
// summary.md. Single-threaded; no state.
#pragma once

#include <string>
#include <vector>

#include "bench/sim/sim.h"
#include "common/result.h"

namespace fedfs::bench {

// The CSV column names of RunResult rows, in order.
const std::vector<std::string>& RunCsvColumns();
const std::vector<std::string>& DirmergeCsvColumns();
const std::vector<std::string>& PlacementCsvColumns();

Status WriteRunsCsv(const std::string& path, const std::vector<RunResult>& rows);
Status WriteDirmergeCsv(const std::string& path, const std::vector<DirmergeResult>& rows);
Status WritePlacementCsv(const std::string& path, const std::vector<PlacementResult>& rows);

// What a report covers; any part may be empty.
struct ReportData {
  std::string command;                   // how it was produced
  std::vector<RunResult> scaling;        // one workload over N (latency, throughput, load)
  std::vector<DirmergeResult> dirmerge;  // dirmerge cost over N
  std::vector<RunResult> dt_sweep;       // one workload over DT capacity
  std::vector<RunResult> workloads;      // other workloads (a table)
  std::vector<RunResult> load;           // manager-load runs (many directories)
  std::vector<RunResult> dir_size;       // one workload over --dir-entries
  std::vector<PlacementResult> placement;  // ring placement of directories
  std::vector<RunResult> cache;          // read-remote runs (cooperative caching)
  std::string dt_note;                   // why DT figures are missing, if they are
};

// Writes summary.md and the plots into out_dir (which must exist). Sets
// *plots_note to a message for the user when gnuplot is missing or failed.
Status WriteReport(const std::string& out_dir, const ReportData& data, std::string* plots_note);

// True iff a `gnuplot` executable is on PATH.
bool HaveGnuplot();

}  // namespace fedfs::bench
