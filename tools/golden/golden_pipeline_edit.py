"""Stage pipeline_edit: tiny Qwen-Image-Edit pipelines (QwenImageEditPlusPipeline as Edit-2511
with zero_cond_t and as Edit-2509 without, QwenImageEditPipeline as Edit) run end to end by
diffusers on the golden input images, with CFG.

The tiny pipelines are the tiny Qwen-Image pipeline's components (its text encoder already holds
a tiny Qwen2.5-VL vision tower) plus a processor (Qwen2VLProcessor over the tiny tokenizer, the
PIL image processor with Qwen2.5-VL's published bounds) and, for 2511, zero_cond_t. Only what
differs from tests/data/golden/tiny-pipeline/ is written, as an overlay folder per pipeline
(tiny-pipeline-edit-2511/ ...: model_index.json, processor/, transformer/config.json): a test
copies tiny-pipeline/ and lays the overlay over it to get the diffusers folder `convert` reads.

pipeline_edit.h5, one group per case: the inputs (image file names, prompt, negative prompt,
cfg, steps, seed, size given or not), the noise, the packed condition latents, the prompt
embeddings and masks, the latents after each step, and the final image (float and uint8).
"""
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image

EDIT_STEPS = 2
PROCESSOR_CONFIG = dict(min_pixels=3136, max_pixels=12845056, patch_size=14, temporal_patch_size=2, merge_size=2,
                        image_mean=[0.48145466, 0.4578275, 0.40821073],
                        image_std=[0.26862954, 0.26130258, 0.27577711])
# (name, pipeline folder, images, prompt, negative prompt, cfg, (height, width), seed). Each case
# gives the output size (the pipelines' default, about a megapixel from the last image's aspect,
# would make megabytes of golden per case); the default each would take is recorded beside it.
CASES = [
    ("plus2511_one_jpeg", "tiny-pipeline-edit-2511", ["q90_420.jpg"], "make the sky red", " ", 4.0, (48, 64), 7100),
    ("plus2511_two_rgba_palette", "tiny-pipeline-edit-2511", ["rgba8.png", "palette8_trns.png"],
     "put the second picture into the first", " ", 4.0, (64, 96), 7101),
    ("plus2509_one_webp", "tiny-pipeline-edit-2509", ["lossy.webp"], "relight it", "blurry", 3.0, (80, 48), 7102),
    ("edit_one_grey", "tiny-pipeline-edit", ["grey.jpg"], "add a hat", " ", 4.0, (64, 32), 7103),
]
# The Lightning command line on Edit-2511: a ComfyUI/LightX2V-format LoRA of the lora stage's files
# (as the published Edit Lightning LoRAs are), the lightning scheduler, no CFG. Only its final
# latents and image are kept (the golden budget); the cases above check every stage.
LORA_CASE = ("plus2511_lora_lightning", "tiny-pipeline-edit-2511", ["q90_420.jpg"], "make the sky red",
             [("comfy_bf16", 1.0)], 4, (48, 64), 7104)
PIPELINES = {
    "tiny-pipeline-edit-2511": ("QwenImageEditPlusPipeline", True),
    "tiny-pipeline-edit-2509": ("QwenImageEditPlusPipeline", False),
    "tiny-pipeline-edit": ("QwenImageEditPipeline", False),
}


def make_processor(tokenizer):
    """Qwen2VLProcessor over the tiny tokenizer; its video processor (torchvision, not installed,
    as in the spec's environment) is never reached by images: its type check is waived alone."""
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.processing_utils import ProcessorMixin
    check = ProcessorMixin.check_argument_for_proper_class

    def waive_video(self, name, arg):
        return None if name == "video_processor" and arg is None else check(self, name, arg)

    ProcessorMixin.check_argument_for_proper_class = waive_video
    try:
        return Qwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(**PROCESSOR_CONFIG), tokenizer=tokenizer,
                                video_processor=None)
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


