#include "app/options.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <limits>

#include "core/error.h"

namespace ditbatch {

namespace {

// The word Boost refused, from its message "the argument ('X') for option '--o' is invalid".
std::string invalid_value_of(const po::invalid_option_value& e) {
  const std::string what = e.what();
  const size_t begin = what.find("('"), end = what.find("')");
  return begin != std::string::npos && end != std::string::npos && end > begin ? what.substr(begin + 2, end - begin - 2)
                                                                              : "?";
}

template <typename T>
bool is_typed(const po::value_semantic& semantic) {
  return dynamic_cast<const po::typed_value<T>*>(&semantic) != nullptr;
}

template <typename T>
std::string whole_number_range() {
  return fmt::format("expected a whole number from {} to {} (written in decimal)", std::numeric_limits<T>::min(),
                     std::numeric_limits<T>::max());
}

// What a value of this option must look like, from the type it is parsed into.
std::string value_kind(const po::value_semantic& semantic) {
  if (is_typed<int>(semantic)) return whole_number_range<int>();
  if (is_typed<int64_t>(semantic)) return whole_number_range<int64_t>();
  if (is_typed<uint64_t>(semantic)) return whole_number_range<uint64_t>();
  if (is_typed<double>(semantic) || is_typed<float>(semantic))
    return "expected a decimal number such as 4 or 2.5 (no hexadecimal, no inf or nan)";
  return "not a value this option takes";
}

}  // namespace

bool parse_options(const std::string& command, const std::string& synopsis, const std::string& about,
                   po::options_description& desc, const po::positional_options_description* positional,
                   const std::vector<std::string>& args, po::variables_map& vm) {
  desc.add_options()("help,h", "show this help");
  try {
    // A setting given twice takes its last value, as in most tools: the job scripts append
    // DITBATCH_EXTRA_ARGS="--steps 30" to DITBATCH_ARGS that already say --steps 50. Boost
    // refuses a second value of a single-valued option; drop the earlier ones and parse again
    // (repeatable options, such as --prompt, never get here).
    std::vector<std::string> words = args;
    for (;;) {
      try {
        po::command_line_parser parser(words);
        parser.options(desc);
        // Without a positional description Boost drops stray words silently: `--prompt a red
        // cat` would make an image of "a". An empty one makes every stray word an error.
        const po::positional_options_description none;
        parser.positional(positional ? *positional : none);
        vm.clear();
        po::store(parser.run(), vm);
        break;
      } catch (const po::multiple_occurrences& e) {
        const std::string name = e.get_option_name();  // "--steps"
        std::vector<size_t> at;  // where it occurs, and the word count of each occurrence
        for (size_t i = 0; i < words.size(); ++i)
          if (words[i] == name || words[i].rfind(name + "=", 0) == 0) at.push_back(i);
        if (at.size() < 2) throw;
        const auto* option = desc.find_nothrow(name.substr(2), false);
        const bool takes_value = option && option->semantic()->max_tokens() > 0;
        std::vector<std::string> kept;
        for (size_t i = 0; i < words.size(); ++i) {
          const bool earlier = std::find(at.begin(), at.end() - 1, i) != at.end() - 1;
          if (!earlier) {
            kept.push_back(words[i]);
          } else if (words[i] == name && takes_value) {
            ++i;  // and its value
          }
        }
        words = std::move(kept);
      }
    }
    if (vm.count("help")) {
      std::cout << "usage: ditbatch " << command << " " << synopsis << "\n\n" << about << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::too_many_positional_options_error&) {
    // Boost does not say which word: find the first one no option took (an option's value
    // follows it as the next word, or after '=').
    std::string stray;
    unsigned words = 0;
    const unsigned allowed = positional ? positional->max_total_count() : 0;
    for (size_t i = 0; i < args.size() && stray.empty(); ++i) {
      const std::string& a = args[i];
      if (a.size() > 1 && a[0] == '-') {
        const std::string name = a.substr(a.rfind("--", 0) == 0 ? 2 : 1);
        const auto* option = name.find('=') == std::string::npos ? desc.find_nothrow(name, false) : nullptr;
        if (option && option->semantic()->max_tokens() > 0) ++i;  // its value
      } else if (++words > allowed) {
        stray = a;
      }
    }
    fail_input("unexpected argument '{}': each option takes one word, so quote a value with spaces (see ditbatch {} "
               "--help)",
               stray, command);
  } catch (const po::required_option& e) {
    // A positional argument is required under its option's name: say what to write instead.
    const std::string name = e.get_option_name();
    if (positional && positional->max_total_count() > 0 && name == "--" + positional->name_for_position(0))
      fail_input("missing the {} argument (usage: ditbatch {} {})", name.substr(2), command, synopsis);
    fail_input("{} (see ditbatch {} --help)", e.what(), command);
  } catch (const po::invalid_option_value& e) {
    // Boost says only "is invalid": say what the option takes (its own range, past the type's,
    // is checked with the other settings and said there).
    const std::string name = e.get_option_name();
    const auto* option = desc.find_nothrow(name.rfind("--", 0) == 0 ? name.substr(2) : name, false);
    fail_input("{} '{}': {} (see ditbatch {} --help)", name, invalid_value_of(e),
               option ? value_kind(*option->semantic()) : "not a value this option takes", command);
  } catch (const po::error& e) {
    fail_input("{} (see ditbatch {} --help)", e.what(), command);
  }
  return true;
}

uint64_t parse_seed(const std::string& text, const std::string& option) {
  uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (error != std::errc() || end != text.data() + text.size())
    fail_input("{} {}: expected an integer from 0 to 18446744073709551615", option, text);
  return seed;
}

bool parse_output_folder(const std::string& command, const std::string& about, const std::vector<std::string>& args,
                         std::string& out_dir) {
  po::options_description desc("options");
  desc.add_options()("out", po::value(&out_dir)->required(), "the output folder of a generate run");
  po::positional_options_description positional;
  positional.add("out", 1);
  po::variables_map vm;
  if (!parse_options(command, "DIR", about, desc, &positional, args, vm)) return false;
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) fail_input("{}: no such folder", out_dir);
  if (!std::filesystem::exists(std::filesystem::path(out_dir) / "manifest.jsonl", ec) &&
      !std::filesystem::is_directory(std::filesystem::path(out_dir) / ".manifest", ec))
    fail_input("{}: no manifest.jsonl here (is it the --out folder of a generate run?)", out_dir);
  return true;
}

}  // namespace ditbatch
