// The WGL search (see history_check.h). The model state is one byte per
// interned path (none/file/dir) so that (linearized set, state) is a short
// string, cheap to hash for the memo.
#include "tests/tools/history_check.h"

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace fedfs::testing {

void HistoryRecorder::End(NsOp op, HistoryClock::time_point invoke) {
  op.response = HistoryClock::now();
  op.invoke = invoke;
  std::lock_guard lock(mu_);
  ops_.push_back(std::move(op));
}

std::vector<NsOp> HistoryRecorder::Take() {
  std::lock_guard lock(mu_);
  return std::move(ops_);
}

namespace {

const char* KindName(NsOpKind k) {
  switch (k) {
    case NsOpKind::kCreate: return "create";
    case NsOpKind::kUnlink: return "unlink";
    case NsOpKind::kRename: return "rename";
    case NsOpKind::kRenameNoReplace: return "rename_noreplace";
    case NsOpKind::kStat: return "stat";
    case NsOpKind::kReaddir: return "readdir";
    case NsOpKind::kMkdir: return "mkdir";
    case NsOpKind::kRmdir: return "rmdir";
    case NsOpKind::kExists: return "exists";
  }
  return "?";
}

std::string ErrName(int err) {
  if (err == 0) return "ok";
  const char* n = ::strerrorname_np(err);
  return n != nullptr ? n : "errno " + std::to_string(err);
}

std::string Names(const std::set<std::string>& names) {
  std::string s = "{";
  for (const auto& n : names) s += (s.size() > 1 ? "," : "") + n;
  return s + "}";
}

// What an operation returns: errno, and the type or names when it succeeded.
struct Outcome {
  int err = 0;
  NsType type = NsType::kNone;
  std::set<std::string> names;
};

std::string FormatOutcome(NsOpKind kind, const Outcome& o) {
  if (o.err != 0) return ErrName(o.err);
  if (kind == NsOpKind::kStat) return o.type == NsType::kDir ? "dir" : "file";
  if (kind == NsOpKind::kReaddir) return Names(o.names);
  return "ok";
}

std::string Parent(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}
std::string Base(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
bool IsBeneath(const std::string& p, const std::string& dir) {  // strictly beneath
  if (dir.empty()) return !p.empty();
  return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && p[dir.size()] == '/';
}

// The sequential model over interned paths.
class Model {
 public:
  using State = std::string;  // one NsType byte per path id

  Model(const std::vector<NsOp>& h, const std::map<std::string, NsType>& initial) {
    Intern("");
    for (const auto& [p, t] : initial) Intern(p);
    for (const auto& op : h) {
      Intern(op.a);
      if (op.kind == NsOpKind::kRename || op.kind == NsOpKind::kRenameNoReplace) Intern(op.b);
    }
    // A directory renamed carries its children: the moved paths must be
    // known too. Iterate to a fixpoint, bounded (renames into one's own
    // subtree are refused by the model, so this converges in practice).
    for (bool grew = true; grew && paths_.size() < 4096;) {
      grew = false;
      for (const auto& op : h) {
        if (op.kind != NsOpKind::kRename && op.kind != NsOpKind::kRenameNoReplace) continue;
        if (IsBeneath(op.b, op.a) || op.a == op.b) continue;
        const size_t n = paths_.size();
        for (size_t i = 0; i < n; ++i) {
          if (IsBeneath(paths_[i], op.a)) {
            const std::string moved = op.b + paths_[i].substr(op.a.size());
            if (!ids_.contains(moved)) {
              Intern(moved);
              grew = true;
            }
          }
        }
      }
    }
    children_.assign(paths_.size(), {});
    parent_.assign(paths_.size(), -1);
    for (size_t i = 1; i < paths_.size(); ++i) {
      parent_[i] = ids_.at(Parent(paths_[i]));
      children_[static_cast<size_t>(parent_[i])].push_back(static_cast<int>(i));
    }
    initial_.assign(paths_.size(), static_cast<char>(NsType::kNone));
    initial_[0] = static_cast<char>(NsType::kDir);
    for (const auto& [p, t] : initial) initial_[static_cast<size_t>(ids_.at(p))] = static_cast<char>(t);
  }

  const State& initial() const { return initial_; }

  // The result `op` gets in state `s`; `next` is the state after it.
  Outcome Apply(const State& s, const NsOp& op, State* next) const {
    *next = s;
    Outcome o;
    const int a = ids_.at(op.a);
    switch (op.kind) {
      case NsOpKind::kCreate:
      case NsOpKind::kMkdir:
        if ((o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) != NsType::kNone) return o.err = EEXIST, o;
        (*next)[static_cast<size_t>(a)] =
            static_cast<char>(op.kind == NsOpKind::kCreate ? NsType::kFile : NsType::kDir);
        return o;
      case NsOpKind::kUnlink:
      case NsOpKind::kRmdir:
        if ((o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) == NsType::kNone) return o.err = ENOENT, o;
        if (op.kind == NsOpKind::kUnlink && Type(s, a) == NsType::kDir) return o.err = EISDIR, o;
        if (op.kind == NsOpKind::kRmdir && Type(s, a) == NsType::kFile) return o.err = ENOTDIR, o;
        if (op.kind == NsOpKind::kRmdir && HasChildren(s, a)) return o.err = ENOTEMPTY, o;
        (*next)[static_cast<size_t>(a)] = static_cast<char>(NsType::kNone);
        return o;
      case NsOpKind::kStat:
        if ((o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) == NsType::kNone) return o.err = ENOENT, o;
        o.type = Type(s, a);
        return o;
      case NsOpKind::kExists:
        if ((o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) == NsType::kNone) o.err = ENOENT;
        return o;
      case NsOpKind::kReaddir:
        if (a != 0 && (o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) == NsType::kNone) return o.err = ENOENT, o;
        if (Type(s, a) == NsType::kFile) return o.err = ENOTDIR, o;
        for (int c : children_[static_cast<size_t>(a)]) {
          if (Type(s, c) != NsType::kNone) o.names.insert(Base(paths_[static_cast<size_t>(c)]));
        }
        return o;
      case NsOpKind::kRename:
      case NsOpKind::kRenameNoReplace: {
        // The order of checks follows Linux's do_renameat2/vfs_rename.
        const int b = ids_.at(op.b);
        const bool noreplace = op.kind == NsOpKind::kRenameNoReplace;
        if ((o.err = ResolveParent(s, a)) != 0) return o;
        if (Type(s, a) == NsType::kNone) return o.err = ENOENT, o;
        if ((o.err = ResolveParent(s, b)) != 0) return o;
        const NsType ta = Type(s, a), tb = Type(s, b);
        if (noreplace && tb != NsType::kNone) return o.err = EEXIST, o;
        if (IsBeneath(op.b, op.a)) return o.err = EINVAL, o;
        if (IsBeneath(op.a, op.b)) return o.err = ENOTEMPTY, o;
        if (a == b) return o;
        if (tb == NsType::kDir && ta != NsType::kDir) return o.err = EISDIR, o;
        if (tb == NsType::kFile && ta == NsType::kDir) return o.err = ENOTDIR, o;
        if (tb == NsType::kDir && HasChildren(s, b)) return o.err = ENOTEMPTY, o;
        // Move a and its subtree to b (b, a directory, is empty here).
        for (size_t i = 0; i < paths_.size(); ++i) {
          if (static_cast<int>(i) == a || IsBeneath(paths_[i], op.a)) {
            const auto t = s[i];
            if (static_cast<NsType>(t) == NsType::kNone) continue;
            (*next)[i] = static_cast<char>(NsType::kNone);
            (*next)[static_cast<size_t>(ids_.at(op.b + paths_[i].substr(op.a.size())))] = t;
          }
        }
        return o;
      }
    }
    return o;
  }

  std::string Describe(const State& s) const {
    std::string out = "{";
    for (size_t i = 1; i < paths_.size(); ++i) {
      if (static_cast<NsType>(s[i]) == NsType::kNone) continue;
      out += (out.size() > 1 ? ", " : "") + paths_[i] +
             (static_cast<NsType>(s[i]) == NsType::kDir ? "/" : "");
    }
    return out + "}";
  }

 private:
  void Intern(const std::string& p) {
    if (ids_.contains(p)) return;
    if (!p.empty()) Intern(Parent(p));
    ids_.emplace(p, static_cast<int>(paths_.size()));
    paths_.push_back(p);
  }
  static NsType Type(const State& s, int id) { return static_cast<NsType>(s[static_cast<size_t>(id)]); }
  bool HasChildren(const State& s, int id) const {
    for (int c : children_[static_cast<size_t>(id)]) {
      if (Type(s, c) != NsType::kNone) return true;
    }
    return false;
  }
  // Path resolution of the parent of `id`: ENOENT if a component is
  // missing, ENOTDIR if one is a file.
  int ResolveParent(const State& s, int id) const {
    std::vector<int> chain;
    for (int p = parent_[static_cast<size_t>(id)]; p > 0; p = parent_[static_cast<size_t>(p)]) chain.push_back(p);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (Type(s, *it) == NsType::kNone) return ENOENT;
      if (Type(s, *it) == NsType::kFile) return ENOTDIR;
    }
    return 0;
  }

  std::vector<std::string> paths_;
  std::unordered_map<std::string, int> ids_;
  std::vector<int> parent_;
  std::vector<std::vector<int>> children_;
  State initial_;
};

bool Matches(const NsOp& op, const Outcome& o) {
  if (op.err != o.err) return false;
  if (o.err != 0) return true;
  if (op.kind == NsOpKind::kStat) return op.type == o.type;
  if (op.kind == NsOpKind::kReaddir) return op.names == o.names;
  return true;
}

// The invocation/response list of WGL: entries 0..2n-1 plus a head sentinel.
struct Entry {
  int op = -1;
  bool call = false;
  int match = -1;  // the other entry of the same op
  int prev = -1, next = -1;
};

constexpr uint64_t kMaxExplored = 20'000'000;
// The memo's keys hold a bit per operation: a history of a chaos run of
// half an hour (about 100,000 operations per worker, thousands of unknown
// outcomes) filled 24 GiB before this bound.
constexpr uint64_t kMaxMemoBytes = uint64_t{2} << 30;

}  // namespace

std::string FormatOp(const NsOp& op) {
  std::ostringstream s;
  s << "p" << op.process << " " << KindName(op.kind) << "(" << op.a;
  if (op.kind == NsOpKind::kRename || op.kind == NsOpKind::kRenameNoReplace) s << ", " << op.b;
  s << ") -> " << FormatOutcome(op.kind, Outcome{op.err, op.type, op.names});
  return s.str();
}

std::string FormatHistory(const std::vector<NsOp>& history) {
  std::vector<size_t> order(history.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return history[x].invoke < history[y].invoke; });
  if (order.empty()) return "(empty history)\n";
  const auto t0 = history[order[0]].invoke;
  auto us = [&](HistoryClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - t0).count();
  };
  std::ostringstream s;
  for (size_t i : order) {
    s << "  #" << i << " [" << us(history[i].invoke) << ", " << us(history[i].response) << "] us  "
      << FormatOp(history[i]) << "\n";
  }
  return s.str();
}

