// Registration of a metric family in a prometheus::Registry: the name and
// help text Prometheus shows, with one series per label set added later.
//
//   prometheus::Family<prometheus::Counter>& calls =
//       CounterFamily(registry, "calls_total", "Calls served");
//   calls.Add({{"method", "Join"}}).Increment();
#ifndef REDUCER_SERVER_METRICS_METRIC_FAMILIES_H_
#define REDUCER_SERVER_METRICS_METRIC_FAMILIES_H_

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace reducer {

// The counters named `name`, described by `help`, registered in `registry`.
inline prometheus::Family<prometheus::Counter>& CounterFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

// The gauges named `name`, described by `help`, registered in `registry`.
inline prometheus::Family<prometheus::Gauge>& GaugeFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

// The histograms named `name`, described by `help`, registered in
// `registry`.
inline prometheus::Family<prometheus::Histogram>& HistogramFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

}  // namespace reducer

#endif  // REDUCER_SERVER_METRICS_METRIC_FAMILIES_H_
