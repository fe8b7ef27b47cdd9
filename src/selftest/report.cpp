#include "selftest/report.h"

#include <fmt/format.h>

#include <map>

namespace ditbatch::selftest {

const char* status_name(Status s) {
  switch (s) {
    case Status::Pass: return "PASS";
    case Status::Fail: return "FAIL";
    case Status::Skip: return "SKIP";
  }
  return "?";
}

void Report::add_error(const std::string& group, const std::string& what) {
  add(CheckRow{group, "(could not run)", Status::Fail, "", what});
}

std::string Report::environment_value(const std::string& key) const {
  for (const auto& [k, v] : environment_)
    if (k == key) return v;
  return "";
}

double Report::measured(const std::string& metric) const {
  for (const auto& m : measurements_)
    if (m.metric == metric) return m.value;
  return 0;
}

bool Report::passed() const {
  for (const auto& c : checks_)
    if (c.status == Status::Fail) return false;
  return !checks_.empty();
}

std::string Report::verdict() const {
  if (checks_.empty()) return "FAIL: no check ran";
  std::string failing;
  int64_t skipped = 0;
  for (const auto& c : checks_) {
    if (c.status == Status::Fail) failing += (failing.empty() ? "" : ", ") + c.group + "/" + c.name;
    skipped += c.status == Status::Skip;
  }
  if (!failing.empty()) return "FAIL: " + failing;
  return fmt::format("PASS ({} checks{})", checks_.size(), skipped ? fmt::format(", {} skipped", skipped) : "");
}

std::string Report::table(bool verbose) const {
  std::string out;
  size_t width = 0;
  for (const auto& [k, v] : environment_) width = std::max(width, k.size());
  for (const auto& [k, v] : environment_) out += fmt::format("  {:<{}}  {}\n", k, width, v);
  // Groups in the order they first appear.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const CheckRow*>> rows;
  for (const auto& c : checks_) {
    if (!rows.count(c.group)) groups.push_back(c.group);
    rows[c.group].push_back(&c);
  }
  out += "\n";
  for (const auto& g : groups) {
    int64_t passed = 0, failed = 0, skipped = 0;
    double seconds = 0;
    for (const CheckRow* c : rows[g]) {
      passed += c->status == Status::Pass;
      failed += c->status == Status::Fail;
      skipped += c->status == Status::Skip;
      seconds += c->seconds;
    }
    out += fmt::format("  {:<30} {} ({} passed{}{}; {:.1f} s)\n", g, failed ? "FAIL" : passed ? "PASS" : "SKIP", passed,
                       failed ? fmt::format(", {} failed", failed) : "",
                       skipped ? fmt::format(", {} skipped", skipped) : "", seconds);
    for (const CheckRow* c : rows[g]) {
      if (c->status == Status::Pass && !verbose) continue;
      out += fmt::format("    {} {:<44} {}{}\n", status_name(c->status), c->name, c->result,
                         c->note.empty() ? "" : (c->result.empty() ? "" : "  ") + c->note);
    }
  }
  if (!measurements_.empty()) {
    out += "\n  measured\n";
    for (const auto& m : measurements_)
      out += fmt::format("    {:<52} {:>9.3g} {:<8} ({:.3g} ms; {})\n", m.name, m.value, m.unit, m.seconds * 1e3,
                         m.counted);
  }
  return out;
}

nlohmann::json Report::to_json() const {
  nlohmann::json j;
  j["verdict"] = verdict();
  j["passed"] = passed();
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [k, v] : environment_) env[k] = v;
  j["environment"] = env;
  j["checks"] = nlohmann::json::array();
  for (const auto& c : checks_)
    j["checks"].push_back({{"group", c.group}, {"name", c.name}, {"status", status_name(c.status)},
                           {"result", c.result}, {"note", c.note}, {"seconds", c.seconds}});
  j["measurements"] = nlohmann::json::array();
  for (const auto& m : measurements_)
    j["measurements"].push_back({{"name", m.name}, {"metric", m.metric}, {"value", m.value}, {"unit", m.unit},
                                 {"seconds", m.seconds}, {"counted", m.counted}});
  return j;
}

}  // namespace ditbatch::selftest
