#define FUSE_USE_VERSION 312
#include "fuse/fuse_frontend.h"

#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "fuse/caller_groups.h"
#include "fuse/fuse_internal.h"
#include "fuse/mount_ctx.h"
#include "fuse/uring_channel.h"
#include "fuse/worker_loop.h"

namespace fedfs::fuse {
namespace {

using ns::Cred;
using ns::EntryOut;

// The FUSE mount at `mountpoint`: (major, minor) of its device, from
// /proc/self/mountinfo (no request to ourselves), the last one if stacked.
std::optional<std::pair<unsigned, unsigned>> MountDevice(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<std::pair<unsigned, unsigned>> found;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, devno, root, mnt;
    ss >> id >> parent >> devno >> root >> mnt;
    if (mnt != mountpoint) continue;
    if (line.find(" - fuse.") == std::string::npos) continue;
    const size_t colon = devno.find(':');
    if (colon == std::string::npos) continue;
    found = std::make_pair(static_cast<unsigned>(std::stoul(devno.substr(0, colon))),
                           static_cast<unsigned>(std::stoul(devno.substr(colon + 1))));
  }
  return found;
}

}  // namespace


// ---------------------------------------------------------------- kernel caches

void KernelNotifier::Enable(bool epoch_supported) {
  coherent_.store(epoch_supported, std::memory_order_release);
  if (epoch_supported) {
    Log()->info("kernel caches names (invalidated by FUSE_NOTIFY_INC_EPOCH)");
  } else {
    Log()->info("the kernel has no FUSE_NOTIFY_INC_EPOCH (FUSE < 7.44): names are not cached");
  }
}

void KernelNotifier::Attach(fuse_session* se) {
  std::unique_lock lock(mu_);
  session_ = se;
}

void KernelNotifier::Detach() {
  std::unique_lock lock(mu_);
  session_ = nullptr;
}

void KernelNotifier::InvalidateNames() {
  if (!Coherent()) return;
  marks_.Clear();  // before the drop (KernelNameMarks::Clear)
  names_epoch_.fetch_add(1, std::memory_order_acq_rel);  // before the kernel hears of it
  std::shared_lock lock(mu_);
  fuse_session* se = session_;
  if (se == nullptr) return;
  // libfuse 3.14 has no call for it: the notification is a bare header whose
  // error field is the notify code (FUSE_NOTIFY_INC_EPOCH = 8), written to
  // the session's device fd like any other notification.
  struct {
    uint32_t len;
    int32_t error;
    uint64_t unique;
  } hdr{16, 8, 0};
  static_assert(sizeof hdr == 16);
  const ssize_t n = ::write(fuse_session_fd(se), &hdr, sizeof hdr);
  if (n == static_cast<ssize_t>(sizeof hdr)) return;
  const int e = errno;
  if (e == ENOENT || e == ENODEV || e == EBADF) return;  // unmounted meanwhile
  // Names already cached cannot be taken back: say so loudly, and stop
  // handing out cacheable names.
  coherent_.store(false, std::memory_order_release);
  Log()->error("FUSE_NOTIFY_INC_EPOCH refused ({}): names are no longer cached; names cached so "
               "far may stay stale until their timeout",
               std::strerror(e));
}

bool KernelNotifier::InvalidateAttrs(uint64_t ino) {
  std::shared_lock lock(mu_);
  fuse_session* se = session_;
  if (se == nullptr) return true;
  // Attributes only (offset < 0): takes no inode lock in the kernel.
  const int rc = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  if (rc != 0 && rc != -ENOENT && rc != -ENODEV) {
    Log()->warn("invalidating the attributes of inode {}: {}", ino, std::strerror(-rc));
  }
  return rc != -ENOENT;
}

void KernelNotifier::InvalidateData(uint64_t ino, uint64_t offset, uint64_t length) {
  std::shared_lock lock(mu_);
  fuse_session* se = session_;
  if (se == nullptr) return;
  // len 0 is "to the end" for the kernel; a range that ends past what off_t
  // holds is too.
  const uint64_t max_off = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  if (offset > max_off) {
    InvalidateAttrs(ino);  // no page is there
    return;
  }
  const off_t len = length > max_off - offset ? 0 : static_cast<off_t>(length);
  const int rc = fuse_lowlevel_notify_inval_inode(se, ino, static_cast<off_t>(offset), len);
  if (rc != 0 && rc != -ENOENT && rc != -ENODEV) {
    Log()->warn("invalidating the pages of inode {}: {}", ino, std::strerror(-rc));
  }
}

// FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36, protocol 7.39) in flags2; this
// system's <linux/fuse.h> predates it.
constexpr uint32_t kDirectIoAllowMmap2 = 1u << (36 - 32);

// The INIT request (before libfuse handles it): what the kernel offers.
// True if that includes the rings.
bool OnInitRequest(FuseMount::Ctx* ctx, const void* buf, size_t size) {
  if (size < sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) + sizeof(uint32_t)) return false;
  const auto* in = static_cast<const fuse_in_header*>(buf);
  const auto* arg = reinterpret_cast<const fuse_init_in*>(in + 1);
  ctx->killpriv_offered = arg->major == 7 && arg->minor >= 33 &&
                          (arg->flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
  // flags2 (7.36) is there only with FUSE_INIT_EXT.
  ctx->direct_mmap_offered =
      arg->major == 7 && arg->minor >= 39 && (arg->flags & FUSE_INIT_EXT) != 0 &&
      size >= sizeof(fuse_in_header) + offsetof(fuse_init_in, flags2) + sizeof(uint32_t) &&
      (arg->flags2 & kDirectIoAllowMmap2) != 0;
  ctx->uring_offered = ctx->uring != nullptr && ctx->uring->OnInitRequest(buf, size);
  ctx->init_unique.store(in->unique, std::memory_order_release);
  return ctx->uring_offered;
}

// Every reply goes out here (fuse_session_custom_io): the INIT reply with
// what libfuse 3.14 cannot ask for, then the rings take their replies.
ssize_t FrontendWritev(int fd, struct iovec* iov, int count, void* userdata) {
  auto* ctx = static_cast<FuseMount::Ctx*>(userdata);
  const uint64_t init_unique = ctx->init_unique.load(std::memory_order_acquire);
  if (init_unique != 0 && count == 2 && iov[0].iov_len == sizeof(fuse_out_header) &&
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == init_unique) {
    ctx->init_unique.store(0, std::memory_order_release);
    fuse_init_out arg;
    iovec patched[2];
    if (static_cast<const fuse_out_header*>(iov[0].iov_base)->error == 0 &&
        (ctx->killpriv_offered || ctx->direct_mmap_offered) && iov[1].iov_len == sizeof arg) {
      std::memcpy(&arg, iov[1].iov_base, sizeof arg);
      if (ctx->killpriv_offered) {
        arg.flags |= FUSE_HANDLE_KILLPRIV_V2;
        ctx->killpriv = true;
      }
      if (ctx->direct_mmap_offered) {  // flags2 is read with FUSE_INIT_EXT only
        arg.flags |= FUSE_INIT_EXT;
        arg.flags2 |= kDirectIoAllowMmap2;
      }
      patched[0] = iov[0];
      patched[1] = {&arg, sizeof arg};
      iov = patched;
    }
    if (ctx->uring_offered) return ctx->uring->InitReply(fd, iov, count);
    return ::writev(fd, iov, count);
  }
  if (ctx->uring != nullptr) return ctx->uring->Writev(fd, iov, count);
  return ::writev(fd, iov, count);
}

ssize_t DeviceRead(int fd, void* buf, size_t len, void*) { return ::read(fd, buf, len); }

struct FuseMount::State {
  std::unique_ptr<UringChannel> uring;
  std::unique_ptr<WorkerLoop> loop;
  std::atomic<bool> loop_done{false};
};

Status CheckMountpoint(const std::string& mp) {
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) {
    const int e = errno;
    // ECONNABORTED: the dead daemon's connection is being ended (its
    // io_uring rings are torn down just after its exit).
    if (e == ENOTCONN || e == ECONNABORTED) {
      return Err(ENOTCONN, "mountpoint " + mp +
                               " is a stale FUSE mount (a previous fedfsd crashed?); clear it "
                               "with: fusermount3 -u " + mp);
    }
    return Err(e, "mountpoint " + mp + ": " + std::strerror(e));
  }
  if (!S_ISDIR(st.st_mode)) return Err(ENOTDIR, "mountpoint " + mp + " is not a directory");
  return Ok();
}

namespace {

// The file system type of the mount at `mp` ("" when none), from
// /proc/self/mountinfo (the last mount there wins, as it covers the others).
std::string MountTypeAt(const std::string& mp) {
  std::ifstream in("/proc/self/mountinfo");
  std::string type;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string id, parent, dev, root, point;
    ss >> id >> parent >> dev >> root >> point;
    if (point != mp) continue;
    // Optional fields, then "-", then the type.
    for (std::string f; ss >> f;) {
      if (f == "-") {
        ss >> type;
        break;
      }
    }
  }
  return type;
}

}  // namespace