namespace {

// The history as checked: each rename_noreplace answered EEXIST becomes its
// two lookups (history_check.h): "exists(a)" in its place and "exists(b)"
// appended, which may be linearized only after its first half
// (`after[i]`: the operation that must come first, or -1).
std::vector<NsOp> SplitTwoLookupAnswers(const std::vector<NsOp>& history, std::vector<int>* after) {
  std::vector<NsOp> h = history;
  after->assign(h.size(), -1);
  for (size_t i = 0; i < history.size(); ++i) {
    if (history[i].kind != NsOpKind::kRenameNoReplace || history[i].err != EEXIST) continue;
    h[i].kind = NsOpKind::kExists;
    h[i].err = 0;
    std::string b = std::exchange(h[i].b, {});
    NsOp second = h[i];
    second.a = std::move(b);
    h.push_back(std::move(second));
    after->push_back(static_cast<int>(i));
  }
  return h;
}

}  // namespace

bool OutcomeUnknown(int err) {
  return err == ETIMEDOUT || err == EIO || err == ECONNRESET || err == ENOTCONN || err == EHOSTDOWN ||
         err == EAGAIN || err == ECONNABORTED;
}

HistoryVerdict CheckLinearizable(const std::vector<NsOp>& recorded,
                                 const std::map<std::string, NsType>& initial,
                                 bool unknown_outcomes) {
  HistoryVerdict verdict;
  std::vector<int> after;
  std::vector<NsOp> h = SplitTwoLookupAnswers(recorded, &after);
  // Outcomes not known (history_check.h): no response, any result.
  std::vector<bool> unknown(h.size(), false);
  if (unknown_outcomes) {
    for (size_t i = 0; i < h.size(); ++i) {
      if (OutcomeUnknown(h[i].err)) {
        unknown[i] = true;
        h[i].response = HistoryClock::time_point::max();
      }
    }
  }
  auto matches = [&](size_t i, const Outcome& o) { return unknown[i] || Matches(h[i], o); };
  const Model model(h, initial);
  const size_t n = h.size();
  if (n == 0) {
    verdict.linearizable = true;
    return verdict;
  }

  // Events sorted by time; on equal times calls come first (the two
  // operations are then concurrent, the permissive reading).
  std::vector<Entry> e(2 * n + 1);
  std::vector<int> order(2 * n);
  for (size_t i = 0; i < n; ++i) {
    e[2 * i] = {static_cast<int>(i), true, static_cast<int>(2 * i + 1)};
    e[2 * i + 1] = {static_cast<int>(i), false, static_cast<int>(2 * i)};
    order[2 * i] = static_cast<int>(2 * i);
    order[2 * i + 1] = static_cast<int>(2 * i + 1);
  }
  auto time_of = [&](int x) {
    const NsOp& op = h[static_cast<size_t>(e[static_cast<size_t>(x)].op)];
    return e[static_cast<size_t>(x)].call ? op.invoke : op.response;
  };
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    const auto tx = time_of(x), ty = time_of(y);
    if (tx != ty) return tx < ty;
    if (e[static_cast<size_t>(x)].call != e[static_cast<size_t>(y)].call) return e[static_cast<size_t>(x)].call;
    return x < y;
  });
  const int head = static_cast<int>(2 * n);
  auto& H = e[static_cast<size_t>(head)];
  H.next = order[0];
  for (size_t i = 0; i < order.size(); ++i) {
    auto& cur = e[static_cast<size_t>(order[i])];
    cur.prev = i == 0 ? head : order[i - 1];
    cur.next = i + 1 < order.size() ? order[i + 1] : -1;
  }
  auto at = [&](int x) -> Entry& { return e[static_cast<size_t>(x)]; };
  auto lift = [&](int x) {
    Entry& c = at(x);
    at(c.prev).next = c.next;
    if (c.next >= 0) at(c.next).prev = c.prev;
    Entry& r = at(c.match);
    at(r.prev).next = r.next;
    if (r.next >= 0) at(r.next).prev = r.prev;
  };
  auto unlift = [&](int x) {
    Entry& c = at(x);
    Entry& r = at(c.match);
    at(r.prev).next = c.match;
    if (r.next >= 0) at(r.next).prev = c.match;
    at(c.prev).next = x;
    if (c.next >= 0) at(c.next).prev = x;
  };

  const size_t words = (n + 63) / 64;
  std::string linearized(words * 8, '\0');  // the bitset, as bytes
  auto flip = [&](int op) { linearized[static_cast<size_t>(op) / 8] ^= static_cast<char>(1u << (op % 8)); };
  auto done = [&](int op) {
    return (linearized[static_cast<size_t>(op) / 8] & static_cast<char>(1u << (op % 8))) != 0;
  };
  std::unordered_set<std::string> memo;
  // Every key is a bitset and a state of fixed lengths; 64 for the node.
  const uint64_t key_bytes = linearized.size() + model.initial().size() + 64;
  struct Frame {
    int entry;
    Model::State state;
  };
  std::vector<Frame> calls;
  Model::State state = model.initial();
  // The deepest point reached, for the explanation.
  std::vector<int> best_ops;
  Model::State best_state = state;

  int cur = H.next;
  Model::State next;
  while (H.next >= 0) {
    const uint64_t memo_bytes = memo.size() * key_bytes;
    if (++verdict.explored > kMaxExplored || memo_bytes > kMaxMemoBytes) {
      verdict.explanation = "search gave up after " + std::to_string(verdict.explored - 1) +
                            " configurations, " + std::to_string(memo_bytes >> 20) +
                            " MiB remembered (history too large or too concurrent)\n";
      verdict.gave_up = true;
      return verdict;
    }
    Entry& c = at(cur);
    if (c.call) {
      const NsOp& op = h[static_cast<size_t>(c.op)];
      const int first = after[static_cast<size_t>(c.op)];
      const Outcome o = model.Apply(state, op, &next);
      bool advanced = false;
      if ((first < 0 || done(first)) && matches(static_cast<size_t>(c.op), o)) {
        flip(c.op);
        if (memo.insert(linearized + next).second) {
          calls.push_back({cur, state});
          state = std::move(next);
          lift(cur);
          advanced = true;
          if (calls.size() > best_ops.size()) {
            best_ops.clear();
            for (const auto& f : calls) best_ops.push_back(at(f.entry).op);
            best_state = state;
          }
          cur = H.next;
        } else {
          flip(c.op);
        }
      }
      if (!advanced) cur = c.next;
    } else {
      // A response with its operation not yet linearized: backtrack.
      if (calls.empty()) break;
      Frame f = std::move(calls.back());
      calls.pop_back();
      state = std::move(f.state);
      flip(at(f.entry).op);
      unlift(f.entry);
      cur = at(f.entry).next;
    }
  }
  if (H.next < 0) {
    verdict.linearizable = true;
    return verdict;
  }

  // Explanation: the longest linearizable prefix found, the state after it,
  // and the operations that could have come next.
  std::ostringstream s;
  std::vector<bool> in_prefix(n, false);
  for (int op : best_ops) in_prefix[static_cast<size_t>(op)] = true;
  auto earliest = HistoryClock::time_point::max();
  int must = -1;
  for (size_t i = 0; i < n; ++i) {
    if (!in_prefix[i] && h[i].response < earliest) earliest = h[i].response, must = static_cast<int>(i);
  }
  s << "not linearizable: the longest linearizable prefix has " << best_ops.size() << " of " << n
    << " operations; no operation can extend it.\n";
  const size_t tail = std::min<size_t>(best_ops.size(), 12);
  s << "last " << tail << " operations of that prefix (linearization order):\n";
  for (size_t i = best_ops.size() - tail; i < best_ops.size(); ++i) {
    s << "  #" << best_ops[i] << " " << FormatOp(h[static_cast<size_t>(best_ops[i])]) << "\n";
  }
  s << "model state after it: " << model.Describe(best_state) << "\n";
  s << "candidates for the next operation (invoked before #" << must
    << " returned, which must precede everything invoked after that):\n";
  for (size_t i = 0; i < n; ++i) {
    if (in_prefix[i] || h[i].invoke > earliest) continue;
    const Outcome o = model.Apply(best_state, h[i], &next);
    s << "  #" << i << " " << FormatOp(h[i]) << "   model says: " << FormatOutcome(h[i].kind, o)
      << (matches(i, o) ? " (agrees; but every order starting with it dead-ends later)" : "") << "\n";
  }
  s << "(#N are indexes into the history; print it with FormatHistory. An exists(x) is a\n"
       " lookup of a rename_noreplace answered EEXIST: the first half keeps the rename's #N,\n"
       " the second is numbered after the history's last operation)\n";
  verdict.explanation = s.str();
  return verdict;
}

}  // namespace fedfs::testing
