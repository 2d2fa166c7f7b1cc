// Autonomy (docs/namespace.md, "Autonomy"): what the watcher saw in the
// export root becomes VD updates at the managers. Runs on the watcher's
// thread. An event is checked against the directory as it is now, so a late
// event (the name came back, or went again) reports nothing false. This
// node's kernel did not see these changes happen: once the manager has
// applied one, the kernel's names are dropped.
#include <dirent.h>
#include <sys/stat.h>

#include <unordered_map>

#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/path.h"
#include "nodefs/dir_id.h"
#include "node/node_impl.h"

namespace fedfs::node {

namespace {

// Past this many changes in one directory within one batch of the watcher,
// the directory's VDs are dropped (one round) instead of updated once per
// change: every update makes the manager copy the whole VD, so a burst of N
// changes (a program unpacking an archive, a storm of creates) would cost it
// O(N^2) and stall the watcher's thread (the manager may be this node, served
// inline) until inotify's queue overflows.
constexpr size_t kBurstPerDir = 64;

}  // namespace

void Node::ReportLocalChanges(std::vector<ns::LocalChange> changes) {
  ns::VdService* vds = impl_->vd_service.get();
  ns::NodeFs* local = impl_->env.local;
  const std::string& self = impl_->options.node_id;
  auto log = Logger("autonomy");
  auto drop_names = [hooks = impl_->hooks] { hooks->DropNames(); };
  std::unordered_map<std::string, size_t> per_dir;
  for (const ns::LocalChange& c : changes) ++per_dir[c.dir];
  for (const auto& [dir, n] : per_dir) {
    if (n <= kBurstPerDir) continue;
    // Rebuilt by dirmerge on next use, from the export roots as they are
    // then (the subtree too: directories made in the burst are covered).
    log->info("{} changes in {} behind FedFS' back: its VDs are rebuilt", n, dir);
    vds->DropSubtree(dir, [log, d = dir, drop_names](Status s) {
      if (!s) log->warn("drop of VDs under {}: {}", d, s.error().ToString());
      drop_names();
    });
  }
  for (ns::LocalChange& c : changes) {
    if (per_dir[c.dir] > kBurstPerDir) continue;  // dropped above
    const std::string path = ns::JoinPath(c.dir, c.name);
    auto st = local->Stat(ns::Cred{}, path);
    const bool add = c.kind == ns::LocalChange::Kind::kAdd;
    if (add != st.has_value()) continue;  // no longer so
    ns::VdChange ch;
    ch.kind = add ? ns::VdChange::Kind::kAdd : ns::VdChange::Kind::kRemove;
    ch.name = c.name;
    ch.type = add ? static_cast<uint8_t>(IFTODT(st->st_mode & S_IFMT)) : c.type;
    ch.node = self;
    if (add && ch.type == DT_DIR) {
      // Its identity: a copy FedFS made here carries the directory's.
      auto id = ns::CopyDirIdOn(*local, self, path, *st);
      ch.id = id ? *id : 0;  // 0: the manager keeps the one it knows
    }
    SPDLOG_LOGGER_DEBUG(log, "{} {} in {} (behind FedFS' back)", add ? "add" : "remove", c.name,
                        c.dir);
    if (ch.type == DT_DIR) {
      // A directory appeared or went: the VDs of its subtree (built without
      // this node's copy, or with it) are rebuilt on their next use.
      vds->DropSubtree(path, [log, path, drop_names](Status s) {
        if (!s) log->warn("drop of VDs under {}: {}", path, s.error().ToString());
        drop_names();
      });
    }
    vds->Update(c.dir, std::move(ch), [log, path, drop_names](Status s) {
      if (!s) log->warn("report of {}: {}", path, s.error().ToString());
      drop_names();
    });
  }
}

void Node::DropLostDirs(std::vector<std::string> dirs) {
  auto log = Logger("autonomy");
  if (dirs.size() > 64) dirs = {"/"};  // one broadcast instead of many
  for (const std::string& d : dirs) {
    log->info("changes under {} may have been missed: its VDs are rebuilt", d);
    impl_->vd_service->DropSubtree(d, [log, d, hooks = impl_->hooks](Status s) {
      if (!s) log->warn("drop of VDs under {}: {}", d, s.error().ToString());
      hooks->DropNames();
    });
  }
}

void Node::LocalAttrsChanged(const std::string& path, bool kernel_attrs) {
  if (kernel_attrs) impl_->hooks->DropAttrs(path);
  impl_->file_service->PathChanged(path);
}

}  // namespace fedfs::node
