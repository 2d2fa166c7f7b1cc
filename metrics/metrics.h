// Metrics in the Prometheus text exposition format (version 0.0.4): what the
// daemon's /metrics endpoint (metrics/endpoint.h) and `fedfsctl metrics`
// print (docs/metrics.md names every family).
//
// Histogram: a latency distribution with fixed buckets, recorded lock-free
// by any thread (Observe), read by the scraper (Snapshot). Exposition: one
// scrape being written, family by family: each family's HELP and TYPE once,
// then its samples, every sample carrying the registry's constant labels.
// Registry: the collectors the parts registered at wiring time, each run on
// every scrape.
//
// Threads: Histogram is safe from any thread. A Registry's collectors are
// added before it is rendered (Add is not synchronised with Render); Render
// may run on several threads at once (each call its own Exposition).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fedfs::metrics {

// Label pairs, in the order they are printed.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Histogram {
 public:
  // Upper bounds in seconds: 10 us to 10 s, about x2.15 apart (+Inf last).
  static constexpr std::array<double, 19> kBounds = {
      1e-5,   2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2,
      2e-2,   5e-2, 0.1,  0.2,  0.5,  1.0,  2.0,  5.0,  10.0};

  void Observe(std::chrono::nanoseconds d);

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // not cumulative; last: +Inf
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Times one operation into a histogram: from construction to destruction.
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram* h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    if (h_ != nullptr) h_->Observe(std::chrono::steady_clock::now() - start_);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram* h_;
  std::chrono::steady_clock::time_point start_;
};

class Exposition {
 public:
  explicit Exposition(Labels constant = {}) : constant_(std::move(constant)) {}

  // `name` must match [a-zA-Z_:][a-zA-Z0-9_:]* (a sample of another name is
  // dropped: a defect, logged by Text's caller in tests); a counter's name
  // ends in _total. A family's help and type are the first given for it.
  void Counter(std::string_view name, std::string_view help, uint64_t value, const Labels& l = {});
  void Gauge(std::string_view name, std::string_view help, double value, const Labels& l = {});
  void Histogram(std::string_view name, std::string_view help, const Histogram::Snapshot& s,
                 const Labels& l = {});

  // The scrape: families in the order first written.
  std::string Text() const;
  // Samples dropped for a bad name.
  size_t dropped() const { return dropped_; }

 private:
  struct Family {
    std::string help, type;
    std::string samples;
  };
  Family* Of(std::string_view name, std::string_view help, std::string_view type);
  std::string LabelText(const Labels& l, std::string_view le = {}) const;

  Labels constant_;
  std::vector<std::string> order_;
  std::map<std::string, Family, std::less<>> families_;
  size_t dropped_ = 0;
};

// True when `name` is a valid metric or label name.
bool ValidName(std::string_view name);
// A label value with \, " and newline escaped.
std::string EscapeLabelValue(std::string_view v);

class Registry {
 public:
  using Collector = std::function<void(Exposition&)>;

  explicit Registry(Labels constant = {}) : constant_(std::move(constant)) {}
  void Add(Collector c) { collectors_.push_back(std::move(c)); }
  // One scrape: every collector, in the order added.
  std::string Render() const;

 private:
  Labels constant_;
  std::vector<Collector> collectors_;
};

// Walks a control reply (control/schema.h: its Fields visitor) into `e`: each
// unsigned number field F becomes the counter <prefix>_<F>_total unless F
// is in `gauges` (then the gauge <prefix>_<F>), a double or bool field a
// gauge, a present optional struct the fields of that struct under
// <prefix>_<F>; strings and vectors are skipped (labels of their own are the
// caller's). `help` is the family's help line, followed by the field's name.
template <class R>
void ExposeReply(Exposition& e, std::string_view prefix, std::string_view help, const R& reply,
                 std::initializer_list<std::string_view> gauges);

}  // namespace fedfs::metrics

#include "metrics/metrics_reply.inl"
