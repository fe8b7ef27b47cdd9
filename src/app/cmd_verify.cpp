#include <sys/stat.h>

#include <iostream>
#include <map>
#include <set>

#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/manifest.h"
#include "pipeline/output_check.h"

namespace ditbatch {

namespace {

// "; 3 of 5 input image(s) unchanged (1 changed, 1 missing)", or nothing for a text-to-image folder.
std::string inputs_summary(int64_t inputs, int64_t bad, int64_t changed) {
  if (inputs == 0) return "";
  return fmt::format("; {} of {} input image(s) unchanged{}", inputs - bad, inputs,
                     bad == 0 ? "" : fmt::format(" ({} changed, {} missing)", changed, bad - changed));
}

}  // namespace

int cmd_verify(const std::vector<std::string>& args) {
  std::string out_dir;
  const char* about =
      "Hashes every file the manifest of DIR lists as made (each PNG, and its latents file where one\n"
      "is listed) and compares it with the sha256 listed beside it: the full proof that a rerun, which\n"
      "trusts a file whose size, mtime, inode and device match, does not look for. Names each file\n"
      "that is missing or whose bytes differ, and exits 1 if there is one. An edit's input images are\n"
      "hashed too: each one missing or changed since its image was made is named and counted, without\n"
      "changing the exit status (they are no output of the run; a rerun makes an image whose input\n"
      "changed again).";
  if (!parse_output_folder("verify", about, args, out_dir)) return 0;
  // What is to be verified must be a manifest: a folder, FIFO, device or link at its name is no
  // proof of anything (it once gave "0 of 0 match", exit 0). No manifest at all: parse_output_folder.
  const std::string manifest = out_dir + "/manifest.jsonl";
  struct stat st {};
  const bool has_manifest = ::lstat(manifest.c_str(), &st) == 0;
  if (has_manifest && !S_ISREG(st.st_mode))
    fail_input("{}: is {}, not the manifest file generate writes", manifest,
               S_ISLNK(st.st_mode) ? "a symbolic link" : describe_file_type(st.st_mode));
  ManifestDamage damage;
  std::map<int64_t, nlohmann::json> listed;
  for_each_manifest_line(out_dir, [&](int64_t index, const nlohmann::json& line) { listed[index] = line; }, {}, &damage);
  if (damage.lines > 0) std::cerr << damage.describe(out_dir) << "\n";
  if (listed.empty() && damage.lines > 0) {
    std::cout << fmt::format("{}: the manifest holds no manifest line ({} line(s), none readable)\n", out_dir,
                             damage.lines);
    return 1;
  }
  int64_t checked = 0;
  const std::vector<OutputMismatch> bad = verify_listed_outputs(out_dir, listed, checked);
  std::set<int64_t> bad_images;
  for (const OutputMismatch& m : bad) {
    std::cout << fmt::format("{}/{}: image {}: {}\n", out_dir, m.file, m.index, m.why);
    bad_images.insert(m.index);
  }
  int64_t inputs = 0;
  const std::vector<InputMismatch> bad_inputs = verify_listed_inputs(out_dir, listed, inputs);
  int64_t changed = 0;
  for (const InputMismatch& m : bad_inputs) {
    std::cout << fmt::format("{}: image {}: input image {}{}: {}\n", out_dir, m.index, m.path,
                             m.file.empty() || m.file == m.path ? "" : " (" + m.file + ")", m.why);
    changed += m.changed ? 1 : 0;
  }
  std::cout << fmt::format("{}: {} of {} image(s) listed as made match their sha256{}{}\n", out_dir,
                           checked - static_cast<int64_t>(bad_images.size()), checked,
                           bad.empty() ? "" : "; a rerun of generate with --verify-outputs makes the others again",
                           inputs_summary(inputs, static_cast<int64_t>(bad_inputs.size()), changed));
  return bad.empty() ? 0 : 1;
}

}  // namespace ditbatch