def build_pipeline(base, folder, out):
    import diffusers
    from diffusers import QwenImageTransformer2DModel
    class_name, zero_cond_t = PIPELINES[folder]
    transformer = QwenImageTransformer2DModel.from_pretrained(str(Path(out) / "tiny-pipeline" / "transformer"),
                                                              zero_cond_t=zero_cond_t)
    transformer.eval()
    pipe = getattr(diffusers, class_name)(scheduler=base.scheduler, vae=base.vae, text_encoder=base.text_encoder,
                                          tokenizer=base.tokenizer, processor=make_processor(base.tokenizer),
                                          transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


OVERLAY = ["model_index.json", "transformer/config.json"]  # and processor/, which tiny-pipeline has not


def write_overlay(pipe, folder, out):
    """What makes tiny-pipeline/ this edit pipeline's folder: its model_index.json, its
    transformer config (zero_cond_t), and its processor/ (the image processor's
    preprocessor_config.json and the tokenizer it wraps)."""
    dst = Path(out) / folder
    if dst.exists():
        shutil.rmtree(dst)
    full = Path(out) / (folder + ".full")
    if full.exists():
        shutil.rmtree(full)
    # The processor is saved by its parts: its own save_pretrained needs the video processor.
    processor = pipe.processor
    pipe.register_modules(processor=None)
    try:
        pipe.save_pretrained(str(full), safe_serialization=True)
    finally:
        pipe.register_modules(processor=processor)
    index = json.loads((full / "model_index.json").read_text())
    index["processor"] = ["transformers", type(processor).__name__]
    (full / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    processor.image_processor.save_pretrained(str(dst / "processor"))
    processor.tokenizer.save_pretrained(str(dst / "processor"))
    for rel in OVERLAY:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(full / rel, dst / rel)
    base = Path(out) / "tiny-pipeline"
    for st in full.rglob("*.safetensors"):  # the weights are tiny-pipeline's, byte for byte
        if st.read_bytes() != (base / st.relative_to(full)).read_bytes():
            raise SystemExit(f"pipeline_edit: {st.relative_to(full)} differs from tiny-pipeline's")
    shutil.rmtree(full)


def run_case(pipe, images, prompt, negative, cfg, size, seed):
    rec = {"steps": [], "encode": [], "prepare": []}
    orig_encode, orig_prepare = pipe.encode_prompt, pipe.prepare_latents

    def encode(*a, **k):
        r = orig_encode(*a, **k)
        rec["encode"].append((r[0].clone(), None if r[1] is None else r[1].clone()))
        return r

    def prepare(*a, **k):
        r = orig_prepare(*a, **k)
        rec["prepare"].append((r[0].clone(), r[1].clone()))
        return r

    def on_step(p, i, t, kw):
        rec["steps"].append(kw["latents"].clone())
        return kw

    pipe.encode_prompt, pipe.prepare_latents = encode, prepare
    try:
        kwargs = dict(image=images if len(images) > 1 else images[0], prompt=prompt, negative_prompt=negative,
                      true_cfg_scale=cfg, num_inference_steps=EDIT_STEPS, callback_on_step_end=on_step)
        kwargs["height"], kwargs["width"] = size
        image_float = pipe(generator=torch.Generator().manual_seed(seed), output_type="np", **kwargs).images[0]
        first = dict(rec)
        rec["steps"], rec["encode"], rec["prepare"] = [], [], []
        image_pil = pipe(generator=torch.Generator().manual_seed(seed), output_type="pil", **kwargs).images[0]
    finally:
        pipe.encode_prompt, pipe.prepare_latents = orig_encode, orig_prepare
    for a, b in zip(first["steps"], rec["steps"]):
        if not torch.equal(a, b):
            raise SystemExit("pipeline_edit: two identical runs differ (non-deterministic)")
    return first, image_float, np.asarray(image_pil.convert("RGB"), dtype=np.uint8)


def run_lora_case(pipe, images_dir, lightning_config, put, put_text, log, g):
    """The LoRA case into group g: diffusers' load_lora_weights + set_adapters and the lightning
    scheduler, no negative prompt; refused if the LoRA hardly changes the image."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.utils import load_image
    name, folder, files, prompt, adapters, steps, (height, width), seed = LORA_CASE
    lora_dir = Path(images_dir).parent / "lora"
    model_scheduler = pipe.scheduler
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(lightning_config)
    try:
        for stem, _ in adapters:
            pipe.load_lora_weights(str(lora_dir / f"{stem}.safetensors"), adapter_name=stem)
        pipe.set_adapters([s for s, _ in adapters], [w for _, w in adapters])
        images = [load_image(str(Path(images_dir) / n)) for n in files]
        kwargs = dict(image=images[0], prompt=prompt, negative_prompt=None, true_cfg_scale=1.0,
                      num_inference_steps=steps, height=height, width=width, output_type="latent")

        def run():
            latents = pipe(generator=torch.Generator().manual_seed(seed), **kwargs).images
            args = dict(kwargs, output_type="pil")
            image = pipe(generator=torch.Generator().manual_seed(seed), **args).images[0]
            return latents, np.asarray(image.convert("RGB"), dtype=np.uint8)

        latents, image = run()
        pipe.disable_lora()
        plain_latents, plain_image = run()
        pipe.enable_lora()
    finally:
        pipe.unload_lora_weights()
        pipe.scheduler = model_scheduler
    effect = ((latents - plain_latents).norm() / plain_latents.norm()).item()
    changed = float(np.mean(image != plain_image))
    if not (effect > 0.01 and changed > 0.1):
        raise SystemExit(f"pipeline_edit: {name}: the LoRA moves the latents by {effect:.3g} and changes {changed:.1%} "
                         "of the image: a golden that cannot tell a LoRA from none")
    c = g.create_group(name)
    c.attrs["pipeline"] = folder
    c.attrs["images"] = json.dumps(files)
    c.attrs["lora_files"] = json.dumps([f"{s}.safetensors" for s, _ in adapters])
    c.attrs["lora_strengths"] = np.asarray([w for _, w in adapters], dtype=np.float64)
    c.attrs["scheduler"] = "lightning"
    c.attrs["steps"] = np.int64(steps)
    c.attrs["seed"] = np.int64(seed)
    c.attrs["height"] = np.int64(height)
    c.attrs["width"] = np.int64(width)
    put_text(c, "prompt_utf8", prompt)
    put(c, "final_latents", latents, np.float32)
    put(c, "image_uint8", image, np.uint8)
    log(f"pipeline_edit: {name}: the LoRA moves the latents by {effect:.3f} (relative), changes {changed:.0%} of the "
        "pixels")


def stage_pipeline_edit(out, load_tiny, h5_create, put, put_text, log, lightning_config):
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import calculate_dimensions
    from diffusers.utils import load_image
    base = load_tiny(Path(out))
    images_dir = Path(out) / "input_images"
    pipes = {}
    for folder in PIPELINES:
        pipes[folder] = build_pipeline(base, folder, out)
        write_overlay(pipes[folder], folder, out)
    with h5_create(Path(out) / "pipeline_edit.h5", "tiny Qwen-Image-Edit pipelines end to end (float32, CPU)") as f:
        f.attrs["num_inference_steps"] = np.int64(EDIT_STEPS)
        g = f.create_group("cases")
        for name, folder, files, prompt, negative, cfg, size, seed in CASES:
            pipe = pipes[folder]
            images = [load_image(str(images_dir / n)) for n in files]
            r, image_float, image_uint8 = run_case(pipe, images, prompt, negative, cfg, size, seed)
            c = g.create_group(name)
            c.attrs["pipeline"] = folder
            c.attrs["pipeline_class"] = PIPELINES[folder][0]
            c.attrs["zero_cond_t"] = np.int64(PIPELINES[folder][1])
            c.attrs["images"] = json.dumps(files)
            c.attrs["negative_prompt"] = negative
            c.attrs["true_cfg_scale"] = np.float64(cfg)
            c.attrs["steps"] = np.int64(EDIT_STEPS)
            c.attrs["seed"] = np.int64(seed)
            last = images[-1]
            default_w, default_h = calculate_dimensions(1024 * 1024, last.width / last.height)
            c.attrs["default_height"] = np.int64(default_h // 16 * 16)  # what no size given would make
            c.attrs["default_width"] = np.int64(default_w // 16 * 16)
            c.attrs["height"] = np.int64(image_uint8.shape[0])
            c.attrs["width"] = np.int64(image_uint8.shape[1])
            put_text(c, "prompt_utf8", prompt)
            noise, condition = r["prepare"][0]
            put(c, "noise", noise, np.float32)
            put(c, "condition_latents", condition, np.float32)
            for k, label in enumerate(("prompt", "negative_prompt")):
                embeds, mask = r["encode"][k]
                put(c, f"{label}_embeds", embeds, np.float32)
                if mask is not None:
                    put(c, f"{label}_embeds_mask", mask.to(torch.int64), np.int64)
            for i, lat in enumerate(r["steps"]):
                put(c, f"latents_step_{i}", lat, np.float32)
            put(c, "image_float", image_float, np.float32)
            put(c, "image_uint8", image_uint8, np.uint8)
            log(f"pipeline_edit: {name}: {image_uint8.shape[1]}x{image_uint8.shape[0]}, "
                f"{noise.shape[1]} + {condition.shape[1]} image tokens, text {r['encode'][0][0].shape[1]}")
        run_lora_case(pipes[LORA_CASE[1]], images_dir, lightning_config, put, put_text, log, f.create_group("lora"))
