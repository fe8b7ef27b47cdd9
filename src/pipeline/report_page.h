// The HTML of the run report: the page (report_page.html, embedded at build time) with the
// report's data inlined where its script reads it, escaped so that no text in it (a prompt of
// "</script><script>...") can end the data block.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace ditbatch {

// Takes the data by value and frees it once written out as text: a million images' rows are
// ~1 GB as JSON, and the page then holds them a second time.
std::string render_report_page(nlohmann::json report);
// The data as it stands in the page: JSON with '<', '>' and '&' written as \u escapes, any
// invalid UTF-8 replaced by U+FFFD.
std::string json_for_html_script(const nlohmann::json& value);

}  // namespace ditbatch
