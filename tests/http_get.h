// Test support: a plain HTTP/1.0 GET against a loopback port, for scraping
// /metrics and querying Prometheus' HTTP API, and a parser for Prometheus'
// text exposition format.
//
//   absl::StatusOr<std::string> body = HttpGet(port, "/metrics");
//   absl::StatusOr<std::vector<Sample>> samples = ParseExposition(*body);
//
// Thread-safe (no shared state).
#ifndef REDUCER_TESTS_HTTP_GET_H_
#define REDUCER_TESTS_HTTP_GET_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace reducer {
namespace testing {

// The body of `GET path` from 127.0.0.1:port. UNAVAILABLE when the
// connection fails, DEADLINE_EXCEEDED past `timeout`, FAILED_PRECONDITION
// (with the status line) for an answer other than 200.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path,
                                    absl::Duration timeout = absl::Seconds(10));

// `s` percent-encoded for a URL query value.
std::string UrlEncode(absl::string_view s);

// One sample line of the text format: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;

  // "name{k1=v1,k2=v2}", labels sorted: the series' identity.
  std::string Series() const;
};

// Every sample line of `text` (comments skipped). INVALID_ARGUMENT naming
// the line for one it cannot read.
absl::StatusOr<std::vector<Sample>> ParseExposition(absl::string_view text);

// The sum of the samples of metric `name` at http://127.0.0.1:PORT/metrics,
// only those `keep` accepts when it is given; the error of fetching or
// parsing the page otherwise.
absl::StatusOr<double> ScrapeSum(
    int port, absl::string_view name,
    const std::function<bool(const Sample&)>& keep = nullptr);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_HTTP_GET_H_
