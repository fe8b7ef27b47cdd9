// What `ditbatch selftest` found on one process: the environment, every check with its value
// and bound, the machine's figures, and one verdict: PASS, or FAIL naming every failing check.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/timer.h"
#include "selftest/machine.h"

namespace ditbatch::selftest {

enum class Status { Pass, Fail, Skip };

struct CheckRow {
  std::string group;   // "ops bf16", "attention paths", "pipeline", ...
  std::string name;    // the case
  Status status = Status::Pass;
  std::string result;  // "nmse 3.1e-07 (bound 2e-05)"
  std::string note;    // why it failed or was skipped; what ran ("ran gemm; auto picks cudnn")
  double seconds = 0;  // since the previous row (or measurement): what this check took
};

class Report {
 public:
  void environment(const std::string& key, const std::string& value) {
    environment_.emplace_back(key, value);
    clock_.restart();
  }
  void add(CheckRow row) {
    row.seconds = clock_.seconds();
    clock_.restart();
    checks_.push_back(std::move(row));
  }
  void add(Measurement m) {
    clock_.restart();
    measurements_.push_back(std::move(m));
  }
  // A check that could not run at all (the backend failed to start, a stage threw): a failure.
  void add_error(const std::string& group, const std::string& what);

  const std::vector<CheckRow>& checks() const { return checks_; }
  const std::vector<Measurement>& measurements() const { return measurements_; }
  const std::vector<std::pair<std::string, std::string>>& environment() const { return environment_; }
  std::string environment_value(const std::string& key) const;
  // The first measurement of this metric ("gemm", "copy"); 0 when none.
  double measured(const std::string& metric) const;

  bool passed() const;
  // "PASS" (with the number of checks, and of those skipped), or "FAIL: " and every failing
  // check as "group/name".
  std::string verdict() const;
  // The environment, a table of the checks (each group's passing rows summed up in one line
  // unless `verbose`, every failure and skip on its own line), the measurements.
  std::string table(bool verbose) const;
  nlohmann::json to_json() const;

 private:
  std::vector<std::pair<std::string, std::string>> environment_;
  std::vector<CheckRow> checks_;
  std::vector<Measurement> measurements_;
  Stopwatch clock_;
};

const char* status_name(Status s);

}  // namespace ditbatch::selftest
