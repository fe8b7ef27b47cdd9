#include "core/wall_clock.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace ditbatch {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string utc_iso(double unix_seconds, bool millis) {
  const double whole = std::floor(unix_seconds);
  int ms = static_cast<int>(std::lround((unix_seconds - whole) * 1000.0));
  std::time_t t = static_cast<std::time_t>(whole);
  if (ms == 1000) ms = 0, ++t;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  if (millis) std::snprintf(buf + n, sizeof buf - n, ".%03dZ", ms);
  else std::snprintf(buf + n, sizeof buf - n, "Z");
  return buf;
}

std::string utc_iso_now(bool millis) { return utc_iso(unix_now(), millis); }

std::optional<double> parse_utc_iso(const std::string& text) {
  std::tm tm{};
  int ms = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  std::string rest = text.substr(static_cast<size_t>(consumed));
  if (rest.size() == 5 && rest[0] == '.' && rest[4] == 'Z') {
    int used = 0;
    if (std::sscanf(rest.c_str() + 1, "%3d%n", &ms, &used) != 1 || used != 3) return std::nullopt;
  } else if (rest != "Z") {
    return std::nullopt;
  }
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour < 0 || tm.tm_hour > 23 ||
      tm.tm_min < 0 || tm.tm_min > 59 || tm.tm_sec < 0 || tm.tm_sec > 60)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

}  // namespace ditbatch