Status ClearStaleMount(const std::string& mountpoint, bool* cleared) {
  *cleared = false;
  Status s = CheckMountpoint(mountpoint);
  if (s || s.error().code != ENOTCONN) return Ok();  // nothing stale (or another problem)
  const std::string mp = std::filesystem::path(mountpoint).lexically_normal().string();
  const std::string type = MountTypeAt(mp);
  if (type != "fuse.fedfs") {
    return Err(EBUSY, "mountpoint " + mountpoint + " is a stale mount of type " +
                          (type.empty() ? "unknown" : type) + ", not FedFS's: left alone");
  }
  if (::umount2(mp.c_str(), MNT_DETACH) != 0) {
    const int e = errno;
    return Err(e, "mountpoint " + mountpoint + ": cannot detach the stale FedFS mount: " +
                      std::strerror(e));
  }
  *cleared = true;
  return Ok();
}

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(const FuseOptions& options, ns::Vfs* vfs) {
  if (auto s = CheckMountpoint(options.mountpoint); !s) return Err(s.error());
  std::unique_ptr<FuseMount> m(new FuseMount(options));
  m->state_ = std::make_unique<State>();

  std::string o = "fsname=" + options.fsname + ",subtype=fedfs";
  if (options.allow_other) o += ",allow_other";
  if (options.default_permissions) o += ",default_permissions";
  std::vector<std::string> argv_s = {"fedfsd", "-o", o};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const fuse_lowlevel_ops kOps = MakeOps();
  m->ctx_ = std::make_unique<Ctx>();
  m->ctx_->vfs = vfs;
  m->ctx_->notifier = m->notifier_.get();
  m->ctx_->metrics = options.metrics;
  m->ctx_->explicit_inval_data = options.explicit_inval_data;
  m->session_ = fuse_session_new(&args, &kOps, sizeof kOps, m->ctx_.get());
  fuse_opt_free_args(&args);  // the session keeps its own copies
  if (m->session_ == nullptr) {
    return Err(EINVAL, "cannot create the FUSE session (options: " + o + ")");
  }
  if (fuse_session_mount(m->session_, options.mountpoint.c_str()) != 0) {
    fuse_session_destroy(m->session_);
    m->session_ = nullptr;
    return Err(EIO, "cannot mount FUSE at " + options.mountpoint +
                        " (is /dev/fuse available and are we root?)");
  }
  if (auto dev = MountDevice(options.mountpoint)) {
    m->conn_id_ = std::to_string((dev->first << 20) | dev->second);  // the kernel's s_dev
    m->bdi_ = std::to_string(dev->first) + ":" + std::to_string(dev->second);
  }
  if (options.read_ahead_kb > 0 && !m->bdi_.empty()) {
    m->ctx_->read_ahead_file = "/sys/class/bdi/" + m->bdi_ + "/read_ahead_kb";
    m->ctx_->read_ahead_kb = options.read_ahead_kb;
    m->ctx_->read_ahead_pending = true;
  }
  m->notifier_->Attach(m->session_);
  fuse_session* se = m->session_;
  State* state = m->state_.get();
  const unsigned max_threads = std::max(1u, options.max_threads);
  std::string uring_note = "off";
  static const fuse_custom_io kIo = {.writev = FrontendWritev, .read = DeviceRead};
  const bool custom_io = fuse_session_custom_io(se, &kIo, fuse_session_fd(se)) == 0;
  if (!custom_io) Log()->warn("libfuse refused a custom writev: every write asks for security.capability");
  if (options.io_uring) {
    // max_threads spread over the CPUs' queues, at least two per queue so
    // that one blocked request does not hold up a CPU's others.
    const unsigned cpus = static_cast<unsigned>(std::max(1, ::get_nprocs_conf()));
    const unsigned per_queue = std::max(2u, (max_threads + cpus - 1) / cpus);
    std::string why_not = "libfuse refused a custom writev";
    if (custom_io) state->uring = UringChannel::Create(se, per_queue, &why_not);
    if (state->uring) {
      m->ctx_->uring = state->uring.get();
      uring_note = "if the kernel offers it, " + std::to_string(per_queue) + " threads per CPU";
    } else {
      uring_note = "unavailable: " + why_not;
    }
  }
  WorkerLoopOptions lo{.threads = max_threads, .spin = std::chrono::microseconds(options.spin_us)};
  lo.on_init = [state, ctx = m->ctx_.get()](const void* buf, size_t size) {
    // Once requests come over the rings, /dev/fuse carries only forgets,
    // interrupts and INIT: nothing there is worth spinning for.
    if (OnInitRequest(ctx, buf, size)) state->loop->SetSpin({});
  };
  state->loop = std::make_unique<WorkerLoop>(se, lo);
  m->loop_ = std::thread([state, ctx = m->ctx_.get(), gone = options.on_unmounted,
                           mp = options.mountpoint] {
    const int rc = state->loop->Run();
    if (rc != 0) Log()->info("FUSE loop ended ({})", std::strerror(-rc));
    state->loop_done = true;
    if (rc == 0 && !ctx->stopping.load() && gone) {
      Log()->info("{} was unmounted from outside", mp);
      gone();
    }
  });
  NameThread(m->loop_, "fuse-dev");
  Log()->info("mounted at {} (max {} threads, spin {} us, io_uring {}{}{})", options.mountpoint,
              max_threads, options.spin_us, uring_note, options.allow_other ? ", allow_other" : "",
              options.default_permissions ? ", default_permissions" : "");
  return m;
}

