#include "metrics/metrics.h"

#include <cmath>
#include <cstdio>

namespace fedfs::metrics {

void Histogram::Observe(std::chrono::nanoseconds d) {
  const int64_t ns = d.count() < 0 ? 0 : d.count();
  const double s = static_cast<double>(ns) * 1e-9;
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    s.count += s.buckets[i];
  }
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

namespace {

// \ and newline escaped, and " too when `quote` (label values; help text
// keeps its quotes).
std::string Escape(std::string_view v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) { return Escape(v, true); }

namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Help text on one line.
std::string EscapeHelp(std::string_view h) { return Escape(h, false); }

}  // namespace

std::string Exposition::LabelText(const Labels& l, std::string_view le) const {
  std::string out;
  auto add = [&](std::string_view k, std::string_view v) {
    if (!ValidName(k)) return;
    out += out.empty() ? "{" : ",";
    out += k;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  };
  for (const auto& [k, v] : constant_) add(k, v);
  for (const auto& [k, v] : l) add(k, v);
  if (!le.empty()) add("le", le);
  if (!out.empty()) out += '}';
  return out;
}

Exposition::Family* Exposition::Of(std::string_view name, std::string_view help,
                                   std::string_view type) {
  if (!ValidName(name)) {
    ++dropped_;
    return nullptr;
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{EscapeHelp(help), std::string(type), {}}).first;
    order_.emplace_back(name);
  } else if (it->second.type != type) {
    ++dropped_;  // one name, two types: the first stands
    return nullptr;
  }
  return &it->second;
}

void Exposition::Counter(std::string_view name, std::string_view help, uint64_t value,
                         const Labels& l) {
  Family* f = Of(name, help, "counter");
  if (f == nullptr) return;
  f->samples += std::string(name) + LabelText(l) + " " + std::to_string(value) + "\n";
}

void Exposition::Gauge(std::string_view name, std::string_view help, double value,
                       const Labels& l) {
  Family* f = Of(name, help, "gauge");
  if (f == nullptr) return;
  f->samples += std::string(name) + LabelText(l) + " " + Number(value) + "\n";
}

void Exposition::Histogram(std::string_view name, std::string_view help,
                           const metrics::Histogram::Snapshot& s, const Labels& l) {
  Family* f = Of(name, help, "histogram");
  if (f == nullptr) return;
  const std::string n(name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < s.buckets.size(); ++i) {
    cumulative += s.buckets[i];
    const std::string le = i < metrics::Histogram::kBounds.size()
                               ? Number(metrics::Histogram::kBounds[i])
                               : std::string("+Inf");
    f->samples += n + "_bucket" + LabelText(l, le) + " " + std::to_string(cumulative) + "\n";
  }
  f->samples += n + "_sum" + LabelText(l) + " " + Number(s.sum_seconds) + "\n";
  f->samples += n + "_count" + LabelText(l) + " " + std::to_string(cumulative) + "\n";
}

std::string Exposition::Text() const {
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.find(name)->second;
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + f.type + "\n";
    out += f.samples;
  }
  return out;
}

std::string Registry::Render() const {
  Exposition e(constant_);
  for (const Collector& c : collectors_) c(e);
  return e.Text();
}

}  // namespace fedfs::metrics
