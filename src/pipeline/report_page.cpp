#include "pipeline/report_page.h"

#include <string_view>

#include "core/error.h"

// report_page.html, embedded by tools/cmake/embed_file.cmake.
extern const unsigned char kReportPageHtml[];
extern const std::size_t kReportPageHtml_size;

namespace ditbatch {

namespace {
// Where the page's data block holds the report: <script type="application/json" id="report-data">.
const std::string kDataMarker = "/*DITBATCH_REPORT_DATA*/";
}  // namespace

std::string json_for_html_script(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.find_first_of("<>&") == std::string::npos) return text;  // (no second copy)
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  // These bytes occur only inside JSON strings, where the \u escape means the same character;
  // the HTML parser then sees no "</script", "<!--" or character reference in the block.
  // (The bytes between them copied a run at a time: a million-image report is ~300 MB.)
  size_t from = 0;
  for (size_t at; (at = text.find_first_of("<>&", from)) != std::string::npos; from = at + 1) {
    out.append(text, from, at - from);
    out += text[at] == '<' ? "\\u003c" : text[at] == '>' ? "\\u003e" : "\\u0026";
  }
  out.append(text, from, std::string::npos);
  return out;
}

std::string render_report_page(nlohmann::json report) {
  const std::string_view page(reinterpret_cast<const char*>(kReportPageHtml), kReportPageHtml_size);
  const size_t at = page.find(kDataMarker);
  DITBATCH_CHECK(at != std::string::npos && page.find(kDataMarker, at + 1) == std::string::npos,
                 "report_page.html must hold the data marker exactly once");
  const std::string data = json_for_html_script(report);
  report = nullptr;
  std::string html;
  html.reserve(page.size() + data.size());
  html.append(page.substr(0, at)).append(data).append(page.substr(at + kDataMarker.size()));
  return html;
}

}  // namespace ditbatch
