// Resuming: what a folder's manifest says of each image a run asks for (complete, made with
// other settings, or to make), read before any weight is, and the check that refuses a folder
// whose images another prompt list or other settings made.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "io/manifest.h"
#include "pipeline/denoiser_setup.h"
#include "pipeline/job.h"
#include "pipeline/output_check.h"

namespace ditbatch {

// What, besides a job's own settings, an image must have been made with to count as this
// run's: the weights, the prompt token limit, and (--output-type latent) its latents file.
struct ResumeKey {
  std::string model_checksum;
  int64_t max_sequence_length = 0;
  bool with_latents = false;
  DenoiserSetup denoiser;  // the LoRAs and the scheduler
  int64_t images_per_tar = 0;  // --output-format webdataset (0: PNGs): its tars' size, and a record beside each staged PNG
};

// Whether a job's image is already made: its manifest line says "ok", names the same file,
// records the settings this job asks for (changed_settings is empty), and the file on disk (and
// its latents file when the key asks for one) is whole: its stat matches the one listed, or its
// sha256 does (always the sha256 with OutputTrust::Hash).
bool image_is_complete(const std::string& out_dir, const ImageJob& job, const ResumeKey& key,
                       const std::map<int64_t, nlohmann::json>& manifest, OutputTrust trust = OutputTrust::Stat);

// What a folder's manifest says of each image of a job list, read in one pass over its lines
// (one line held at a time: a million-line manifest is never all in memory): per job index,
// whether its last line lists it complete (settings unchanged, its files whole by their stat or
// sha256), made with other settings (its PNG still there), or neither.
struct PreviousImages {
  enum State : uint8_t { Absent = 0, Complete = 1, OtherSettings = 2, Incomplete = 3, Packed = 4 };  // Packed: complete, in its tar
  std::vector<uint8_t> state;                 // per job index
  std::map<int64_t, std::string> examples;    // "file (changes)" of OtherSettings images, the first ones
  ManifestDamage damage;                      // lines that are not manifest lines
  std::set<int64_t> outside_the_list;         // indices listed that no job has (another, longer prompt list)
  std::set<int64_t> restat;                   // complete by their sha256 after their stat changed (a copied folder)
  int64_t count(State s, int64_t begin, int64_t end) const;
  // Per job index: 0 to make, 1 complete (in a WebDataset folder: staged), 2 complete in its tar.
  std::vector<uint8_t> complete_flags() const {
    std::vector<uint8_t> flags(state.size());
    for (size_t i = 0; i < state.size(); ++i) flags[i] = state[i] == Complete ? 1 : state[i] == Packed ? 2 : 0;
    return flags;
  }
};
PreviousImages scan_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                    const ResumeKey& key);
// Only the lines of indices [begin, end); with changed_in_place, every image complete by its
// stat is hashed too, and those whose bytes changed are listed there and counted incomplete.
PreviousImages scan_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                    const ResumeKey& key, int64_t begin, int64_t end,
                                    std::vector<int64_t>* changed_in_place);

// --verify-outputs: of the images [begin, end), those a rerun would trust as complete by their
// stat whose bytes no longer match their sha256 (each is named in a warning): made again.
std::vector<int64_t> outputs_changed_in_place(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                              int64_t begin, int64_t end, const ResumeKey& key, const Log& log);

// What the image of a manifest line was made with that `job` would make differently, one item
// per setting: "steps 20, now 50". Empty when every setting that decides the pixels agrees
// (prompt, negative prompt, seed, size, steps, cfg, the model's checksum, and the token limit
// where a recorded prompt is longer than either limit).
std::vector<std::string> changed_settings(const ImageJob& job, const ResumeKey& key, const nlohmann::json& record);

// Before any weight is read: a folder whose complete images were made with other settings
// than `jobs` ask for, or are other files at the same index (another prompt list), would have
// them skipped as done (the folder would not hold what the run asked for) or replaced or
// dropped from the manifest. Throws InputError naming them; --overwrite skips this.
void check_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs, const ResumeKey& key);
void check_previous_images(const std::string& out_dir, const PreviousImages& previous);
// What a run is told of a folder's manifest besides: lines that are none, and images listed
// past the prompt list (kept as they are, not this run's). Warnings, never refusals.
void warn_of_previous_lines(const std::string& out_dir, const PreviousImages& previous, int64_t jobs, const Log& log);

// A copied or restored folder: its images are whole by their sha256, but their stat is not the
// one listed, so each rerun would hash them all again. Appends, for each index of `restat`, its
// last line with the stats its files have now (as a part of run `run_id`, rank 0's, folded in by
// the next merge); returns how many.
int64_t record_current_stats(const std::string& out_dir, const std::set<int64_t>& restat, const std::string& run_id);

// --overwrite with another prompt list: the files the folder's manifest lists (a PNG, its
// latents or staged record; not a tar, whose name is its index range's) for an index in
// [begin, end) this run makes under another name. Once the run's line for that index is in,
// nothing would list them.
std::vector<std::string> outputs_to_be_replaced(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                                int64_t begin, int64_t end);
// After the merge: removes each of `files` that no line of the manifest lists any more (a stopped
// run's untried images keep theirs), so an overwritten folder holds no file it does not list.
// Returns the ones removed.
std::vector<std::string> remove_replaced_outputs(const std::string& out_dir, const std::vector<std::string>& files);

}  // namespace ditbatch