FuseMount::FuseMount(FuseOptions options) : options_(std::move(options)) {}

FuseMount::~FuseMount() { Unmount(); }

bool FuseMount::Abort(const char* why, bool loud) {
  if (conn_id_.empty()) return false;
  const std::string dir = "/sys/fs/fuse/connections";
  const std::string path = dir + "/" + conn_id_ + "/abort";
  // Many systems mount fusectl at boot; where none did, mount it (as root,
  // which mounting FUSE needed anyway).
  if (::access(path.c_str(), W_OK) != 0 &&
      ::mount("fusectl", dir.c_str(), "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    Log()->error("cannot mount fusectl on {} to abort FUSE connection {}: {}", dir, conn_id_,
                 std::strerror(errno));
    return false;
  }
  std::ofstream out(path);
  out << "1";
  out.flush();
  if (!out) {
    Log()->error("cannot abort FUSE connection {} ({})", conn_id_, path);
    return false;
  }
  if (loud) {
    Log()->warn("FUSE connection {} aborted: {}", conn_id_, why);
  } else {
    Log()->info("FUSE connection {} aborted: {}", conn_id_, why);
  }
  return true;
}

void FuseMount::Unmount() {
  if (session_ == nullptr) return;
  // Names the kernel keeps (present or missing) must not outlive the daemon
  // that takes them back: each is looked up again at its next use, which
  // fails with ENOTCONN once the connection is gone.
  notifier_->InvalidateNames();
  notifier_->Detach();  // waits for notifications being written
  ctx_->stopping = true;
  // The workers finish the requests they serve and return. The device stays
  // open until then: a reply must not go to a closed (or reused) descriptor.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  const bool rings_done = !state_->uring || state_->uring->Stop(deadline);
  state_->loop->Stop();
  while (!state_->loop_done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!state_->loop_done || !rings_done) {
    // A handler still blocked: end the connection (processes using the mount
    // get ENOTCONN), detach the mount, and leave that thread and the session
    // whose descriptor it holds to the process's exit rather than hang.
    Log()->error("a FUSE worker of {} is still serving a request; leaving it behind",
                 options_.mountpoint);
    Abort("a worker is still serving a request", /*loud=*/true);
    ::umount2(options_.mountpoint.c_str(), MNT_DETACH);
    loop_.detach();
    // What that thread still uses stays allocated (leaked on purpose).
    (void)state_.release();
    (void)ctx_.release();
    session_ = nullptr;
    return;
  }
  loop_.join();
  bool rings = false;
  if (state_->uring) {
    const bool started = state_->uring->started();
    rings = started;
    Log()->info("{} requests were served over io_uring", state_->uring->served());
    state_->uring.reset();
    // The rings' commands hold the device open until the kernel's teardown
    // of the closed rings, which runs later: closing our descriptor would
    // not end the connection at once, and a request arriving meanwhile
    // would wait for that (then fail with ECONNABORTED). Ended here, every
    // request after the daemon has gone gets ENOTCONN, as without rings.
    if (started) Abort("the rings are closed", /*loud=*/false);
  }
  // Closes the device, the connection's last descriptor, so the kernel ends
  // the connection (a process keeping the mount busy gets ENOTCONN from then
  // on), then unmounts lazily.
  fuse_session_unmount(session_);
  fuse_session_destroy(session_);
  session_ = nullptr;
  // libfuse leaves the mount alone when the connection was aborted (it
  // takes that for an unmount done elsewhere): detach it here.
  if (rings && ::umount2(options_.mountpoint.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    Log()->error("cannot unmount {}: {}", options_.mountpoint, std::strerror(errno));
  }
  Log()->info("unmounted {}", options_.mountpoint);
}

}  // namespace fedfs::fuse
