// The daemon's metrics (docs/metrics.md): one registry whose collectors read
// each part's counters, mostly through the control commands that show them
// to fedfsctl (so a scrape and `fedfsctl dt`, `files`, `cache`, `migrations`,
// `status` always agree), and the FUSE requests' and dirmerges' latency
// histograms, the transport's traffic by peer and the journal's recoveries.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "control/dispatcher.h"
#include "fuse/fuse_frontend.h"
#include "m2m/counting_transport.h"
#include "metrics/metrics.h"

namespace fedfs::ns {
class VdService;
class DirOps;
}  // namespace fedfs::ns

namespace fedfs::daemon {

struct MetricSources {
  std::string node_id;
  // A copy of the control commands (their handlers read counters only).
  std::shared_ptr<const control::Dispatcher> commands;
  const fuse::OpMetrics* fuse_ops = nullptr;
  const ns::VdService* vds = nullptr;
  const ns::DirOps* dir_ops = nullptr;
  const m2m::CountingTransport* transport = nullptr;
};

// Every collector, over `s` (whose pointers outlive the registry's use).
std::unique_ptr<metrics::Registry> NodeMetrics(MetricSources s);

}  // namespace fedfs::daemon
