// `ditbatch convert`: a Hugging Face diffusers folder (safetensors) -> one ditbatch .h5.
#pragma once

#include <string>
#include <vector>

#include "core/log.h"

namespace ditbatch {

struct ConvertOptions {
  std::string from;        // the diffusers folder (model_index.json, transformer/, ...)
  std::string to;          // the .h5 to write
  std::string dtype = "keep";  // keep | bf16 | fp32 (| fp16)
  std::string model_name;  // default: model_index.json's _name_or_path, else the folder name
};

struct ConvertStats {
  int64_t tensors = 0, skipped = 0;
  double bytes_read = 0, bytes_written = 0, seconds = 0;
  // seconds, split: the folder checked (headers, configs, names, shapes, the tokenizer); the
  // tensors streamed into the file; the file closed, fsync'ed and renamed into place.
  double validate_seconds = 0, stream_seconds = 0, finish_seconds = 0;
};

// Validates the whole folder (configs, every safetensors header, every tensor the models read
// by name and shape) before writing anything, then streams tensor by tensor into a temporary
// file renamed to `to` at the end.
ConvertStats convert_diffusers(const ConvertOptions& options, const Log& log);

class SafetensorsSet;

// Every tensor a model reads from one component of a diffusers folder ("transformer",
// "text_encoder" or "vae") of a pipeline class, by name, shape and dtype, against what its
// config.json makes that family's model bind: a missing or misshapen tensor (another model, a
// truncated download, a wrong variant, a component of another family) fails here, in seconds,
// not after the conversion or when `generate` loads the file.
void check_component_tensors(const std::string& component, const std::string& config_path,
                             const std::string& config_json, const SafetensorsSet& tensors,
                             const std::string& folder, const std::string& pipeline_class = "QwenImagePipeline");

// A weight file to write (checked before any work): a regular file or nothing (not a folder,
// a device, a FIFO, or a link to one), in a folder that exists, and none of `inputs` (the same
// file by any name: a symbolic or hard link).
void check_output_file(const std::string& path, const std::vector<std::string>& inputs = {});

// True for the pipeline classes whose model reads the VAE's encoder (encoder.*, quant_conv.*):
// convert checks those tensors and make-tiny writes them. False for unknown classes.
bool keeps_vae_encoder(const std::string& pipeline_class);
// True for the pipeline classes whose model reads input images (the Edit pipelines): their text
// encoder's vision tower (visual.*) and the image processor's settings (a processor component)
// are kept. False for unknown classes.
bool reads_images(const std::string& pipeline_class);

// True for text-encoder tensors a text-only pipeline never reads (vision tower, LM head).
bool is_unused_text_encoder_tensor(const std::string& name);

}  // namespace ditbatch
