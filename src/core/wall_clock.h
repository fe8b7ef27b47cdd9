// UTC wall-clock times as the manifest and the run records write them:
// "2026-12-01T13:44:52.123Z" (milliseconds; whole seconds are read as well).
#pragma once

#include <optional>
#include <string>

namespace ditbatch {

double unix_now();                                        // seconds since 1970, UTC
std::string utc_iso(double unix_seconds, bool millis = true);
std::string utc_iso_now(bool millis = true);
// The seconds since 1970 of a time written by utc_iso; nullopt for any other text.
std::optional<double> parse_utc_iso(const std::string& text);

}  // namespace ditbatch
