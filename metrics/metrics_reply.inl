// ExposeReply (metrics/metrics.h): a control reply's fields as samples.
#pragma once

#include <algorithm>
#include <optional>
#include <type_traits>

namespace fedfs::metrics::detail {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class T>
concept HasFields = requires(T& t) { T::Fields(t, [](const char*, auto&) {}); };

template <class R>
void Walk(Exposition& e, const std::string& prefix, std::string_view help, const R& reply,
          const std::vector<std::string_view>& gauges) {
  R::Fields(reply, [&](const char* field, const auto& member) {
    using M = std::decay_t<decltype(member)>;
    const std::string name = prefix + "_" + field;
    const std::string line = std::string(help) + ": " + field;
    const bool gauge = std::find(gauges.begin(), gauges.end(), std::string_view(field)) != gauges.end();
    if constexpr (std::is_same_v<M, bool>) {
      e.Gauge(name, line, member ? 1 : 0);
    } else if constexpr (std::is_floating_point_v<M>) {
      e.Gauge(name, line, member);
    } else if constexpr (std::is_integral_v<M>) {
      if (gauge) {
        e.Gauge(name, line, static_cast<double>(member));
      } else {
        e.Counter(name + "_total", line, static_cast<uint64_t>(member));
      }
    } else if constexpr (IsOptional<M>::value) {
      if constexpr (HasFields<typename M::value_type>) {
        if (member) Walk(e, name, help, *member, gauges);
      }
    }
  });
}

}  // namespace fedfs::metrics::detail

namespace fedfs::metrics {

template <class R>
void ExposeReply(Exposition& e, std::string_view prefix, std::string_view help, const R& reply,
                 std::initializer_list<std::string_view> gauges) {
  detail::Walk(e, std::string(prefix), help, reply, std::vector<std::string_view>(gauges));
}

}  // namespace fedfs::metrics
