#!/usr/bin/env python3
"""Golden references for ditbatch, computed by the real diffusers / transformers code.

Writes tests/data/golden/*.h5 and the tiny random pipeline tests/data/golden/tiny-pipeline/.
Everything runs in float32 on the CPU with one thread and fixed seeds, so two runs with the
same library versions on the same kind of CPU give byte-identical datasets.

    tools/golden/setup.sh && tools/golden/.venv/bin/python tools/golden/make_goldens.py
    ... make_goldens.py --only tokenizer,scheduler     # just these stages
    ... make_goldens.py --verify                       # regenerate into a temp dir, compare

See tools/golden/README.md for the schema of every file.
"""

import os

# One thread everywhere, set before torch / numpy load their thread pools: reductions and
# GEMM blocking then do not depend on the machine's core count.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_ATTN_BACKEND", "native")

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import h5py
import numpy as np
import torch

torch.set_num_threads(1)
torch.set_grad_enabled(False)

import diffusers  # noqa: E402
import peft  # noqa: E402  (diffusers' LoRA loading backend)
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from diffusers import (  # noqa: E402
    AutoencoderKLQwenImage,
    AutoencoderKLQwenImage21,
    FlowMatchEulerDiscreteScheduler,
    QwenImage21Pipeline,
    QwenImage21Transformer2DModel,
    QwenImagePipeline,
    QwenImageTransformer2DModel,
)
from diffusers.models.autoencoders.autoencoder_kl_qwenimage import QwenImageUpBlock  # noqa: E402
from diffusers.pipelines.qwenimage.pipeline_qwenimage import (  # noqa: E402
    calculate_shift,
    retrieve_timesteps,
)
from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache  # noqa: E402
from diffusers.pipelines.qwenimage21 import pipeline_qwenimage21  # noqa: E402
from transformers import (  # noqa: E402
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2Tokenizer,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402
from transformers.processing_utils import ProcessorMixin  # noqa: E402
import golden_input_images  # noqa: E402  (the input_images stage, beside this file)
import golden_pipeline_edit  # noqa: E402  (the pipeline_edit stage, beside this file)

diffusers.utils.logging.set_verbosity_error()
diffusers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

REPO = Path(__file__).resolve().parents[2]
REAL_TOKENIZER_DIR = REPO.parent / "shared" / "data" / "qwen2.5-vl-tokenizer"
RANDN_REF_C = REPO.parent / "shared" / "spec" / "torch_cpu_randn_ref.c"

PINNED = {
    "torch": "2.15.0",
    "diffusers": "0.42.1",
    "transformers": "5.24.0",
    "numpy": "2.4.6",
    "tokenizers": "0.23.3",
    "h5py": "3.16.0",
    "peft": "0.21.2",
}

# The Qwen-Image prompt template and drop index, as diffusers 0.42.1 hard-codes them
# (QwenImagePipeline.prompt_template_encode / prompt_template_encode_start_idx).
TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)
DROP_IDX = 34
TOKENIZER_MAX_LENGTH = 1024

# Published Qwen/Qwen-Image scheduler/scheduler_config.json (spec qwen-image.md section 1).
SCHEDULER_CONFIG = dict(
    num_train_timesteps=1000,
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    base_image_seq_len=256,
    max_image_seq_len=8192,
    shift_terminal=0.02,
    time_shift_type="exponential",
    invert_sigmas=False,
    use_karras_sigmas=False,
    use_exponential_sigmas=False,
    use_beta_sigmas=False,
    stochastic_sampling=False,
)

LATENTS_MEAN = [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921]
LATENTS_STD = [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
               3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160]

# Tiny components.
TINY_NUM_MERGES = 4000
TINY_TRANSFORMER_CONFIG = dict(
    patch_size=2, in_channels=64, out_channels=16, num_layers=2, attention_head_dim=32,
    num_attention_heads=2, joint_attention_dim=64, guidance_embeds=False, axes_dims_rope=(8, 12, 12),
)
TINY_VAE_BASE_DIM = 8  # 16 would make the VAE alone ~16 MB (encoder + decoder) in fp32
TINY_TEXT_HIDDEN = 64
TINY_TEXT_LAYERS = 2
TINY_TEXT_21_HIDDEN = 32  # Qwen-Image-2.1's: the embedding table is most of its file, 4278 x 32 f32

# Seeds of the parameter re-initialisation (one torch.Generator per component).
SEED_TRANSFORMER_PARAMS = 1001
SEED_VAE_PARAMS = 1002
SEED_TEXT_ENCODER_PARAMS = 1003

STAGES = ["tokenizer", "scheduler", "noise", "tiny", "text_encoder", "transformer", "vae", "pipeline", "lora",
          "text_encoder_21", "scheduler_21", "transformer_21", "vae_21", "pipeline_21", "tiny_21",
          "input_images", "image_processor", "text_encoder_edit", "vae_encoder", "vision", "transformer_edit",
          "pipeline_edit"]


def log(msg):
    print(f"[make_goldens {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    print("\n" + "!" * 100 + f"\nGOLDEN CHECK FAILED: {msg}\n" + "!" * 100 + "\n", file=sys.stderr, flush=True)
    raise SystemExit(1)


# ------------------------------------------------------------------------------------------
# HDF5 helpers

def version_attrs():
    return {
        "torch_version": str(torch.__version__),
        "diffusers_version": str(diffusers.__version__),
        "transformers_version": str(transformers.__version__),
        "numpy_version": str(np.__version__),
        "tokenizers_version": str(tokenizers.__version__),
        "h5py_version": str(h5py.__version__),
        "hdf5_version": str(h5py.version.hdf5_version),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "torch_num_threads": np.int64(torch.get_num_threads()),
        "python_version": sys.version.split()[0],
    }


def h5_create(path, description):
    # libver bounds keep the files readable by HDF5 1.10 (Debian 12 ships libhdf5 1.10.8)
    f = h5py.File(path, "w", libver=("v108", "v110"), track_order=False)
    for k, v in version_attrs().items():
        f.attrs[k] = v
    f.attrs["description"] = description
    f.attrs["generator"] = "tools/golden/make_goldens.py"
    return f


def put(group, name, array, dtype):
    """Writes a contiguous, uncompressed dataset of exactly `dtype` (no silent casts)."""
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().contiguous().numpy()
    array = np.asarray(array)
    if array.dtype != np.dtype(dtype):
        if np.dtype(dtype) == np.float32 and array.dtype != np.float32:
            raise TypeError(f"{name}: refusing to cast {array.dtype} to float32 silently")
        array = array.astype(dtype)
    return group.create_dataset(name, data=np.ascontiguousarray(array), dtype=dtype)


def put_text(group, name, text):
    return put(group, name, np.frombuffer(text.encode("utf-8"), dtype=np.uint8), np.uint8)


# ------------------------------------------------------------------------------------------
# Stage: tokenizer (REAL vocabulary)

ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]

# text-encoder.md section 4.8 / 5.1 test vectors (real vocabulary).
SPEC_TOKEN_VECTORS = [
    ("Hello world", [9707, 1879]),
    (" Hello world", [21927, 1879]),
    ("hello\r\n\r\nworld", [14990, 871, 14615]),
    ("   leading spaces", [256, 6388, 12621]),
    ("tab\tsep", [6192, 197, 28036]),
    ("x\u00A0y", [87, 4102, 88]),
    ("I'LL DO IT", [40, 6, 4086, 9319, 8700]),
    ("emoji \U0001F600\U0001F44D\U0001F3FD", [37523, 90316, 144349, 145375]),
    ("e\u0301 \uFF21\uFF11 x<|im_end|>y <|endoftext|>", [963, 62823, 94, 20109, 856, 151645, 88, 220, 151643]),
]
SPEC_TEMPLATE_PREFIX = [151644, 8948, 198, 74785, 279, 2168, 553, 44193, 279, 1894, 11, 6083, 11, 1379, 11,
                        10434, 11, 12194, 11, 1467, 11, 27979, 11871, 315, 279, 6171, 323, 4004, 25, 151645,
                        198, 151644, 872, 198]
SPEC_TEMPLATE_SUFFIX = [151645, 198, 151644, 77091, 198]
SPEC_TEMPLATE_DROPPED = [
    ("A cat holding a sign that says hello world",
     [32, 8251, 9963, 264, 1841, 429, 2727, 23811, 1879, 151645, 198, 151644, 77091, 198], 48),
    ("", [151645, 198, 151644, 77091, 198], 39),
    ("\nA cat", [32, 8251, 151645, 198, 151644, 77091, 198], None),
]
SPEC_TEMPLATE_SHA256 = "0194d360a674d2f127a8b5f2ad08f0692a2baab34d2b378d183aeb84087e91cc"


def tokenizer_cases():
    """(description, text) pairs; order is the case order in tokenizer.h5."""
    c = []

    def add(desc, text):
        c.append((desc, text))

    for s, _ in SPEC_TOKEN_VECTORS:
        add("spec 4.8 vector", s)
    for s, _, _ in SPEC_TEMPLATE_DROPPED:
        add("spec 5.1 prompt", s)
    # ASCII basics
    add("empty", "")
    add("single letter", "a")
    add("single space", " ")
    add("single newline", "\n")
    add("single digit", "7")
    add("lowercase sentence", "a photo of an astronaut riding a horse on the moon")
    add("sentence with punctuation", "A cat, a dog; and a bird: all friends. The end!")
    add("capitalised words", "The Quick Brown Fox Jumps Over The Lazy Dog")
    add("all caps", "HELLO WORLD THIS IS LOUD")
    add("mixed case word", "iPhone McDonald's eBay YouTube")
    add("trailing space", "trailing space ")
    add("trailing spaces", "trailing spaces   ")
    add("leading space", " leading")
    add("two spaces between", "two  spaces")
    add("many spaces between", "many          spaces")
    add("only spaces", "     ")
    add("space run 16", " " * 16)
    add("space run 33", " " * 33)
    # whitespace, CR/LF, tabs
    add("LF inside", "line one\nline two")
    add("CRLF inside", "line one\r\nline two")
    add("CR inside", "line one\rline two")
    add("LF LF", "para one\n\npara two")
    add("space LF", "word \nnext")
    add("LF space", "word\n next")
    add("spaces LF spaces", "word   \n   next")
    add("trailing LF", "ends with newline\n")
    add("trailing LFs", "ends with newlines\n\n\n")
    add("trailing CRLF", "ends with crlf\r\n")
    add("only LFs", "\n\n\n\n")
    add("only CRLFs", "\r\n\r\n\r\n")
    add("mixed CR LF run", "a\r\r\n\n\rb")
    add("tab inside", "col1\tcol2\tcol3")
    add("tabs run", "a\t\t\tb")
    add("tab space mix", "a \t \t b")
    add("only tabs", "\t\t")
    add("vertical tab form feed", "a\x0bb\x0cc")
    add("leading LF", "\nA cat")
    add("leading LF LF", "\n\nA cat")
    add("leading space LF", " \nA cat")
    add("leading CRLF", "\r\nA")
    add("leading CR", "\rA cat")
    add("leading tab", "\tA")
    add("leading spaces", "  A cat")
    add("leading tab LF", "\t\nA cat")
    add("leading NBSP LF", "\u00a0\nA cat")
    add("leading LF space", "\n A cat")
    # Unicode spaces and invisible characters
    add("NBSP", "x\u00a0y")
    add("NBSP run", "x\u00a0\u00a0\u00a0y")
    add("space NBSP", "x \u00a0y")
    add("NBSP space", "x\u00a0 y")
    for cp in range(0x2000, 0x200B):
        add(f"U+{cp:04X} between letters", f"a{chr(cp)}b")
    add("U+2000..U+200A run", "a" + "".join(chr(cp) for cp in range(0x2000, 0x200B)) + "b")
    add("ideographic space U+3000", "日本\u3000語")
    add("line separator U+2028", "a\u2028b")
    add("paragraph separator U+2029", "a\u2029b")
    add("NEL U+0085", "a\u0085b")
    add("BOM U+FEFF leading", "\ufeffhello")
    add("BOM U+FEFF inside", "hel\ufefflo")
    add("zero width space U+200B", "zero\u200bwidth")
    add("narrow NBSP U+202F", "10\u202f000")
    add("medium math space U+205F", "a\u205fb")
    add("ogham space U+1680", "a\u1680b")
    add("file/group/record/unit separators U+001C..U+001F", "a\x1cb\x1dc\x1ed\x1fe")
    add("control chars", "a\x00b\x01c\x07d\x1be\x7ff")
    add("soft hyphen U+00AD", "soft\u00adhyphen")
    add("zero width joiner alone", "a\u200db")
    # numbers
    add("year", "2024")
    add("long number", "1234567890123")
    add("decimal", "3.14159")
    add("negative number", "-42")
    add("thousands", "1,000,000")
    add("version", "v1.2.3-rc4")
    add("number words", "4k 8K 1080p 16:9 24fps")
    add("superscript digits", "x\u00b2 + y\u00b3 = z\u2074")
    add("fractions", "\u00bd \u00bc \u2153")
    add("roman numeral chars", "\u2160 \u2161 \u2162 \u216b")
    add("arabic-indic digits", "\u0661\u0662\u0663")
    add("devanagari digits", "\u0967\u0968\u0969")
    add("fullwidth digits", "\uff11\uff12\uff13")
    # contractions
    add("contractions lower", "it's don't they're we've I'm you'll he'd")
    add("contractions upper", "IT'S DON'T THEY'RE WE'VE I'M YOU'LL HE'D")
    add("contractions mixed case", "it'S don'T they'Re we'Ve I'm you'Ll he'D 'LL 'Ll 'lL")
    add("contraction alone", "'s")
    add("contraction after space", "cat 's toy")
    add("double contraction", "y'all'd've")
    add("typographic apostrophe", "it\u2019s don\u2019t")
    add("quote runs", "''' \"\"\" ``")
    add("possessive plural", "the cats' toys")
    # punctuation
    add("punctuation run", "!!!???...,,,;;;:::")
    add("ellipsis", "wait... what?!")
    add("brackets", "(a) [b] {c} <d>")
    add("email", "someone@example.com")
    add("url", "https://example.com/path?q=1&r=two#frag")
    add("code", "def f(x):\n    return x**2  # square\n")
    add("markdown", "# Title\n\n* item 1\n* item 2\n\n**bold** _it_")
    add("json", '{"a": [1, 2, 3], "b": null}')
    add("math symbols", "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2211 \u222b \u221e")
    add("currency", "$5 \u20ac10 \u00a315 \u00a520 \u20b9100")
    add("dashes", "a - b \u2013 c \u2014 d")
    add("punctuation then LF", "end.\nnext")
    add("punctuation then CRLF", "end!\r\nnext")
    add("space punctuation", "a !b ?c")
    # emoji
    add("emoji simple", "\U0001F600")
    add("emoji skin tones", "\U0001F44D\U0001F3FB\U0001F44D\U0001F3FC\U0001F44D\U0001F3FD\U0001F44D\U0001F3FE\U0001F44D\U0001F3FF")
    add("emoji ZWJ family", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466")
    add("emoji ZWJ professions", "\U0001F469\U0001F3FD\u200d\U0001F680 \U0001F9D1\u200d\U0001F4BB")
    add("emoji flags", "\U0001F1EF\U0001F1F5 \U0001F1FA\U0001F1F8 \U0001F3F3\ufe0f\u200d\U0001F308")
    add("emoji keycap and VS16", "1\ufe0f\u20e3 \u2764\ufe0f \u263a")
    add("emoji in sentence", "I love \U0001F355 and \U0001F363!")
    add("emoji run", "\U0001F525" * 7)
    # scripts
    add("CJK chinese", "一只猫坐在窗台上，看着外面的雨。")
    add("CJK japanese", "東京の夜景、ネオンが輝く街並み")
    add("japanese kana", "ひらがなとカタカナ")
    add("korean", "서울의 밤거리, 네온사인이 빛나는 골목")
    add("korean jamo decomposed", "\u1112\u1161\u11ab\u1100\u1173\u11af")
    add("arabic", "قطة تجلس على حافة النافذة")
    add("hebrew", "חתול יושב על אדן החלון")
    add("hindi", "खिड़की पर बैठी एक बिल्ली")
    add("thai", "แมวนั่งอยู่บนขอบหน้าต่าง")
    add("greek", "Μια γάτα κάθεται στο παράθυρο")
    add("cyrillic", "Кошка сидит на подоконнике")
    add("vietnamese", "Con mèo ngồi trên bậu cửa sổ")
    add("mixed scripts", "A cat 猫 قطة बिल्ली 고양이 кошка")
    add("CJK with ASCII", "Text 'Hello 世界' on a sign")
    # normalisation
    add("decomposed e acute", "caf" + "e\u0301")
    add("decomposed many", "A\u030a n\u0303 o\u0308 u\u0308 c\u0327")
    add("precomposed many", "\u00c5 \u00f1 \u00f6 \u00fc \u00e7")
    add("combining on digit", "1\u0301")
    add("combining sequence order", "a\u0323\u0302")
    add("angstrom sign (NFC singleton)", "\u212b")
    add("ohm sign (NFC singleton)", "\u2126")
    add("compatibility ligature (not NFKC)", "\ufb01ne \ufb02ow")
    add("fullwidth latin", "\uff28\uff45\uff4c\uff4c\uff4f \uff37\uff4f\uff52\uff4c\uff44")
    add("fullwidth punctuation", "\uff01\uff1f\uff08\uff09\uff0c")
    add("hangul syllable vs jamo", "\ud55c \u1112\u1161\u11ab")
    # added tokens inside text
    for t in ADDED_TOKENS:
        add(f"added token {t} inside text", f"a{t}b")
    add("added tokens adjacent", "<|im_start|><|im_end|><|endoftext|>")
    add("added tokens with spaces", " <|im_start|> user <|im_end|> ")
    add("added token after newline", "x\n<|im_end|>\ny")
    add("tool call block", "<tool_call>{\"name\": \"f\"}</tool_call>")
    add("malformed added token", "<|im_start| <im_start|> <|IM_START|> <|im_start |>")
    add("think tag is plain text here", "<think>hmm</think>")
    add("partial special prefix", "<|")
    # prompt-like
    add("typical prompt", "A cat holding a sign that says hello world")
    add("typical prompt 2", "A coffee shop entrance features a chalkboard sign reading \"Qwen Coffee \U0001F60A $2 per cup,\" with a neon light beside it displaying \"\u901a\u4e49\u5343\u95ee\".")
    add("prompt with quality tags", "Ultra HD, 4K, cinematic composition.")
    add("negative prompt space", " ")
    # long strings (template truncation at 1058 tokens kicks in)
    words = ("the quick brown fox jumps over the lazy dog while a painter in a red coat sketches "
             "mountains rivers and clouds under a golden evening sky").split()
    long_text = " ".join(words[i % len(words)] for i in range(3200))
    add("long ascii 3200 words", long_text)
    long_mixed = ("A market street in Kyoto 京都の市場, lanterns 🏮, and a sign saying \"open 24/7\".\n") * 120
    add("long mixed with newlines", long_mixed)
    add("long no spaces", "ab" * 2500)
    add("long space run", " " * 3000)
    add("long newline run", "\n" * 1500)
    add("long digits", "0123456789" * 400)
    add("long CJK", "猫が窓辺に座っている。" * 300)
    return c


def stage_tokenizer(out):
    log("tokenizer: loading the REAL Qwen2.5-VL vocabulary through transformers.Qwen2Tokenizer")
    tok = Qwen2Tokenizer.from_pretrained(str(REAL_TOKENIZER_DIR))
    if len(tok) != 151665:
        fail(f"real tokenizer has {len(tok)} tokens, expected 151643 + 22")

    # Spec test vectors must reproduce, otherwise the spec (or the library) is wrong.
    import hashlib
    if hashlib.sha256(TEMPLATE.encode("utf-8")).hexdigest() != SPEC_TEMPLATE_SHA256:
        fail("prompt template SHA-256 differs from text-encoder.md section 5.1")
    if TEMPLATE not in QwenImagePipeline.__init__.__code__.co_consts:
        fail("diffusers' QwenImagePipeline template differs from the one in make_goldens.py")
    bad = []
    for s, expected in SPEC_TOKEN_VECTORS:
        got = tok(s)["input_ids"]
        if got != expected:
            bad.append(f"{s!r}: expected {expected}, got {got}")
    prefix = tok(TEMPLATE.split("{}")[0])["input_ids"]
    if prefix != SPEC_TEMPLATE_PREFIX:
        bad.append(f"template prefix: got {prefix}")
    suffix = tok(TEMPLATE.split("{}")[1])["input_ids"]
    if suffix != SPEC_TEMPLATE_SUFFIX:
        bad.append(f"template suffix: got {suffix}")
    for s, expected, total in SPEC_TEMPLATE_DROPPED:
        ids = tok(TEMPLATE.format(s))["input_ids"]
        if ids[DROP_IDX:] != expected or (total is not None and len(ids) != total):
            bad.append(f"template({s!r})[34:]: expected {expected} (len {total}), got {ids[DROP_IDX:]} (len {len(ids)})")
    if bad:
        fail("transformers does NOT reproduce the text-encoder.md test vectors:\n  " + "\n  ".join(bad))
    log(f"tokenizer: all {len(SPEC_TOKEN_VECTORS)} section-4.8 vectors and the section-5.1 template vectors reproduce")

    cases = tokenizer_cases()
    with h5_create(out / "tokenizer.h5", "Qwen2Tokenizer ids on the REAL Qwen2.5-VL vocabulary") as f:
        f.attrs["tokenizer_dir"] = "shared/data/qwen2.5-vl-tokenizer (151643 base tokens + 22 added)"
        f.attrs["template"] = TEMPLATE
        f.attrs["drop_idx"] = np.int64(DROP_IDX)
        f.attrs["template_max_length"] = np.int64(TOKENIZER_MAX_LENGTH + DROP_IDX)
        f.attrs["num_cases"] = np.int64(len(cases))
        g = f.create_group("cases")
        n_trunc = 0
        for i, (desc, text) in enumerate(cases):
            ids = tok(text)["input_ids"]
            # Exactly as QwenImagePipeline._get_qwen_prompt_embeds tokenizes (batch of one).
            t = tok([TEMPLATE.format(text)], max_length=TOKENIZER_MAX_LENGTH + DROP_IDX, padding=True,
                    truncation=True, return_tensors="pt")
            template_ids = t.input_ids[0].numpy().astype(np.int64)
            assert bool(t.attention_mask.all())
            n_trunc += len(template_ids) == TOKENIZER_MAX_LENGTH + DROP_IDX
            c = g.create_group(f"{i:04d}")
            c.attrs["description"] = desc
            c.attrs["nfc_changes_text"] = np.int64(unicodedata.normalize("NFC", text) != text)
            put_text(c, "text", text)
            put(c, "ids", np.asarray(ids, dtype=np.int64), np.int64)
            put(c, "template_ids", template_ids, np.int64)
            put(c, "template_ids_dropped", template_ids[DROP_IDX:], np.int64)
    log(f"tokenizer: wrote {len(cases)} cases ({n_trunc} truncated to {TOKENIZER_MAX_LENGTH + DROP_IDX})")


# ------------------------------------------------------------------------------------------
# Stage: scheduler

SCHED_STEPS = [1, 2, 4, 8, 20, 28, 50]
SCHED_SEQ_LENS = [16, 64, 1024, 4096, 6889, 8192, 10000]


def qwen_schedule(scheduler, num_steps, image_seq_len):
    """Exactly the sigma/timestep computation of QwenImagePipeline.__call__ (step 5)."""
    sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
    mu = calculate_shift(
        image_seq_len,
        scheduler.config.get("base_image_seq_len", 256),
        scheduler.config.get("max_image_seq_len", 4096),
        scheduler.config.get("base_shift", 0.5),
        scheduler.config.get("max_shift", 1.15),
    )
    timesteps, _ = retrieve_timesteps(scheduler, num_steps, "cpu", sigmas=sigmas, mu=mu)
    return mu, scheduler.sigmas.clone(), timesteps.clone()


def stage_scheduler(out):
    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    with h5_create(out / "scheduler.h5", "FlowMatchEulerDiscreteScheduler sigmas/timesteps as QwenImagePipeline sets them") as f:
        f.attrs["scheduler_config"] = json.dumps(SCHEDULER_CONFIG, sort_keys=True)
        f.attrs["steps"] = np.asarray(SCHED_STEPS, dtype=np.int64)
        f.attrs["seq_lens"] = np.asarray(SCHED_SEQ_LENS, dtype=np.int64)
        n_nan = 0
        for n in SCHED_STEPS:
            for s in SCHED_SEQ_LENS:
                with np.errstate(invalid="ignore", divide="ignore"):  # N = 1 divides 0 by 0 (kept as NaN)
                    mu, sigmas, timesteps = qwen_schedule(sched, n, s)
                assert sigmas.dtype == torch.float32 and timesteps.dtype == torch.float32
                assert sigmas.shape == (n + 1,) and timesteps.shape == (n,)
                n_nan += int(torch.isnan(sigmas).any())
                g = f.create_group(f"steps_{n}/seq_{s}")
                g.attrs["mu"] = np.float64(mu)
                put(g, "sigmas", sigmas, np.float32)
                put(g, "timesteps", timesteps, np.float32)
        # Cross-check one value against the spec (qwen-image.md section 3.5).
        s50 = f["steps_50/seq_4096/sigmas"][()]
        if s50.view(np.uint32)[1] != 0x3F7D5D0A or s50.view(np.uint32)[49] != 0x3CA3D700:
            fail("scheduler: N=50, S=4096 sigmas differ from qwen-image.md section 3.5")
        if f["steps_50/seq_4096"].attrs["mu"] != 0.6935483870967742:
            fail("scheduler: mu(4096) differs from the spec")
    log(f"scheduler: wrote {len(SCHED_STEPS) * len(SCHED_SEQ_LENS)} schedules ({n_nan} contain NaN: the N=1 rows)")


# ------------------------------------------------------------------------------------------
# Stage: Qwen-Image-2.1's schedules (spec qwen-image-2.1.md sections 3.4 and 8): its pipeline's
# own step 4, for the base checkpoint (the linspace over N steps, mu from the target's tokens)
# and for the Turbo checkpoint (its sample_sigmas as given, its scheduler without a dynamic
# shift or a terminal stretch).

TURBO_SAMPLE_SIGMAS = [1.0, 0.978453, 0.95418, 0.926626, 0.89508, 0.845148, 0.704534, 0.414568]
TURBO_SCHEDULER_CONFIG = dict(SCHEDULER_CONFIG, use_dynamic_shifting=False, shift=1.0, shift_terminal=None)
SCHED21_SIZES = [(1024, 1024), (768, 1344), (512, 512), (2048, 2048)]  # (height, width), multiples of 32
SCHED21_STEPS = [40, 8, 1]


def qwen21_schedule(scheduler, sample_sigmas, num_steps, height, width):
    """QwenImage21Pipeline.__call__'s step 4 (P21:732-747), with its module's own helpers."""
    S = (height // 16) * (width // 16)  # latents.shape[1]: one token per 16x16 pixels
    sigmas = sample_sigmas if sample_sigmas is not None else np.linspace(1.0, 1 / num_steps, num_steps)
    mu = pipeline_qwenimage21.calculate_shift(
        S,
        scheduler.config.get("base_image_seq_len", 256),
        scheduler.config.get("max_image_seq_len", 4096),
        scheduler.config.get("base_shift", 0.5),
        scheduler.config.get("max_shift", 1.15),
    )
    timesteps, _ = pipeline_qwenimage21.retrieve_timesteps(scheduler, num_steps, "cpu", sigmas=sigmas, mu=mu)
    return S, mu, scheduler.sigmas.clone(), timesteps.clone()


def stage_scheduler_21(out):
    with h5_create(out / "scheduler_21.h5", "sigmas/timesteps as QwenImage21Pipeline sets them (base and Turbo)") as f:
        n = 0
        for name, config, grid, steps_list in (("base", SCHEDULER_CONFIG, None, SCHED21_STEPS),
                                               ("turbo", TURBO_SCHEDULER_CONFIG, TURBO_SAMPLE_SIGMAS, [8])):
            sched = FlowMatchEulerDiscreteScheduler(**config)
            gc = f.create_group(name)
            gc.attrs["scheduler_config"] = json.dumps(config, sort_keys=True)
            if grid is not None:
                gc.attrs["sample_sigmas"] = np.asarray(grid, dtype=np.float64)
            for steps in steps_list:
                for height, width in SCHED21_SIZES:
                    with np.errstate(invalid="ignore", divide="ignore"):  # N = 1 stretches 0 / 0 (NaN, kept)
                        S, mu, sigmas, timesteps = qwen21_schedule(sched, grid, steps, height, width)
                    g = gc.create_group(f"steps_{steps}/{height}x{width}")
                    g.attrs["image_seq_len"] = np.int64(S)
                    g.attrs["mu"] = np.float64(mu)
                    put(g, "sigmas", sigmas, np.float32)
                    put(g, "timesteps", timesteps, np.float32)
                    n += 1
        # The spec's values (section 3.4): 40 steps at 1024^2.
        g = f["base/steps_40/1024x1024"]
        if g.attrs["mu"] != 0.6935483870967742 or abs(float(g["sigmas"][1]) - 0.986963749) > 1e-9:
            fail("scheduler_21: 40 steps at 1024^2 differ from qwen-image-2.1.md section 3.4")
        turbo = f["turbo/steps_8/1024x1024/sigmas"][()]
        if not np.array_equal(turbo[:8], np.asarray(TURBO_SAMPLE_SIGMAS, dtype=np.float32)) or turbo[8] != 0:
            fail("scheduler_21: the Turbo grid is not used as given")
    log(f"scheduler_21: wrote {n} schedules")


# ------------------------------------------------------------------------------------------
# Stage: Qwen-Image-2.1's transformer (tiny QwenImage21Transformer2DModel), text-to-image as its
# pipeline drives it (spec qwen-image-2.1.md section 6): the joint sequence [text | target], the
# t = 0 modulation row for text, the block-causal prefill of step 0 that fills the K/V cache
# ("extract"), and a later step that reads it ("cached"). The weights are in the file.

TINY21_TRANSFORMER_CONFIG = dict(
    patch_size=1, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=16, num_attention_heads=2,
    context_in_dim=TINY_TEXT_21_HIDDEN, mlp_ratio=3, axes_dims_rope=(4, 6, 6), eps=1e-6, causal_condition=True,
)
SEED_TRANSFORMER_21_PARAMS = 1022
# (latent height, latent width, text tokens, model time of step 0, of the cached step). Latent
# sides are even (images are multiples of 32 pixels), so the S/4 image slots are whole.
TRANSFORMER_21_CASES = [(4, 6, 7, 0.9375, 0.5), (2, 8, 12, 0.25, 0.03125), (6, 4, 1, 1.0, 0.75)]


def config_json(config):
    """A diffusers model's config as JSON, without the bookkeeping keys (`_use_default_values`
    lists names in set order: not the same from run to run)."""
    return json.dumps({k: v for k, v in dict(config).items() if not k.startswith("_")}, sort_keys=True, default=list)


def tiny_transformer_21():
    model = QwenImage21Transformer2DModel(**TINY21_TRANSFORMER_CONFIG).eval()
    reinit_params(model, SEED_TRANSFORMER_21_PARAMS, overrides={"proj_out.weight": 0.2})
    return model


def stage_transformer_21(out):
    model = tiny_transformer_21()
    C, D = TINY21_TRANSFORMER_CONFIG["in_channels"], TINY21_TRANSFORMER_CONFIG["context_in_dim"]
    blocks = []  # each block's output of the current call, [rows, inner] (batch of one)
    for block in model.transformer_blocks:
        block.register_forward_hook(lambda module, args, output: blocks.append(output[0].clone()))
    with h5_create(out / "transformer_21.h5",
                   "tiny QwenImage21Transformer2DModel: prefill (K/V cache extract) and a cached step") as f:
        f.attrs["config_json"] = config_json(model.config)
        gw = f.create_group("weights")
        for name, tensor in model.state_dict().items():
            put(gw, name, tensor, np.float32)
        gc = f.create_group("cases")
        for i, (h, w, L, t0, t1) in enumerate(TRANSFORMER_21_CASES):
            S = h * w
            gen = torch.Generator().manual_seed(300 + i)
            embeds = torch.randn(1, L, D, generator=gen)
            latents0 = torch.randn(1, S, C, generator=gen)
            latents1 = torch.randn(1, S, C, generator=gen)
            img_mask = torch.cat([torch.zeros(1, L, dtype=torch.bool), torch.ones(1, S // 4, dtype=torch.bool)], dim=1)
            cache = QwenImage21KVCache(TINY21_TRANSFORMER_CONFIG["num_layers"])
            kw = dict(encoder_hidden_states=embeds, img_shapes=[[(1, h, w)]], img_mask=img_mask, kv_cache=cache,
                      return_dict=False)
            blocks.clear()
            out0 = model(hidden_states=latents0, timestep=torch.tensor([t0]), kv_cache_mode="extract", **kw)[0]
            blocks0 = torch.stack(blocks)  # [layers, L + S, inner]
            blocks.clear()
            out1 = model(hidden_states=latents1, timestep=torch.tensor([t1]), kv_cache_mode="cached", **kw)[0]
            blocks1 = torch.stack(blocks)  # [layers, S, inner]
            if blocks0.shape != (TINY21_TRANSFORMER_CONFIG["num_layers"], L + S, model.inner_dim):
                fail(f"transformer_21: block outputs {tuple(blocks0.shape)}")
            if out0.shape != (1, L + S, C) or out1.shape != (1, S, C):
                fail(f"transformer_21: output shapes {tuple(out0.shape)}, {tuple(out1.shape)}")
            # The cache is exact in real arithmetic: a full prefill at t1 gives the cached step's rows closely.
            full1 = model(hidden_states=latents1, timestep=torch.tensor([t1]), encoder_hidden_states=embeds,
                          img_shapes=[[(1, h, w)]], img_mask=img_mask, return_dict=False)[0]
            if not torch.allclose(full1[:, L:], out1, atol=1e-4):
                fail("transformer_21: the cached step differs from a full prefill")
            g = gc.create_group(f"{i:02d}")
            g.attrs["height"], g.attrs["width"], g.attrs["text_tokens"] = np.int64(h), np.int64(w), np.int64(L)
            g.attrs["timestep_extract"], g.attrs["timestep_cached"] = np.float32(t0), np.float32(t1)
            put(g, "encoder_hidden_states", embeds[0], np.float32)
            put(g, "latents_extract", latents0[0], np.float32)
            put(g, "latents_cached", latents1[0], np.float32)
            put(g, "blocks_extract", blocks0, np.float32)
            put(g, "output_extract", out0[0], np.float32)
            put(g, "blocks_cached", blocks1, np.float32)
            put(g, "output_cached", out1[0], np.float32)
    log(f"transformer_21: wrote {len(TRANSFORMER_21_CASES)} cases (prefill + cached step)")


# ------------------------------------------------------------------------------------------
# Stage: Qwen-Image-2.1's VAE decoder (tiny AutoencoderKLQwenImage21), as its pipeline decodes
# (spec qwen-image-2.1.md sections 3.6 and 7.2): the packed latents unpacked by the pipeline's
# own _unpack_latents, de-normalised z * std + mean, decoded (5 levels, the DupUp3D shortcuts,
# 4 channels) and clamped. The weights are in the file.

TINY21_VAE_CONFIG = dict(base_dim=4, decoder_base_dim=4, z_dim=16, dim_mult=[1, 2, 4, 8, 8], num_res_blocks=2,
                         attn_scales=[], temperal_downsample=[False, True, True, True], dropout=0.0, is_residual=True,
                         in_channels=4, out_channels=4)
SEED_VAE_21_PARAMS = 1023
VAE_21_CASES = [(2, 4), (4, 2)]  # latent (h, w), even as images are multiples of 32 pixels: 32x64, 64x32


def tiny_vae_21():
    z_dim = TINY21_VAE_CONFIG["z_dim"]
    g = torch.Generator().manual_seed(401)
    # Per-channel statistics like the real ones' (mean about 0 +- 2, std about 3.5), drawn, not zero or one.
    mean = [round(float(v), 4) for v in torch.randn(z_dim, generator=g) * 2]
    std = [round(float(v), 4) for v in 3.5 + torch.rand(z_dim, generator=g)]
    vae = AutoencoderKLQwenImage21(**TINY21_VAE_CONFIG, latents_mean=mean, latents_std=std).eval()
    # conv_out's gain keeps most pixels inside (-1, 1): the clamp is exercised, not everywhere.
    reinit_params(vae, SEED_VAE_21_PARAMS, overrides={"decoder.conv_out.weight": 1.0})
    return vae


def stage_vae_21(out):
    z_dim = TINY21_VAE_CONFIG["z_dim"]
    vae = tiny_vae_21()
    stages = {}
    vae.decoder.mid_block.register_forward_hook(lambda m, a, o: stages.__setitem__("mid", o[0, :, 0].clone()))
    for i, up in enumerate(vae.decoder.up_blocks):
        up.register_forward_hook(lambda m, a, o, i=i: stages.__setitem__(f"up_{i}", o[0, :, 0].clone()))
    with h5_create(out / "vae_21.h5", "tiny AutoencoderKLQwenImage21: de-normalisation and decode") as f:
        f.attrs["config_json"] = config_json(vae.config)
        gw = f.create_group("weights")
        for name, tensor in vae.state_dict().items():
            if name.startswith(("decoder.", "post_quant_conv.")):
                put(gw, name, tensor, np.float32)
        gc = f.create_group("cases")
        for i, (h, w) in enumerate(VAE_21_CASES):
            gen = torch.Generator().manual_seed(410 + i)
            packed = torch.randn(1, h * w, z_dim, generator=gen)  # the sampler's latents, [1, S, z_dim]
            latents = QwenImage21Pipeline._unpack_latents(packed, 16 * h, 16 * w, 16)
            m = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1)
            sd = torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1)
            z = latents * sd + m
            stages.clear()
            image = vae.decode(z, return_dict=False)[0][:, :, 0]  # [1, 4, 16h, 16w]
            clamped = float((image.abs() == 1).float().mean())
            if not 0.0 < clamped < 0.2:
                fail(f"vae_21: {clamped:.3f} of the pixels are clamped; adjust the conv_out gain")
            c = gc.create_group(f"{i:02d}")
            c.attrs["height"], c.attrs["width"] = np.int64(h), np.int64(w)
            put(c, "packed_latents", packed[0], np.float32)
            put(c, "z", z[0, :, 0], np.float32)
            put(c, "mid", stages["mid"], np.float32)
            for k in range(len(vae.decoder.up_blocks)):
                put(c, f"up_{k}", stages[f"up_{k}"], np.float32)
            put(c, "image", image[0], np.float32)
    log(f"vae_21: wrote {len(VAE_21_CASES)} decodes")


# ------------------------------------------------------------------------------------------
# Stage: the whole tiny QwenImage21Pipeline, text to image (spec qwen-image-2.1.md section 3): the
# components of text_encoder_21.h5, transformer_21.h5 and vae_21.h5 (the same builders and
# seeds), the 2.1 scheduler, called as a user calls it. Per case: the prompt embeddings, the
# initial noise, the final latents and the RGBA image diffusers saves.

PIPELINE_21_CASES = [
    # (prompt, negative prompt, height, width, steps, true_cfg_scale, seed, turbo)
    ("a red fox in the snow", None, 32, 64, 3, 1.0, 7, False),
    ("東京の夜景 🌃, neon signs say \"OPEN\"", " ", 64, 32, 2, 2.5, 2**40 + 3, False),
    ("A cat holding a sign that says hello world", None, 32, 32, 8, 1.0, 0, True),
]


def stage_pipeline_21(out):
    tokenizer = tiny_tokenizer()
    components = dict(text_encoder=tiny_text_encoder_21(len(tokenizer)), processor=tiny_qwen3vl_processor(tokenizer),
                      transformer=tiny_transformer_21(), vae=tiny_vae_21())
    with h5_create(out / "pipeline_21.h5", "tiny QwenImage21Pipeline: text to image, base and Turbo") as f:
        f.attrs["scheduler_config"] = json.dumps(SCHEDULER_CONFIG, sort_keys=True)
        f.attrs["turbo_scheduler_config"] = json.dumps(TURBO_SCHEDULER_CONFIG, sort_keys=True)
        f.attrs["turbo_sample_sigmas"] = np.asarray(TURBO_SAMPLE_SIGMAS, dtype=np.float64)
        gc = f.create_group("cases")
        for i, (prompt, negative, height, width, steps, cfg, seed, turbo) in enumerate(PIPELINE_21_CASES):
            scheduler = FlowMatchEulerDiscreteScheduler(**(TURBO_SCHEDULER_CONFIG if turbo else SCHEDULER_CONFIG))
            pipe = QwenImage21Pipeline(scheduler=scheduler, sample_sigmas=TURBO_SAMPLE_SIGMAS if turbo else None,
                                       **components)
            pipe.set_progress_bar_config(disable=True)
            noise = {}

            def prepare(*a, _orig=pipe.prepare_latents, **k):
                result = _orig(*a, **k)
                noise["latents"] = result[0].clone() if isinstance(result, tuple) else result.clone()
                return result

            pipe.prepare_latents = prepare
            kw = dict(prompt=prompt, negative_prompt=negative, height=height, width=width, num_inference_steps=steps,
                      true_cfg_scale=cfg)
            latents = pipe(**kw, generator=torch.Generator().manual_seed(seed), output_type="latent").images
            image = pipe(**kw, generator=torch.Generator().manual_seed(seed), output_type="pil").images[0]
            rgba = np.asarray(image)
            if image.mode != "RGBA" or rgba.shape != (height, width, 4):
                fail(f"pipeline_21: case {i} gave a {image.mode} image of shape {rgba.shape}")
            embeds = pipe.encode_prompt(prompt, device="cpu")[0]
            g = gc.create_group(f"{i:02d}")
            g.attrs["prompt"] = prompt
            g.attrs["negative_prompt"] = negative if negative is not None else ""
            g.attrs["height"], g.attrs["width"], g.attrs["steps"] = np.int64(height), np.int64(width), np.int64(steps)
            g.attrs["true_cfg_scale"] = np.float64(cfg)
            g.attrs["seed"] = np.uint64(seed)
            g.attrs["turbo"] = np.int64(turbo)
            put(g, "prompt_embeds", embeds[0], np.float32)
            if negative is not None:
                put(g, "negative_prompt_embeds", pipe.encode_prompt(negative, device="cpu")[0][0], np.float32)
            put(g, "initial_latents", noise["latents"][0], np.float32)
            put(g, "latents", latents[0], np.float32)
            put(g, "image_uint8", rgba, np.uint8)
    log(f"pipeline_21: wrote {len(PIPELINE_21_CASES)} images")


# ------------------------------------------------------------------------------------------
# Stage: the tiny QwenImage21Pipeline as a diffusers folder (tests/data/golden/tiny-pipeline-21):
# what `ditbatch convert` reads. The components of pipeline_21.h5, saved by save_pretrained,
# and processor/ laid out by hand: transformers cannot save a Qwen3VLProcessor without its video
# processor (torchvision), so processor/ holds what the text path reads, the tiny tokenizer's
# files in the real Qwen-Image tokenizer's layout and the chat template.

def stage_tiny_21(out):
    dst = out / "tiny-pipeline-21"
    tokenizer = tiny_tokenizer()
    processor = tiny_qwen3vl_processor(tokenizer)
    components = dict(text_encoder=tiny_text_encoder_21(len(tokenizer)), transformer=tiny_transformer_21(),
                      vae=tiny_vae_21(), scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG))

    def save_processor(directory, **kwargs):
        path = Path(directory)
        write_tiny_tokenizer(path)
        (path / "chat_template.jinja").write_text(TE21_CHAT_TEMPLATE, encoding="utf-8")

    processor.save_pretrained = save_processor
    pipe = QwenImage21Pipeline(processor=processor, **components)
    if dst.exists():
        shutil.rmtree(dst)
    pipe.save_pretrained(str(dst), safe_serialization=True)
    for p in dst.rglob("*.json"):  # where things were loaded from: not deterministic, not meaningful
        data = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "_name_or_path" in data:
            data.pop("_name_or_path")
            p.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for p in dst.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    index = json.loads((dst / "model_index.json").read_text(encoding="utf-8"))
    if index.get("_class_name") != "QwenImage21Pipeline" or index.get("processor", [None])[-1] != "Qwen3VLProcessor":
        fail(f"tiny_21: model_index.json is {index}")
    # The folder loads back as the pipeline of pipeline_21.h5: every tensor equal.
    for name in ("transformer", "vae", "text_encoder"):
        cls = type(components[name])
        loaded = cls.from_pretrained(str(dst / name), torch_dtype=torch.float32)
        a, b = components[name].state_dict(), loaded.state_dict()
        if set(a) != set(b) or any(not torch.equal(a[k], b[k]) for k in a):
            fail(f"tiny_21: {name} differs after save and reload")
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    log(f"tiny_21: saved the tiny 2.1 pipeline to {dst} ({size / 1e6:.2f} MB)")


# ------------------------------------------------------------------------------------------
# Stage: noise

NOISE_CASES = [
    (0, (1, 1, 16, 8, 8)),
    (42, (1, 1, 16, 8, 8)),
    (5, (1, 1, 16, 8, 8)),
    (2**32 + 5, (1, 1, 16, 8, 8)),           # same low 32 bits as seed 5: same stream
    (8_000_000_000_000_000_123, (1, 1, 16, 8, 8)),  # large 63-bit seed
    (1234, (1, 1, 16, 6, 10)),
    (2**63 - 25, (1, 1, 16, 6, 10)),
    (7, (2, 1, 16, 4, 4)),                   # batch 2 from one generator
    (42, (1, 1, 16, 128, 128)),              # 1024x1024 latents; spec section 6.6 vector
    (0, (3, 7)),                             # numel 21: not a multiple of 16 (tail redraw)
    (1, (1, 1, 3, 5, 7)),                    # numel 105
    (3, (17,)),                              # numel 17
]


def torch_randn(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)


def check_randn_c_reference(out_lines):
    """Compiles shared/spec/torch_cpu_randn_ref.c and compares it bit for bit with torch."""
    if not RANDN_REF_C.exists() or shutil.which("gcc") is None:
        out_lines.append("C reference not checked (gcc or the .c file missing)")
        return None
    with tempfile.TemporaryDirectory() as td:
        exe = Path(td) / "randn_ref"
        subprocess.run(["gcc", "-O2", "-ffp-contract=off", str(RANDN_REF_C), "-o", str(exe), "-lm"], check=True)
        total = 0
        mismatches = 0
        for seed, shape in NOISE_CASES:
            n = int(np.prod(shape))
            ref = np.frombuffer(subprocess.run([str(exe), str(seed), str(n)], check=True, capture_output=True).stdout,
                                dtype=np.uint32)
            got = torch_randn(shape, seed).numpy().reshape(-1).view(np.uint32)
            bad = int((ref != got).sum())
            total += n
            mismatches += bad
            out_lines.append(f"seed {seed} shape {shape}: {bad} of {n} differ")
        return mismatches, total


def stage_noise(out):
    lines = []
    res = check_randn_c_reference(lines)
    if res is None:
        log("noise: " + lines[0])
    else:
        mism, total = res
        verdict = "BIT-EXACT" if mism == 0 else "MISMATCH"
        log(f"noise: C reference (gcc -O2 -ffp-contract=off) vs torch {torch.__version__}: {verdict}, "
            f"{mism} of {total} values differ")
        if mism:
            for ln in lines:
                log("  " + ln)
    # Spec section 6.6 test vector.
    x = torch_randn((1, 1, 16, 128, 128), 42).reshape(-1)
    expect_head = [1.92691529, 1.48728406, 0.900717199, -2.10552096, 0.678418458, -1.23454487, -0.0430674776, -1.60466695]
    expect_tail = [-1.30105829, 0.608102143, -1.76224577, -2.32941723]
    if not (np.allclose(x[:8].numpy(), expect_head, rtol=0, atol=5e-8) and np.allclose(x[-4:].numpy(), expect_tail, rtol=0, atol=5e-8)):
        fail("noise: torch.randn(seed 42) differs from qwen-image.md section 6.6")
    with h5_create(out / "noise.h5", "torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=float32)") as f:
        if res is not None:
            f.attrs["c_reference_mismatches"] = np.int64(res[0])
            f.attrs["c_reference_values_checked"] = np.int64(res[1])
        g = f.create_group("cases")
        for i, (seed, shape) in enumerate(NOISE_CASES):
            c = g.create_group(f"{i:02d}")
            c.attrs["seed"] = np.int64(seed)
            put(c, "shape", np.asarray(shape, dtype=np.int64), np.int64)
            put(c, "noise", torch_randn(shape, seed), np.float32)
    log(f"noise: wrote {len(NOISE_CASES)} cases")


# ------------------------------------------------------------------------------------------
# Stage: tiny pipeline (tests/data/golden/tiny-pipeline)

def tiny_token_ids():
    base = 256 + TINY_NUM_MERGES
    return {t: base + i for i, t in enumerate(ADDED_TOKENS)}


def write_tiny_tokenizer(dst):
    """Byte-level BPE from the REAL files: 256 byte symbols + the first TINY_NUM_MERGES merges
    (id = 256 + rank), then the 22 added tokens renumbered right after. Written in the same
    layout as the real Qwen-Image tokenizer folder (vocab.json, merges.txt, added_tokens.json,
    tokenizer_config.json; no tokenizer.json)."""
    src = REAL_TOKENIZER_DIR
    real_vocab = json.loads((src / "vocab.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in real_vocab.items()}
    merge_lines = (src / "merges.txt").read_text(encoding="utf-8").split("\n")
    assert merge_lines[0].startswith("#version")
    merges = [ln for ln in merge_lines[1:] if ln][:TINY_NUM_MERGES]
    vocab = {by_id[i]: i for i in range(256)}
    for rank, line in enumerate(merges):
        a, b = line.split(" ")
        if a not in vocab or b not in vocab:
            fail(f"tiny tokenizer: merge {rank} '{line}' uses an operand that is not in the tiny vocabulary")
        if real_vocab[a + b] != 256 + rank or (a + b) in vocab:
            fail(f"tiny tokenizer: merge {rank} '{line}' breaks the id = 256 + rank rule")
        vocab[a + b] = 256 + rank
    added = tiny_token_ids()
    real_cfg = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    real_added = json.loads((src / "added_tokens.json").read_text(encoding="utf-8"))
    assert list(real_added) == ADDED_TOKENS
    cfg = dict(real_cfg)
    cfg["added_tokens_decoder"] = {
        str(added[v["content"]]): v for _, v in sorted(real_cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    }
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    (dst / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (dst / "added_tokens.json").write_text(json.dumps(added, ensure_ascii=False, indent=2), encoding="utf-8")
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
    return len(vocab) + len(added)


def reinit_params(module, seed, overrides=None):
    """Re-initialises EVERY parameter with seeded random values (never zero, never constant).

    - norm weights / gammas: 1 + 0.1 * randn
    - biases: 0.1 * randn
    - embeddings: randn
    - linear / conv weights: randn / sqrt(fan_in) (fan_in over the spatial taps that touch data)
    `overrides` maps a parameter name to a gain multiplying the default.
    """
    overrides = overrides or {}
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        r = torch.randn(p.shape, generator=g, dtype=torch.float32)
        leaf = name.split(".")[-1]
        is_norm = leaf == "gamma" or (leaf == "weight" and ("norm" in name or "ln_" in name))
        if is_norm:
            v = 1.0 + 0.1 * r
        elif leaf == "bias":
            v = 0.1 * r
        elif "embed_tokens" in name:
            v = r
        else:
            shape = list(p.shape)
            if len(shape) == 5 and "visual" not in name:
                # causal 3-D conv; for one frame only the last temporal tap sees data
                fan_in = shape[1] * shape[3] * shape[4]
            else:
                fan_in = int(np.prod(shape[1:]))
            v = r / math.sqrt(fan_in)
        v = v * overrides.get(name, 1.0)
        p.copy_(v)
        if p.numel() > 1 and float(p.std()) == 0.0:
            fail(f"parameter {name} is constant after re-initialisation")


def build_tiny_components():
    ids = tiny_token_ids()
    tmp_tok = Path(tempfile.mkdtemp(prefix="tinytok_"))
    vocab_size = write_tiny_tokenizer(tmp_tok)
    tokenizer = Qwen2Tokenizer.from_pretrained(str(tmp_tok))
    if len(tokenizer) != vocab_size:
        fail(f"tiny tokenizer loads with {len(tokenizer)} tokens, expected {vocab_size}")

    transformer = QwenImageTransformer2DModel(**TINY_TRANSFORMER_CONFIG)
    # proj_out gain keeps the predicted velocity O(1), like a trained model's
    reinit_params(transformer, SEED_TRANSFORMER_PARAMS, overrides={"proj_out.weight": 0.2, "proj_out.bias": 0.5})

    vae = AutoencoderKLQwenImage(
        base_dim=TINY_VAE_BASE_DIM, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
        temperal_downsample=[False, True, True], dropout=0.0, latents_mean=LATENTS_MEAN, latents_std=LATENTS_STD,
    )
    # conv_out gain keeps most decoded pixels inside (-1, 1) so the final clamp is not hit everywhere.
    reinit_params(vae, SEED_VAE_PARAMS, overrides={"decoder.conv_out.weight": 0.9})

    head_dim = TINY_TEXT_HIDDEN // 4
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=vocab_size,
            hidden_size=TINY_TEXT_HIDDEN,
            intermediate_size=128,
            num_hidden_layers=TINY_TEXT_LAYERS,
            num_attention_heads=4,
            num_key_value_heads=2,
            hidden_act="silu",
            max_position_embeddings=4096,
            rms_norm_eps=1e-6,
            use_sliding_window=False,
            max_window_layers=TINY_TEXT_LAYERS,
            attention_dropout=0.0,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            dtype="float32",
        ),
        vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2, window_size=112, out_hidden_size=TINY_TEXT_HIDDEN,
            fullatt_block_indexes=[0], tokens_per_second=2, dtype="float32",
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
        dtype="float32",
    )
    assert sum(config.text_config.rope_parameters["mrope_section"]) * 2 == head_dim
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval().to(torch.float32)
    reinit_params(text_encoder, SEED_TEXT_ENCODER_PARAMS)

    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    return tmp_tok, dict(scheduler=scheduler, vae=vae.eval(), text_encoder=text_encoder, tokenizer=tokenizer,
                         transformer=transformer.eval())


def stage_tiny(out):
    dst = out / "tiny-pipeline"
    tmp_tok, comps = build_tiny_components()
    pipe = QwenImagePipeline(**comps)
    if dst.exists():
        shutil.rmtree(dst)
    pipe.save_pretrained(str(dst), safe_serialization=True)
    # transformers 5 saves tokenizers as tokenizer.json only; the real Qwen/Qwen-Image folder has
    # vocab.json + merges.txt + added_tokens.json + tokenizer_config.json and no tokenizer.json,
    # so the tokenizer folder gets the real layout (written by write_tiny_tokenizer).
    shutil.rmtree(dst / "tokenizer")
    shutil.copytree(tmp_tok, dst / "tokenizer")
    shutil.rmtree(tmp_tok)
    # Drop files that only record where things were loaded from (not deterministic/meaningful).
    for p in dst.rglob("*.json"):
        data = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "_name_or_path" in data:
            data.pop("_name_or_path")
            p.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    for p in dst.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)  # save_pretrained writes safetensors as 0600

    # Reload from disk and check that it is the same pipeline.
    pipe2 = QwenImagePipeline.from_pretrained(str(dst), dtype=torch.float32)
    for name in ("transformer", "vae", "text_encoder"):
        a = getattr(pipe, name).state_dict()
        b = getattr(pipe2, name).state_dict()
        missing = set(a) ^ set(b)
        if missing:
            fail(f"tiny {name}: state_dict keys differ after reload: {sorted(missing)[:5]}")
        for k in a:
            if not torch.equal(a[k], b[k]):
                fail(f"tiny {name}: {k} differs after save/reload")
            if b[k].dtype != torch.float32:
                fail(f"tiny {name}: {k} reloads as {b[k].dtype}")
    probe = [TEMPLATE.format(s) for s in ("A cat holding a sign", "", "\nA cat", "x<|im_end|>y é 猫 😀")]
    if comps["tokenizer"](probe)["input_ids"] != pipe2.tokenizer(probe)["input_ids"]:
        fail("tiny tokenizer tokenizes differently after reload")
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    log(f"tiny: saved the tiny pipeline to {dst} ({size / 1e6:.2f} MB); vocab {len(pipe2.tokenizer)}")


def load_tiny(out):
    dst = out / "tiny-pipeline"
    if not (dst / "model_index.json").exists():
        log("tiny pipeline missing: building it first")
        stage_tiny(out)
    pipe = QwenImagePipeline.from_pretrained(str(dst), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    if (pipe.prompt_template_encode, pipe.prompt_template_encode_start_idx, pipe.tokenizer_max_length) != (
            TEMPLATE, DROP_IDX, TOKENIZER_MAX_LENGTH):
        fail("QwenImagePipeline's template / drop index / max length differ from make_goldens.py")
    for m in (pipe.transformer, pipe.vae, pipe.text_encoder):
        m.eval()
    return pipe


# ------------------------------------------------------------------------------------------
# Stage: text encoder (tiny)

TE_PROMPTS = [
    "A cat holding a sign that says hello world",
    "A cat",
    "\nA red fox jumping over a lazy dog",
    "",
    " ",
    ("A sprawling fantasy city at dusk, with towering spires of white marble and gold, "
     "airships drifting between floating islands, waterfalls pouring into the clouds below, "
     "markets full of colourful awnings and lanterns, crowds of travellers in flowing robes, "
     "dragons perched on distant mountain peaks, a crescent moon rising over the sea, "
     "reflections shimmering on canals, intricate carvings on every bridge, banners waving "
     "in the warm evening wind, and a lone musician playing a violin on a balcony. "
     "Highly detailed, cinematic lighting, 8k, masterpiece."),
    "東京の夜景 🌃, neon signs say \"OPEN\"",
]
TE_BATCH = [
    "A cat holding a sign that says hello world",
    "A cat",
    "",
    "\nA red fox jumping over a lazy dog, watercolor",
]


def stage_text_encoder(out):
    pipe = load_tiny(out)
    te, tok = pipe.text_encoder, pipe.tokenizer
    n_layers = te.config.text_config.num_hidden_layers
    hidden = te.config.text_config.hidden_size
    with h5_create(out / "text_encoder.h5", "tiny Qwen2.5-VL text encoder: hidden states and prompt_embeds") as f:
        f.attrs["drop_idx"] = np.int64(DROP_IDX)
        f.attrs["num_hidden_layers"] = np.int64(n_layers)
        f.attrs["hidden_size"] = np.int64(hidden)
        f.attrs["template"] = TEMPLATE
        gp = f.create_group("prompts")
        for i, prompt in enumerate(TE_PROMPTS):
            t = tok([TEMPLATE.format(prompt)], max_length=TOKENIZER_MAX_LENGTH + DROP_IDX, padding=True,
                    truncation=True, return_tensors="pt")
            o = te(input_ids=t.input_ids, attention_mask=t.attention_mask, output_hidden_states=True)
            hs = torch.stack([h[0] for h in o.hidden_states])  # [layers+1, L, hidden]
            if hs.shape[0] != n_layers + 1:
                fail(f"text encoder returned {hs.shape[0]} hidden states, expected {n_layers + 1}")
            pe, pm = pipe.encode_prompt(prompt, device="cpu")
            if pm is not None:
                fail("encode_prompt returned a mask for a single prompt (diffusers should give None)")
            L = t.input_ids.shape[1]
            if pe.shape != (1, L - DROP_IDX, hidden) or not torch.equal(pe[0], hs[-1][DROP_IDX:]):
                fail("prompt_embeds != hidden_states[-1][34:] for a single prompt")
            g = gp.create_group(f"{i:02d}")
            g.attrs["prompt"] = prompt
            put_text(g, "prompt_utf8", prompt)
            put(g, "input_ids", t.input_ids[0], np.int64)
            put(g, "hidden_states", hs, np.float32)
            put(g, "prompt_embeds", pe[0], np.float32)
        # batch with padding, through the pipeline's own encode_prompt
        gb = f.create_group("batch")
        for j, prompt in enumerate(TE_BATCH):
            put_text(gb, f"prompt_{j:02d}", prompt)
        gb.attrs["num_prompts"] = np.int64(len(TE_BATCH))
        t = tok([TEMPLATE.format(p) for p in TE_BATCH], max_length=TOKENIZER_MAX_LENGTH + DROP_IDX, padding=True,
                truncation=True, return_tensors="pt")
        pe, pm = pipe.encode_prompt(TE_BATCH, device="cpu")
        if pm is None or bool(pm.all()):
            fail("batch encode_prompt has no padding; choose prompts of different lengths")
        gb.attrs["max_sequence_length"] = np.int64(1024)
        put(gb, "input_ids", t.input_ids, np.int64)
        put(gb, "attention_mask", t.attention_mask, np.int64)
        put(gb, "prompt_embeds", pe, np.float32)
        put(gb, "prompt_embeds_mask", pm, np.int64)
    log(f"text_encoder: wrote {len(TE_PROMPTS)} prompts and a batch of {len(TE_BATCH)} "
        f"(prompt_embeds {tuple(pe.shape)})")


# ------------------------------------------------------------------------------------------
# Stage: Qwen-Image-2.1's text encoder (tiny Qwen3-VL), through QwenImage21Pipeline's own
# prompt encoding (spec qwen-image-2.1.md section 3.2): the 2.1 template, the drop index the
# pipeline derives from the processor's chat template, the last decoder layer's output before
# the final RMSNorm. The tiny language model's weights are in the file (weights/), under their
# transformers names.

SEED_TEXT_ENCODER_21_PARAMS = 1021
# Renders a text-only message as the real Qwen3-VL chat template does:
# "<|im_start|>{role}\n{text}<|im_end|>\n". The pipeline only renders the system message with
# it, to count the tokens it drops.
TE21_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for c in message['content'] %}{{ c['text'] }}{% endfor %}<|im_end|>\n{% endfor %}"
)


def tiny_qwen3vl_processor(tokenizer):
    """Qwen3VLProcessor over the tiny tokenizer. Text-to-image never reaches the video
    processor, which needs torchvision (not installed, as in the spec's environment): the
    processor's type check is waived for that argument alone."""
    check = ProcessorMixin.check_argument_for_proper_class

    def waive_video(self, name, arg):
        if name == "video_processor" and arg is None:
            return None
        return check(self, name, arg)

    ProcessorMixin.check_argument_for_proper_class = waive_video
    try:
        images = Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2,
                                          image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
        return Qwen3VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=None,
                                chat_template=TE21_CHAT_TEMPLATE)
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


def tiny_text_encoder_21(vocab_size):
    ids = tiny_token_ids()
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=vocab_size, hidden_size=TINY_TEXT_21_HIDDEN, intermediate_size=48, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_act="silu",
            max_position_embeddings=4096, rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0.0,
            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 1, 1],
                             "mrope_interleaved": True},
            pad_token_id=ids["<|endoftext|>"], dtype="float32",
        ),
        vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=16,
            spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=TINY_TEXT_21_HIDDEN,
            num_position_embeddings=16, deepstack_visual_indexes=[0], dtype="float32",
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False, dtype="float32",
    )
    model = Qwen3VLForConditionalGeneration(config).eval().to(torch.float32)
    reinit_params(model, SEED_TEXT_ENCODER_21_PARAMS)
    return model


def tiny_tokenizer():
    tmp_tok = Path(tempfile.mkdtemp(prefix="tinytok21_"))
    try:
        write_tiny_tokenizer(tmp_tok)
        return Qwen2Tokenizer.from_pretrained(str(tmp_tok))
    finally:
        shutil.rmtree(tmp_tok)


def stage_text_encoder_21(out):
    tokenizer = tiny_tokenizer()
    te = tiny_text_encoder_21(len(tokenizer))
    pipe = QwenImage21Pipeline(scheduler=None, vae=None, text_encoder=te, processor=tiny_qwen3vl_processor(tokenizer),
                               transformer=None)
    drop = pipe._drop_idx
    language_model = te.model.language_model
    n_layers = te.config.text_config.num_hidden_layers
    hidden = te.config.text_config.hidden_size
    with h5_create(out / "text_encoder_21.h5",
                   "tiny Qwen3-VL text encoder of Qwen-Image-2.1: hidden states and prompt_embeds") as f:
        f.attrs["drop_idx"] = np.int64(drop)
        f.attrs["template"] = pipe.prompt_template_t2i
        f.attrs["config_json"] = json.dumps(te.config.to_dict(), sort_keys=True)
        gw = f.create_group("weights")
        for name, tensor in te.state_dict().items():
            if name.startswith("model.language_model."):
                put(gw, name, tensor, np.float32)
        gp = f.create_group("prompts")
        for i, prompt in enumerate(TE_PROMPTS):
            text = pipe.prompt_template_t2i.format(prompt or " ")
            ids = tokenizer([text], return_tensors="pt").input_ids
            # The pipeline's tap: the final norm returns its input, so the last hidden state is
            # the last decoder layer's output before it.
            handle = language_model.norm.register_forward_hook(lambda module, args, output: args[0])
            try:
                o = te(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
            finally:
                handle.remove()
            hs = torch.stack([h[0] for h in o.hidden_states])  # [layers + 1, L, hidden]
            if hs.shape[0] != n_layers + 1:
                fail(f"text encoder 2.1 returned {hs.shape[0]} hidden states, expected {n_layers + 1}")
            normed = language_model.norm(hs[-1])
            if torch.equal(normed, hs[-1]):
                fail("text encoder 2.1: the final norm changes nothing; the tap would not be tested")
            pe, pm, pad = pipe.encode_prompt(prompt, device="cpu")
            L = ids.shape[1]
            if pm is not None or bool(pad.any()):
                fail("encode_prompt of one text prompt returned a mask or image slots")
            if pe.shape != (1, L - drop, hidden) or not torch.equal(pe[0], hs[-1][drop:]):
                fail("prompt_embeds != the last layer's output before the norm, from the drop index on")
            g = gp.create_group(f"{i:02d}")
            g.attrs["prompt"] = prompt
            put_text(g, "prompt_utf8", prompt)
            put(g, "input_ids", ids[0], np.int64)
            put(g, "hidden_states", hs, np.float32)
            put(g, "prompt_embeds", pe[0], np.float32)
    log(f"text_encoder_21: wrote {len(TE_PROMPTS)} prompts (drop {drop}, {n_layers} layers)")


# ------------------------------------------------------------------------------------------
# Stage: the Edit pipelines' text side (tiny Qwen2.5-VL with its vision tower), through
# QwenImageEditPipeline / QwenImageEditPlusPipeline's own _get_qwen_prompt_embeds: the templates,
# the <|image_pad|> expansion, the vision rows scattered over the pads, the positions the language
# model used (1-D, as the installed stack runs it; and 3-D with mm_token_type_ids passed), and
# prompt_embeds after the drop of 64. The tiny model's vocabulary is the tiny tokenizer's, so the
# model runs on its ids; the real tokenizer's ids of the same texts are stored beside them.

TE_EDIT_IMAGES = {"odd_101x75": (101, 75, 31), "odd_63x129": (63, 129, 32), "odd_150x97": (150, 97, 33)}
TE_EDIT_LONG_PROMPT = TE_PROMPTS[5]
TE_EDIT_CASES = [  # (name, pipeline, images, prompt, mm_token_type_ids passed)
    ("edit_short", "edit", ["odd_101x75"], "Turn the cat into a tiger", False),
    ("edit_long", "edit", ["odd_63x129"], TE_EDIT_LONG_PROMPT, False),
    ("plus1_short", "plus", ["odd_63x129"], "Make it snow", False),
    ("plus2_short", "plus", ["odd_101x75", "odd_63x129"], "Put the dog from picture 2 into picture 1", False),
    ("plus2_long", "plus", ["odd_63x129", "odd_150x97"], TE_EDIT_LONG_PROMPT, False),
    ("edit_mrope", "edit", ["odd_63x129"], "Turn the cat into a tiger", True),
    ("plus2_mrope", "plus", ["odd_101x75", "odd_63x129"], "Put the dog from picture 2 into picture 1", True),
]
EDIT_DROP_IDX = 64


def qwen2vl_processor(tokenizer):
    """Qwen2VLProcessor with the PIL image processor and Qwen2.5-VL-7B-Instruct's published pixel
    bounds; the video processor needs torchvision (not installed), so its check is waived."""
    from transformers import Qwen2VLProcessor
    check = ProcessorMixin.check_argument_for_proper_class

    def waive_video(self, name, arg):
        return None if name == "video_processor" and arg is None else check(self, name, arg)

    ProcessorMixin.check_argument_for_proper_class = waive_video
    try:
        images = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056, patch_size=14,
                                          temporal_patch_size=2, merge_size=2)
        return Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=None)
    finally:
        ProcessorMixin.check_argument_for_proper_class = check


class _IdsCaptured(Exception):
    pass


def edit_pipeline(kind, text_encoder, processor):
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline
    cls = QwenImageEditPipeline if kind == "edit" else QwenImageEditPlusPipeline
    pipe = cls(scheduler=None, vae=None, text_encoder=text_encoder, tokenizer=processor.tokenizer, processor=processor,
               transformer=None)
    if pipe.prompt_template_encode_start_idx != EDIT_DROP_IDX:
        fail(f"{cls.__name__} drops {pipe.prompt_template_encode_start_idx} tokens, expected {EDIT_DROP_IDX}")
    return pipe


def stage_text_encoder_edit(out):
    from PIL import Image
    pipe_t2i = load_tiny(out)
    te, tiny_tok = pipe_t2i.text_encoder, pipe_t2i.tokenizer
    model = te.model
    image_token_id = te.config.image_token_id
    merge = te.config.vision_config.spatial_merge_size
    tiny_proc, real_proc = qwen2vl_processor(tiny_tok), qwen2vl_processor(Qwen2Tokenizer.from_pretrained(str(REAL_TOKENIZER_DIR)))
    images = {n: Image.fromarray(resample_source(w, h, seed), "RGB") for n, (w, h, seed) in TE_EDIT_IMAGES.items()}

    captured = {}

    def on_te_call(module, args, kwargs):
        captured["input_ids"] = kwargs["input_ids"].clone()
        captured["attention_mask"] = kwargs["attention_mask"].clone()
        captured["image_grid_thw"] = kwargs["image_grid_thw"].clone()
        if captured.get("abort"):
            raise _IdsCaptured()
        if captured.get("mrope"):  # what the processor returns and the Edit pipelines drop
            kwargs = dict(kwargs, mm_token_type_ids=(kwargs["input_ids"] == image_token_id).int())
        return args, kwargs

    def on_language_model(module, args, kwargs):
        captured["inputs_embeds"] = kwargs["inputs_embeds"][0].detach().clone()

    def on_rotary(module, args, output):
        captured["position_ids"] = args[1].detach().clone()

    def on_visual(module, args, output):
        captured["vision_rows"] = output.pooler_output.detach().clone()

    hooks = [te.register_forward_pre_hook(on_te_call, with_kwargs=True),
             model.language_model.register_forward_pre_hook(on_language_model, with_kwargs=True),
             model.language_model.rotary_emb.register_forward_hook(on_rotary),
             model.visual.register_forward_hook(on_visual)]
    hidden = te.config.text_config.hidden_size
    try:
        with h5_create(out / "text_encoder_edit.h5",
                       "the Edit pipelines' text side: tiny Qwen2.5-VL with image tokens, positions, prompt_embeds") as f:
            f.attrs["drop_idx"] = np.int64(EDIT_DROP_IDX)
            f.attrs["image_token_id"] = np.int64(image_token_id)
            f.attrs["merge_size"] = np.int64(merge)
            f.attrs["mrope_section"] = np.asarray(te.config.text_config.rope_parameters["mrope_section"], np.int64)
            for name, (w, h, seed) in TE_EDIT_IMAGES.items():  # resample_source's images, not stored
                f.attrs[f"image_{name}"] = np.asarray([w, h, seed], np.int64)
            gc = f.create_group("cases")
            for i, (name, kind, image_names, prompt, mrope) in enumerate(TE_EDIT_CASES):
                imgs = [images[n] for n in image_names]
                image_arg = imgs[0] if kind == "edit" else imgs
                # The real tokenizer's ids of the same texts: the pipeline's own call, stopped at the encoder.
                captured.clear()
                captured["abort"] = True
                try:
                    edit_pipeline(kind, te, real_proc)._get_qwen_prompt_embeds(prompt, image_arg, device="cpu")
                    fail("the text encoder was not called")
                except _IdsCaptured:
                    pass
                real_ids = captured["input_ids"][0]
                # The tiny model's run.
                captured.clear()
                captured["mrope"] = mrope
                with torch.no_grad():
                    pe, pm = edit_pipeline(kind, te, tiny_proc)._get_qwen_prompt_embeds(prompt, image_arg, device="cpu")
                ids, grid = captured["input_ids"][0], captured["image_grid_thw"]
                pos = captured["position_ids"][:, 0]  # [3, L]
                L = ids.shape[0]
                pads = torch.nonzero(ids == image_token_id)[:, 0]
                if pads.numel() != int((grid.prod(-1) // merge ** 2).sum()) or pads.numel() != captured["vision_rows"].shape[0]:
                    fail(f"{name}: {pads.numel()} image pads for grids {grid.tolist()}")
                if int((real_ids == 151655).sum()) != pads.numel():
                    fail(f"{name}: the real tokenizer's ids have other pads than the tiny's")
                if not bool(captured["attention_mask"].all()) or pm.shape != (1, L - EDIT_DROP_IDX) or not bool(pm.all()):
                    fail(f"{name}: a single prompt was padded")
                if not torch.equal(captured["inputs_embeds"][pads], captured["vision_rows"]):
                    fail(f"{name}: the vision rows are not at the pads")
                arange = torch.arange(L).expand(3, L)
                if mrope == torch.equal(pos, arange):
                    fail(f"{name}: positions {'are' if mrope else 'are not'} 0..L-1 with mm_token_type_ids "
                         f"{'passed' if mrope else 'dropped'}")
                c = gc.create_group(f"{i:02d}_{name}")
                c.attrs["pipeline"] = kind
                c.attrs["prompt"] = prompt
                c.attrs["images"] = ",".join(image_names)
                c.attrs["mm_token_type_ids"] = np.int64(mrope)
                put_text(c, "prompt_utf8", prompt)
                put(c, "input_ids", ids, np.int64)                # tiny tokenizer, what the model ran
                put(c, "real_input_ids", real_ids, np.int64)      # the real Qwen2.5-VL tokenizer
                put(c, "image_grid_thw", grid, np.int64)          # [n_images, 3]
                put(c, "pad_positions", pads, np.int64)
                put(c, "vision_rows", captured["vision_rows"], np.float32)  # [n_pads, hidden]
                put(c, "position_ids", pos, np.int64)             # [3, L]
                put(c, "prompt_embeds", pe[0], np.float32)        # [L - 64, hidden]
                put(c, "prompt_embeds_mask", pm[0], np.int64)
        log(f"text_encoder_edit: wrote {len(TE_EDIT_CASES)} cases (hidden {hidden})")
    finally:
        for h in hooks:
            h.remove()


# ------------------------------------------------------------------------------------------
# Stage: transformer (tiny)

def pad_text(c, valid):
    """Text [B, L, J] with the valid tokens of each row (None: all) -> (text, mask [B, L] or None)."""
    if valid is None:
        return c, None
    mask = torch.zeros(c.shape[:2], dtype=torch.int64)
    for b, n in enumerate(valid):
        mask[b, :n] = 1
    return c * mask[..., None].to(c.dtype), mask  # padded text rows are exact zeros, as encode_prompt makes them


def forward_capturing_blocks(model, captured, hooks, **inputs):
    """model(**inputs) -> output, with each block's outputs in captured["block_{i}_txt" / "_img"];
    removes `hooks` (hooks already registered) with its own afterwards."""
    for i, blk in enumerate(model.transformer_blocks):
        def hook(m, a, o, i=i):
            txt, img = o  # QwenImageTransformerBlock returns (encoder_hidden_states, hidden_states)
            captured[f"block_{i}_txt"] = txt.clone()
            captured[f"block_{i}_img"] = img.clone()
        hooks.append(blk.register_forward_hook(hook))
    try:
        return model(**inputs, return_dict=False)[0]
    finally:
        for hk in hooks:
            hk.remove()


def run_transformer_case(model, g, seed, batch, h, w, L, valid, tts):
    gen = torch.Generator().manual_seed(seed)
    S = h * w
    D = model.config.joint_attention_dim
    x = torch.randn((batch, S, model.config.in_channels), generator=gen)
    c = torch.randn((batch, L, D), generator=gen)
    c, mask = pad_text(c, valid)
    tt = torch.tensor(tts, dtype=torch.float32)
    img_shapes = [[(1, h, w)]] * batch

    captured = {}
    hooks = [model.time_text_embed.register_forward_hook(lambda m, a, o: captured.__setitem__("temb", o.clone()))]
    outp = forward_capturing_blocks(model, captured, hooks, hidden_states=x, encoder_hidden_states=c,
                                    encoder_hidden_states_mask=mask, timestep=tt, img_shapes=img_shapes)
    g.attrs["h"] = np.int64(h)
    g.attrs["w"] = np.int64(w)
    g.attrs["input_seed"] = np.int64(seed)
    g.attrs["has_mask"] = np.int64(mask is not None)
    put(g, "hidden_states", x, np.float32)
    put(g, "encoder_hidden_states", c, np.float32)
    if mask is not None:
        put(g, "encoder_hidden_states_mask", mask, np.int64)
    put(g, "timestep", tt, np.float32)
    put(g, "temb", captured["temb"], np.float32)
    for i in range(len(model.transformer_blocks)):
        put(g, f"block_{i}_txt", captured[f"block_{i}_txt"], np.float32)
        put(g, f"block_{i}_img", captured[f"block_{i}_img"], np.float32)
    put(g, "output", outp, np.float32)
    return outp


def stage_transformer(out):
    pipe = load_tiny(out)
    model = pipe.transformer
    tts = [np.float32(0.9897).item(), np.float32(0.35).item()]
    with h5_create(out / "transformer.h5", "tiny QwenImageTransformer2DModel: inputs, temb, per-block outputs, output") as f:
        f.attrs["num_layers"] = np.int64(model.config.num_layers)
        f.attrs["config"] = json.dumps({k: (list(v) if isinstance(v, tuple) else v) for k, v in model.config.items()
                                        if not k.startswith("_")}, sort_keys=True)
        g = f.create_group("cases")
        o_even = run_transformer_case(model, g.create_group("even"), 11, 2, 4, 4, 7, [7, 4], tts)
        run_transformer_case(model, g.create_group("odd"), 12, 2, 3, 5, 7, [7, 4], tts)
        run_transformer_case(model, g.create_group("nomask"), 13, 1, 4, 4, 6, None, [np.float32(0.6).item()])
        # Sanity: padding is really masked (row 1 must depend only on its 4 valid tokens).
        if not torch.isfinite(o_even).all() or float(o_even.abs().max()) > 1e3:
            fail("transformer output is not finite / exploded")
    log("transformer: wrote cases even (4x4), odd (3x5), nomask (4x4)")


# ------------------------------------------------------------------------------------------
# Stage: transformer_edit (tiny): the Edit models' image stream, [noise; condition images], with
# and without zero_cond_t (Edit-2511), spec qwen-image-edit.md section 9.

# name: (input seed, batch, img_shapes [(h, w)] in packed tokens, noise first, L, valid per sample or None)
TRANSFORMER_EDIT_CASES = {
    "one_condition": (21, 1, [(4, 6), (5, 3)], 6, None),
    "two_conditions": (22, 1, [(4, 4), (3, 5), (2, 2)], 8, [5]),  # padded text
    "larger_condition": (23, 1, [(3, 3), (6, 8)], 5, None),       # text starts after the condition's grid
    "cfg_batch": (24, 2, [(4, 6), (5, 3)], 7, [7, 4]),             # one latents, two padded texts
}
TRANSFORMER_EDIT_TT = 0.8125


def set_zero_cond_t(model, on):
    """zero_cond_t as the Edit-2511 config sets it: the model's flag and each block's."""
    model.zero_cond_t = on
    for blk in model.transformer_blocks:
        blk.zero_cond_t = on


def run_transformer_edit_case(model, g, seed, batch, shapes, L, valid):
    gen = torch.Generator().manual_seed(seed)
    S0 = shapes[0][0] * shapes[0][1]
    S = sum(h * w for h, w in shapes)
    x = torch.randn((1, S, model.config.in_channels), generator=gen).expand(batch, S, -1).contiguous()
    c = torch.randn((batch, L, model.config.joint_attention_dim), generator=gen)
    c, mask = pad_text(c, valid)
    tt = torch.full((batch,), TRANSFORMER_EDIT_TT, dtype=torch.float32)
    img_shapes = [[(1, h, w) for h, w in shapes]] * batch
    g.attrs["input_seed"] = np.int64(seed)
    put(g, "img_shapes", np.array(shapes, dtype=np.int64), np.int64)  # [images, 2]: (h, w), noise first
    put(g, "hidden_states", x, np.float32)
    put(g, "encoder_hidden_states", c, np.float32)
    if mask is not None:
        put(g, "encoder_hidden_states_mask", mask, np.int64)
    put(g, "timestep", tt, np.float32)
    outputs = {}
    for mode, on in (("plain", False), ("zero_cond_t", True)):
        set_zero_cond_t(model, on)
        captured = {}
        try:
            full = forward_capturing_blocks(model, captured, [], hidden_states=x, encoder_hidden_states=c,
                                            encoder_hidden_states_mask=mask, timestep=tt, img_shapes=img_shapes)
        finally:
            set_zero_cond_t(model, False)
        if full.shape != (batch, S, model.config.out_channels * 4) or not torch.isfinite(full).all():
            fail(f"transformer_edit: output {tuple(full.shape)} not [B, S, 64] or not finite")
        mg = g.create_group(mode)
        for i in range(len(model.transformer_blocks)):
            put(mg, f"block_{i}_txt", captured[f"block_{i}_txt"], np.float32)
            put(mg, f"block_{i}_img", captured[f"block_{i}_img"], np.float32)
        put(mg, "output_full", full, np.float32)   # proj_out over the whole image stream [B, S, 64]
        put(mg, "output", full[:, :S0], np.float32)  # what the pipeline keeps, v[:, :S0]
        outputs[mode] = full
    # The two modes must differ (else the zero_cond_t test could not fail), on the target rows too.
    diff = float((outputs["plain"][:, :S0] - outputs["zero_cond_t"][:, :S0]).abs().max())
    if diff < 1e-3:
        fail(f"transformer_edit: zero_cond_t changes the target rows by only {diff}")
    if batch == 2 and float((outputs["plain"][0] - outputs["plain"][1]).abs().max()) < 1e-3:
        fail("transformer_edit: the CFG case's two texts give the same velocities")


def stage_transformer_edit(out):
    pipe = load_tiny(out)
    model = pipe.transformer
    if model.zero_cond_t or any(blk.zero_cond_t for blk in model.transformer_blocks):
        fail("transformer_edit: the tiny transformer should be saved without zero_cond_t")
    with h5_create(out / "transformer_edit.h5",
                   "tiny QwenImageTransformer2DModel with condition images (Edit), zero_cond_t off and on: "
                   "inputs, img_shapes, per-block outputs, output") as f:
        f.attrs["num_layers"] = np.int64(model.config.num_layers)
        g = f.create_group("cases")
        for name, (seed, batch, shapes, L, valid) in TRANSFORMER_EDIT_CASES.items():
            run_transformer_edit_case(model, g.create_group(name), seed, batch, shapes, L, valid)
    log(f"transformer_edit: wrote cases {', '.join(TRANSFORMER_EDIT_CASES)} (plain and zero_cond_t)")


# ------------------------------------------------------------------------------------------
# Stage: VAE decoder (tiny) + real-config up_blocks.0 with regenerable weights

VAE_SIZES = [(4, 4), (3, 5), (8, 8), (6, 10)]
REAL_UPBLOCK_SEED_BASE = 20000
REAL_UPBLOCK_INPUT_SEED = 777
REAL_UPBLOCK_HW = (4, 4)


def real_upblock_param_rule(name, shape):
    """(offset, scale) with value = offset + scale * torch.randn(shape, generator=seed_k); scales are
    powers of two so that `scale * randn` is exact in float32 (only the `+ offset` rounds)."""
    leaf = name.split(".")[-1]
    if leaf == "gamma":
        return 1.0, 0.125
    if leaf == "bias":
        return 0.0, 0.0625
    if len(shape) == 5:
        fan_in = shape[1] * shape[3] * shape[4]
    else:
        fan_in = int(np.prod(shape[1:]))
    return 0.0, 2.0 ** round(math.log2(1.0 / math.sqrt(fan_in)))


def stage_vae(out):
    pipe = load_tiny(out)
    vae = pipe.vae
    mean = torch.tensor(LATENTS_MEAN, dtype=torch.float32).view(1, 16, 1, 1, 1)
    std = torch.tensor(LATENTS_STD, dtype=torch.float32).view(1, 16, 1, 1, 1)
    with h5_create(out / "vae.h5", "tiny AutoencoderKLQwenImage decoder + real-config decoder.up_blocks.0") as f:
        f.attrs["base_dim"] = np.int64(vae.config.base_dim)
        g = f.create_group("cases")
        clamp_fracs = []
        for i, (h, w) in enumerate(VAE_SIZES):
            gen = torch.Generator().manual_seed(300 + i)
            z = torch.randn((1, 16, 1, h, w), generator=gen) * std + mean  # de-normalised latents
            pre = {}
            hooks = [vae.decoder.conv_out.register_forward_hook(lambda m, a, o: pre.__setitem__("x", o.clone()))]
            if i == 0:  # intermediates of the first case only (debugging aid, small)
                hooks.append(vae.post_quant_conv.register_forward_hook(lambda m, a, o: pre.__setitem__("post_quant_conv", o.clone())))
                hooks.append(vae.decoder.conv_in.register_forward_hook(lambda m, a, o: pre.__setitem__("conv_in", o.clone())))
                hooks.append(vae.decoder.mid_block.register_forward_hook(lambda m, a, o: pre.__setitem__("mid_block", o.clone())))
                for j, ub in enumerate(vae.decoder.up_blocks):
                    hooks.append(ub.register_forward_hook(lambda m, a, o, j=j: pre.__setitem__(f"up_block_{j}", o.clone())))
            try:
                dec = vae.decode(z, return_dict=False)[0]
            finally:
                for hk in hooks:
                    hk.remove()
            clamp_fracs.append(float((pre["x"].abs() >= 1).float().mean()))
            c = g.create_group(f"{i:02d}")
            c.attrs["h"] = np.int64(h)
            c.attrs["w"] = np.int64(w)
            c.attrs["seed"] = np.int64(300 + i)
            put(c, "z", z, np.float32)
            put(c, "decoded", dec, np.float32)
            put(c, "decoded_unclamped", pre["x"], np.float32)
            for name in ["post_quant_conv", "conv_in", "mid_block"] + [f"up_block_{j}" for j in range(4)]:
                if name in pre:
                    put(c, name, pre[name], np.float32)
        if max(clamp_fracs) > 0.2:
            fail(f"tiny VAE output clamped too often: {clamp_fracs}")
        log(f"vae: tiny decoder cases {VAE_SIZES}; fraction clamped {['%.3f' % x for x in clamp_fracs]}")

        # Real Qwen-Image decoder.up_blocks.0 (base_dim 96: 3 x Res(384->384), upsample3d 384->192),
        # weights regenerable from seeds; only input and output are stored.
        blk = QwenImageUpBlock(in_dim=384, out_dim=384, num_res_blocks=2, dropout=0.0, upsample_mode="upsample3d").eval()
        gr = f.create_group("real_up_block0")
        gr.attrs["module"] = "AutoencoderKLQwenImage(base_dim=96).decoder.up_blocks.0 (QwenImageUpBlock 384->384, upsample3d)"
        gr.attrs["weight_rule"] = ("param_k = offset_k + scale_k * torch.randn(shape_k, generator=torch.Generator()"
                                   ".manual_seed(seed_k), dtype=float32), k in state_dict order, "
                                   "seed_k = seed_base + k; scale*randn is exact (powers of two), then one float32 add")
        gr.attrs["seed_base"] = np.int64(REAL_UPBLOCK_SEED_BASE)
        names, shapes, seeds, offsets, scales = [], [], [], [], []
        sd = blk.state_dict()
        for k, (name, p) in enumerate(sd.items()):
            off, sc = real_upblock_param_rule(name, tuple(p.shape))
            seed = REAL_UPBLOCK_SEED_BASE + k
            r = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
            p.copy_(r * sc + off)
            names.append(name)
            shapes.append(list(p.shape))
            seeds.append(seed)
            offsets.append(off)
            scales.append(sc)
        pl = gr.create_group("params")
        for k, name in enumerate(names):
            pk = pl.create_group(f"{k:02d}")
            pk.attrs["name"] = "decoder.up_blocks.0." + name
            pk.attrs["seed"] = np.int64(seeds[k])
            pk.attrs["offset"] = np.float64(offsets[k])
            pk.attrs["scale"] = np.float64(scales[k])
            put(pk, "shape", np.asarray(shapes[k], dtype=np.int64), np.int64)
            # a few leading values, so a C++ regeneration can be checked before the forward pass
            put(pk, "head", sd[name].reshape(-1)[:8], np.float32)
        hh, ww = REAL_UPBLOCK_HW
        x = torch.randn((1, 384, 1, hh, ww), generator=torch.Generator().manual_seed(REAL_UPBLOCK_INPUT_SEED))
        y = blk(x)
        gr.attrs["input_seed"] = np.int64(REAL_UPBLOCK_INPUT_SEED)
        gr.attrs["input_rule"] = "input = torch.randn((1,384,1,h,w), generator=torch.Generator().manual_seed(input_seed))"
        put(gr, "input", x, np.float32)
        put(gr, "output", y, np.float32)
        log(f"vae: real-config up_blocks.0 on {tuple(x.shape)} -> {tuple(y.shape)}, {len(names)} regenerable tensors")


# ------------------------------------------------------------------------------------------
# Stage: VAE encoder (tiny), as the Edit pipelines encode their input images

VAE_ENCODER_SIZES = [(32, 32), (48, 80), (80, 16)]  # (height, width): multiples of 16, non-square
VAE_ENCODER_SEED = 500


def stage_vae_encoder(out):
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import QwenImageEditPipeline

    vae = load_tiny(out).vae
    # _encode_vae_image reads only self.vae and self.latent_channels: called on a stand-in for the pipeline.
    edit = type("EditStandIn", (), {})()
    edit.vae, edit.latent_channels = vae, vae.config.z_dim
    description = "tiny AutoencoderKLQwenImage encoder: the Edit pipelines' image latents"
    with h5_create(out / "vae_encoder.h5", description) as f:
        f.attrs["base_dim"] = np.int64(vae.config.base_dim)
        g = f.create_group("cases")
        for i, (h, w) in enumerate(VAE_ENCODER_SIZES):
            seed = VAE_ENCODER_SEED + i
            image = torch.rand((1, 3, 1, h, w), generator=torch.Generator().manual_seed(seed)) * 2 - 1  # [-1, 1]
            stages = {}

            def keep(name):
                return lambda m, a, o: stages.__setitem__(name, o[0, :, 0].clone())

            modules = [("conv_in", vae.encoder.conv_in), ("mid_block", vae.encoder.mid_block),
                       ("encoder_out", vae.encoder), ("moments", vae.quant_conv)]
            modules += [(f"down_block_{j}", blk) for j, blk in enumerate(vae.encoder.down_blocks)]
            hooks = [m.register_forward_hook(keep(name)) for name, m in modules]
            try:
                with torch.no_grad():
                    mode = vae.encode(image).latent_dist.mode()  # [1, 16, 1, h/8, w/8]
                    normalized = QwenImageEditPipeline._encode_vae_image(edit, image, None)
            finally:
                for hk in hooks:
                    hk.remove()
            if not torch.equal(mode, stages["moments"][None, :16, None]):
                fail("vae_encoder: the posterior mode is not the first 16 channels of quant_conv's output")
            hl, wl = normalized.shape[3], normalized.shape[4]
            packed = QwenImageEditPipeline._pack_latents(normalized[:, :, 0], 1, 16, hl, wl)
            c = g.create_group(f"{i:02d}")
            c.attrs["h"], c.attrs["w"], c.attrs["seed"] = np.int64(h), np.int64(w), np.int64(seed)
            c.attrs["input_rule"] = "torch.rand((1,3,1,h,w), generator=torch.Generator().manual_seed(seed)) * 2 - 1"
            put(c, "image", image, np.float32)
            for name, tensor in stages.items():
                put(c, name, tensor, np.float32)
            put(c, "mean", mode[0, :, 0], np.float32)
            put(c, "normalized", normalized[0, :, 0], np.float32)
            put(c, "packed", packed[0], np.float32)
        log(f"vae_encoder: tiny encoder cases {VAE_ENCODER_SIZES}, {len(vae.encoder.down_blocks)} down blocks each")


# ------------------------------------------------------------------------------------------
# Stage: full pipeline (tiny)

PIPE_PROMPTS = [
    "A cat holding a sign that says hello world",
    "\nA red fox jumping over a lazy dog, watercolor",
    "東京の夜景、ネオンが輝く街 🌃 with a sign saying \"OPEN 24/7\"",
]
PIPE_SIZES = [(64, 64), (48, 80)]  # (height, width)
PIPE_STEPS = 6


def run_pipeline_case(pipe, prompt, negative, cfg_scale, height, width, seed, steps=PIPE_STEPS):
    rec = {"steps": [], "encode": [], "latents": []}
    orig_encode = pipe.encode_prompt
    orig_prepare = pipe.prepare_latents

    def encode(*a, **k):
        r = orig_encode(*a, **k)
        rec["encode"].append((r[0].clone(), None if r[1] is None else r[1].clone()))
        return r

    def prepare(*a, **k):
        r = orig_prepare(*a, **k)
        rec["latents"].append(r.clone())
        return r

    def on_step(p, i, t, kw):
        rec["steps"].append(kw["latents"].clone())
        return kw

    pipe.encode_prompt = encode
    pipe.prepare_latents = prepare
    try:
        kwargs = dict(prompt=prompt, height=height, width=width, num_inference_steps=steps,
                      true_cfg_scale=cfg_scale, callback_on_step_end=on_step)
        if negative is not None:
            kwargs["negative_prompt"] = negative
        lat = pipe(generator=torch.Generator().manual_seed(seed), output_type="latent", **kwargs).images
        sigmas = pipe.scheduler.sigmas.clone()
        timesteps = pipe.scheduler.timesteps.clone()
        rec_lat = dict(rec)
        rec["steps"], rec["encode"], rec["latents"] = [], [], []
        img_np = pipe(generator=torch.Generator().manual_seed(seed), output_type="np", **kwargs).images
        steps_np = list(rec["steps"])
        rec["steps"] = []
        img_pil = pipe(generator=torch.Generator().manual_seed(seed), output_type="pil", **kwargs).images
    finally:
        pipe.encode_prompt = orig_encode
        pipe.prepare_latents = orig_prepare
    for a, b in zip(rec_lat["steps"], steps_np):
        if not torch.equal(a, b):
            fail("pipeline: two identical runs differ (non-deterministic)")
    return dict(final_latents=lat, sigmas=sigmas, timesteps=timesteps, steps=rec_lat["steps"],
                encode=rec_lat["encode"], noise=rec_lat["latents"][0], image_float=img_np[0],
                image_uint8=np.asarray(img_pil[0].convert("RGB"), dtype=np.uint8))


def stage_pipeline(out):
    pipe = load_tiny(out)
    with h5_create(out / "pipeline.h5", "tiny QwenImagePipeline end to end (float32, CPU)") as f:
        f.attrs["num_inference_steps"] = np.int64(PIPE_STEPS)
        g = f.create_group("cases")
        k = 0
        for prompt in PIPE_PROMPTS:
            for negative, scale in ((" ", 4.0), (None, 4.0)):
                for (height, width) in PIPE_SIZES:
                    seed = 5000 + k
                    r = run_pipeline_case(pipe, prompt, negative, scale, height, width, seed)
                    do_cfg = negative is not None and scale > 1
                    c = g.create_group(f"{k:02d}")
                    c.attrs["prompt"] = prompt
                    c.attrs["negative_prompt"] = negative if negative is not None else ""
                    c.attrs["true_cfg"] = np.int64(do_cfg)
                    c.attrs["true_cfg_scale"] = np.float64(scale)
                    c.attrs["height"] = np.int64(height)
                    c.attrs["width"] = np.int64(width)
                    c.attrs["steps"] = np.int64(PIPE_STEPS)
                    c.attrs["seed"] = np.int64(seed)
                    c.attrs["max_sequence_length"] = np.int64(512)
                    put_text(c, "prompt_utf8", prompt)
                    hl, wl = 2 * (height // 16), 2 * (width // 16)
                    expect = pipe._pack_latents(torch_randn((1, 1, 16, hl, wl), seed), 1, 16, hl, wl)
                    if not torch.equal(expect, r["noise"]):
                        fail("pipeline: initial latents != pack(torch.randn((1,1,16,Hl,Wl), seed))")
                    put(c, "noise", r["noise"], np.float32)
                    pe, pm = r["encode"][0]
                    put(c, "prompt_embeds", pe, np.float32)
                    if pm is not None:
                        fail("pipeline: single-prompt mask is not None")
                    if do_cfg:
                        ne, nm = r["encode"][1]
                        put(c, "negative_prompt_embeds", ne, np.float32)
                    elif len(r["encode"]) != 1:
                        fail("pipeline: negative prompt encoded although CFG is off")
                    put(c, "sigmas", r["sigmas"], np.float32)
                    put(c, "timesteps", r["timesteps"], np.float32)
                    for i, lat in enumerate(r["steps"]):
                        put(c, f"latents_step_{i}", lat, np.float32)
                    if not torch.equal(r["steps"][-1], r["final_latents"]):
                        fail("pipeline: final latents != last step latents")
                    put(c, "final_latents", r["final_latents"], np.float32)
                    put(c, "image_float", r["image_float"], np.float32)
                    put(c, "image_uint8", r["image_uint8"], np.uint8)
                    ref_u8 = np.round(r["image_float"] * np.float32(255)).astype(np.uint8)
                    if not np.array_equal(ref_u8, r["image_uint8"]):
                        fail("pipeline: uint8 image != round(image_float * 255)")
                    k += 1
    log(f"pipeline: wrote {k} cases")


# ------------------------------------------------------------------------------------------
# Stage: Qwen2.5-VL vision tower (tiny Qwen2_5_VisionTransformerPretrainedModel), the image side
# of the Edit pipelines (spec qwen-image-edit.md section 4): the window index and cu seqlens, the
# 2-D RoPE tables in window order, every block's output (window order) and the merged output (raster
# order of merge blocks). Windows of 2x2 merged cells, so the tiny grids hold several windows, a
# padded extra one where a merged side is even, and partial ones where it is odd. 4-px patches
# keep pixel_values small (the golden budget); the tiny pipeline's own tower runs the real
# 14-px patch (1176 values). The weights are in the file under their checkpoint names (visual.*).

TINY_VISION_CONFIG = dict(depth=4, hidden_size=32, num_heads=2, intermediate_size=48, patch_size=4,
                          temporal_patch_size=2, spatial_merge_size=2, window_size=16,
                          fullatt_block_indexes=[1, 3], in_channels=3, hidden_act="silu")
SEED_VISION_PARAMS = 1031
VISION_CASES = [[(1, 8, 12)], [(1, 6, 10)], [(1, 6, 8)], [(1, 8, 12), (1, 6, 10)]]
# Spec section 4's verified example: the real window (112 px, 14-px patches: 4x4 merged cells) on 8x12 patches.
SPEC_WINDOW_GRID = (1, 8, 12)
SPEC_WINDOW_INDEX = [0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 18, 19, 20, 21, 4, 5, 10, 11, 16, 17, 22, 23]
SPEC_CU_WINDOW_SEQLENS = [0, 64, 96]


def tiny_vision_tower(out_hidden_size):
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    config = Qwen2_5_VLVisionConfig(out_hidden_size=out_hidden_size, **TINY_VISION_CONFIG)
    config._attn_implementation = "sdpa"
    tower = Qwen2_5_VisionTransformerPretrainedModel(config).eval()
    holder = torch.nn.Module()  # parameter names as in the checkpoint: visual.*
    holder.visual = tower
    reinit_params(holder, SEED_VISION_PARAMS)
    return tower, holder


def run_vision_case(tower, g, grids, seed):
    """One call of the tower on random pixel_values for `grids`; every intermediate into group g."""
    from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids, get_vision_window_index
    c = tower.config
    grid_thw = torch.tensor(grids, dtype=torch.int64)
    n_patches = int(sum(t * h * w for t, h, w in grids))
    patch_dim = c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size
    pixel_values = torch.randn(n_patches, patch_dim, generator=torch.Generator().manual_seed(seed))
    window_index, cu_window = get_vision_window_index(grid_thw, c.spatial_merge_size, c.window_size, c.patch_size)
    cu_seqlens = get_vision_cu_seqlens(grid_thw)
    position_ids = get_vision_position_ids(grid_thw, c.spatial_merge_size)  # [Np, 2] (h, w), merge-block order
    cos, sin = tower.rotary_pos_emb(pixel_values, position_ids)  # [Np, head_dim]
    cos, sin = (tower.permute_input_for_window_attn(t, window_index, n_patches) for t in (cos, sin))
    half = cos.shape[1] // 2
    if not (torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])):
        fail("vision: the RoPE table's two halves differ (rotate-half expects cat(freqs, freqs))")
    blocks = []
    hooks = [b.register_forward_hook(lambda m, a, o: blocks.append(o.clone())) for b in tower.blocks]
    result = tower(pixel_values, grid_thw=grid_thw)
    for h in hooks:
        h.remove()
    output = result.pooler_output  # [Np / 4, out_hidden], raster order of merge blocks
    if len(blocks) != c.depth or output.shape != (n_patches // 4, c.out_hidden_size):
        fail(f"vision: {len(blocks)} block outputs, output {tuple(output.shape)}")
    g.attrs["num_images"] = np.int64(len(grids))
    put(g, "grid_thw", grid_thw, np.int64)
    put(g, "pixel_values", pixel_values, np.float32)
    put(g, "window_index", window_index, np.int64)
    put(g, "cu_window_seqlens", cu_window, np.int64)
    put(g, "cu_seqlens", cu_seqlens, np.int64)
    put(g, "position_ids", position_ids, np.int64)
    put(g, "rope_cos", cos[:, :half], np.float32)  # [Np, head_dim / 2], window order
    put(g, "rope_sin", sin[:, :half], np.float32)
    put(g, "blocks", torch.stack(blocks), np.float32)  # [depth, Np, hidden], window order
    put(g, "output", output, np.float32)
    return len(set(cu_window.tolist())) - 1


def stage_vision(out):
    from transformers.vision_utils import get_vision_window_index
    if not (out / "tiny-pipeline" / "model_index.json").exists():
        log("tiny pipeline missing: building it first")
        stage_tiny(out)
    te_config = json.loads((out / "tiny-pipeline" / "text_encoder" / "config.json").read_text())
    tower, holder = tiny_vision_tower(te_config["text_config"]["hidden_size"])
    index, cu = get_vision_window_index(torch.tensor([SPEC_WINDOW_GRID]), 2, 112, 14)
    if index.tolist() != SPEC_WINDOW_INDEX or cu.tolist() != SPEC_CU_WINDOW_SEQLENS:
        fail(f"vision: the real window layout of 8x12 is {index.tolist()} / {cu.tolist()}, not the spec's")
    with h5_create(out / "vision.h5", "tiny Qwen2.5-VL vision tower: window layout, RoPE, blocks, merged output") as f:
        f.attrs["config_json"] = json.dumps(tower.config.to_dict(), sort_keys=True, default=list)
        gw = f.create_group("weights")
        for name, tensor in holder.state_dict().items():
            put(gw, name, tensor, np.float32)
        gs = f.create_group("spec_window")  # the real 112-px window, no forward
        gs.attrs["window_size"], gs.attrs["patch_size"] = np.int64(112), np.int64(14)
        put(gs, "grid_thw", torch.tensor([SPEC_WINDOW_GRID]), np.int64)
        put(gs, "window_index", index, np.int64)
        put(gs, "cu_window_seqlens", cu, np.int64)
        gc = f.create_group("cases")
        for i, grids in enumerate(VISION_CASES):
            windows = run_vision_case(tower, gc.create_group(f"{i:02d}"), grids, 500 + i)
            log(f"vision: case {i} grids {grids}: {windows} windows")
        # The tiny pipeline's own tower (its text encoder's visual.*), for the converted file's load path.
        from transformers import Qwen2_5_VLForConditionalGeneration as VL
        te = VL.from_pretrained(str(out / "tiny-pipeline" / "text_encoder"), dtype=torch.float32).eval()
        run_vision_case(te.model.visual, f.create_group("tiny_pipeline_tower"), [(1, 4, 6)], 600)
    log(f"vision: wrote {len(VISION_CASES)} cases and the tiny pipeline's tower")


# ------------------------------------------------------------------------------------------
# Stage: lora (LoRA files in every format QwenImagePipeline.load_lora_weights reads, the tiny
# pipeline run with them through load_lora_weights + set_adapters, and the Lightning scheduler)

LORA_RANK = 4
# The Lightning recipe of diffusers' docs (docs/source/en/api/pipelines/qwenimage.md).
LIGHTNING_SCHEDULER_CONFIG = dict(
    base_image_seq_len=256,
    base_shift=math.log(3),  # shift 3 in distillation
    invert_sigmas=False,
    max_image_seq_len=8192,
    max_shift=math.log(3),
    num_train_timesteps=1000,
    shift=1.0,
    shift_terminal=None,
    stochastic_sampling=False,
    time_shift_type="exponential",
    use_beta_sigmas=False,
    use_dynamic_shifting=True,
    use_exponential_sigmas=False,
    use_karras_sigmas=False,
)
# scheduler_config.json files a user may give (--scheduler-config): partial ones get the
# scheduler's __init__ defaults, as FlowMatchEulerDiscreteScheduler.from_config fills them in.
CUSTOM_SCHEDULER_CONFIGS = {
    "lightning": LIGHTNING_SCHEDULER_CONFIG,
    "static_shift_3p1": dict(shift=3.1, use_dynamic_shifting=False),
    "static_shift_1p7_terminal_0p1": dict(shift=1.7, use_dynamic_shifting=False, shift_terminal=0.1),
    "linear_terminal_false": dict(SCHEDULER_CONFIG, time_shift_type="linear", shift_terminal=False),
    "exponential_custom_shift": dict(use_dynamic_shifting=True, base_shift=0.3, max_shift=1.2,
                                     base_image_seq_len=128, max_image_seq_len=4096),
}
LORA_SCHED_STEPS = [2, 4, 8, 20, 50]
LORA_SCHED_SEQ_LENS = [15, 16, 1024, 4096, 6889]

BLOCK_ATTN = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj",
              "attn.to_out.0", "attn.to_add_out"]
BLOCK_MLP = ["img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2"]
BLOCK_MOD = ["img_mod.1", "txt_mod.1"]
TOP_LEVEL = ["img_in", "txt_in", "proj_out", "norm_out.linear", "time_text_embed.timestep_embedder.linear_1",
             "time_text_embed.timestep_embedder.linear_2"]


def block_modules(names, blocks=(0, 1)):
    return [f"transformer_blocks.{i}.{n}" for i in blocks for n in names]


def random_factors(linears, modules, seed, dtype, ranks=None):
    """lora_A [r, in] ~ N(0, 1/in), lora_B [out, r] ~ 0.3 N(0, 1/r): B A changes W by ~30 %."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in modules:
        o, i = linears[m]
        r = (ranks or {}).get(m, LORA_RANK)
        a = torch.randn(r, i, generator=g, dtype=torch.float32) / math.sqrt(i)
        b = torch.randn(o, r, generator=g, dtype=torch.float32) * (0.3 / math.sqrt(r))
        out[m] = (a.to(dtype), b.to(dtype))
    return out


def kohya_name(module):
    return "lora_unet_" + module.replace(".", "_")


def write_lora_files(dst, linears):
    """Writes one small LoRA per format; returns {stem: (path, {module: (A, B, alpha or None)}, metadata scale)}."""
    from peft import LoraConfig
    from safetensors.torch import save_file
    dst.mkdir(parents=True, exist_ok=True)
    files = {}

    # 1. diffusers / PEFT as diffusers' own trainers save it: transformer.<module>.lora_A/B.weight and
    #    the LoraConfig in the safetensors metadata (lora_alpha 8 != r 4, one module's alpha by alpha_pattern).
    mods = block_modules(BLOCK_ATTN + BLOCK_MLP)
    f = random_factors(linears, mods, 7001, torch.float32)
    layers = {}
    for m, (a, b) in f.items():
        layers[f"{m}.lora_A.weight"], layers[f"{m}.lora_B.weight"] = a, b
    config = LoraConfig(r=LORA_RANK, lora_alpha=8, target_modules=mods,
                        alpha_pattern={"transformer_blocks.1.attn.to_q": 2})
    metadata = config.to_dict()
    # PEFT keeps target_modules as a set: sorted, so that the file is the same on every run
    # (a set's order changes with Python's hash seed).
    metadata["target_modules"] = sorted(metadata["target_modules"])
    QwenImagePipeline.save_lora_weights(str(dst), transformer_lora_layers=layers,
                                        transformer_lora_adapter_metadata=metadata,
                                        weight_name="peft_metadata.safetensors")
    files["peft_metadata"] = {m: (a, b, None) for m, (a, b) in f.items()}

    # 2. PEFT names without the transformer. prefix and an .alpha per module (alpha 3, rank 4).
    mods = block_modules(BLOCK_ATTN + BLOCK_MOD, blocks=(0,)) + block_modules(BLOCK_MLP, blocks=(1,))
    f = random_factors(linears, mods, 7002, torch.float32)
    sd = {}
    for m, (a, b) in f.items():
        sd[f"{m}.lora_A.weight"], sd[f"{m}.lora_B.weight"] = a, b
        sd[f"{m}.alpha"] = torch.tensor(3.0)
    save_file(sd, str(dst / "peft_alpha.safetensors"))
    files["peft_alpha"] = {m: (a, b, 3.0) for m, (a, b) in f.items()}

    # 3. Kohya: lora_unet_<flattened module>.lora_down/lora_up/.alpha, with img_mod / txt_mod and every
    #    top-level linear; rank 2 on the top-level ones (per-module ranks), alpha 3 (scale 0.75 and 1.5).
    mods = TOP_LEVEL + block_modules(BLOCK_MOD + ["attn.to_q", "attn.add_v_proj", "img_mlp.net.2"])
    f = random_factors(linears, mods, 7003, torch.float32, ranks={m: 2 for m in TOP_LEVEL})
    sd = {}
    for m, (a, b) in f.items():
        k = kohya_name(m)
        sd[f"{k}.lora_down.weight"], sd[f"{k}.lora_up.weight"] = a, b
        sd[f"{k}.alpha"] = torch.tensor(3.0)
    save_file(sd, str(dst / "kohya.safetensors"))
    files["kohya"] = {m: (a, b, 3.0) for m, (a, b) in f.items()}

    # 4. ComfyUI / LightX2V / the Lightning files: diffusion_model.<module>.lora_down/lora_up/.alpha in
    #    bf16, every linear of every block (alpha 8, rank 4: scale 2, exact in bf16 as diffusers folds it).
    mods = block_modules(BLOCK_MOD + BLOCK_ATTN + BLOCK_MLP)
    f = random_factors(linears, mods, 7004, torch.bfloat16)
    sd = {}
    for m, (a, b) in f.items():
        sd[f"diffusion_model.{m}.lora_down.weight"], sd[f"diffusion_model.{m}.lora_up.weight"] = a, b
        sd[f"diffusion_model.{m}.alpha"] = torch.tensor(8.0, dtype=torch.bfloat16)
    save_file(sd, str(dst / "comfy_bf16.safetensors"))
    files["comfy_bf16"] = {m: (a, b, 8.0) for m, (a, b) in f.items()}

    # 5. A mix the converter accepts, in fp16: diffusion_model. on some keys and none on others,
    #    lora_A/lora_B with PEFT's adapter infix (lora_A.default.weight) on some, .alpha on some
    #    (alpha 2, rank 4: 0.5, exact in fp16); the rest scale 1.
    mods = block_modules(["attn.to_k", "attn.to_v", "txt_mlp.net.0.proj", "img_mod.1"]) + ["proj_out"]
    f = random_factors(linears, mods, 7005, torch.float16)
    sd, fm = {}, {}
    for n, (m, (a, b)) in enumerate(f.items()):
        prefix = "diffusion_model." if n % 2 == 0 else ""
        infix = "default." if n % 3 == 1 else ""
        sd[f"{prefix}{m}.lora_A.{infix}weight"], sd[f"{prefix}{m}.lora_B.{infix}weight"] = a, b
        alpha = 2.0 if n % 3 != 2 else None
        if alpha is not None:
            sd[f"{prefix}{m}.alpha"] = torch.tensor(alpha, dtype=torch.float16)
        fm[m] = (a, b, alpha)
    save_file(sd, str(dst / "mixed_f16.safetensors"))
    files["mixed_f16"] = fm
    for p in dst.iterdir():
        os.chmod(p, 0o644)
    return files


def expected_lora_delta(files, adapters, linears):
    """W' - W of each module, in float64, by the rule ditbatch implements: s * (alpha / rank) * B A with
    alpha = rank where the file has none, times lora_alpha / r of the file's LoraConfig metadata."""
    delta = {}
    for stem, strength in adapters:
        for m, (a, b, alpha) in files[stem].items():
            r = a.shape[0]
            scale = (alpha / r) if alpha is not None else 1.0
            if stem == "peft_metadata":
                scale *= (2 if m == "transformer_blocks.1.attn.to_q" else 8) / LORA_RANK
            d = strength * scale * (b.double() @ a.double())
            delta[m] = delta.get(m, 0) + d
    return delta


def check_lora_applied(pipe, files, adapters, linears, base_weights):
    """diffusers' effective weights (PEFT's get_delta_weight of every active adapter) equal the rule above."""
    from peft.tuners.lora import LoraLayer
    want = expected_lora_delta(files, adapters, linears)
    names = [stem for stem, _ in adapters]
    seen = set()
    for name, module in pipe.transformer.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        got = sum((module.get_delta_weight(n).double() for n in names if n in module.lora_A), 0)
        if name in want:
            seen.add(name)
            err = (got - want[name]).abs().max().item() if torch.is_tensor(got) else float("inf")
            if err > 1e-5 * want[name].abs().max().item():
                fail(f"lora: {name}: diffusers' delta weight differs from s * alpha / r * B A by {err:.3g}")
        elif torch.is_tensor(got) and got.abs().max().item() != 0:
            fail(f"lora: {name}: diffusers changed a module no active LoRA names")
    if seen != set(want):
        fail(f"lora: modules the LoRAs name but diffusers did not adapt: {sorted(set(want) - seen)[:5]}")


LORA_CASES = [
    # (adapters [(file stem, strength)], scheduler, steps, negative prompt (None: no CFG), (height, width))
    ([("peft_metadata", 1.0)], "model", 6, " ", (64, 64)),
    ([("peft_metadata", 0.7)], "model", 6, None, (48, 80)),
    ([("peft_alpha", 1.0)], "model", 6, " ", (48, 80)),
    ([("kohya", 1.0)], "model", 6, " ", (64, 64)),
    ([("comfy_bf16", 1.0)], "model", 6, None, (64, 64)),
    ([("mixed_f16", 1.0)], "model", 6, " ", (64, 64)),
    ([("kohya", 0.7), ("comfy_bf16", 1.0)], "model", 6, " ", (48, 80)),
    ([("comfy_bf16", 1.0)], "lightning", 8, None, (64, 64)),
    ([("peft_metadata", 0.7), ("mixed_f16", -0.5)], "lightning", 8, None, (48, 80)),
]
LORA_PROMPT = "A cat holding a sign that says hello world"


def stage_lora(out):
    pipe = load_tiny(out)
    linears = {n: tuple(m.weight.shape) for n, m in pipe.transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    base_weights = {n: p.clone() for n, p in pipe.transformer.state_dict().items()}
    lora_dir = out / "lora"
    if lora_dir.exists():
        shutil.rmtree(lora_dir)
    files = write_lora_files(lora_dir, linears)
    model_scheduler = pipe.scheduler
    lightning = FlowMatchEulerDiscreteScheduler.from_config(LIGHTNING_SCHEDULER_CONFIG)
    for stem in files:
        pipe.load_lora_weights(str(lora_dir / f"{stem}.safetensors"), adapter_name=stem)
    with h5_create(out / "lora.h5", "tiny QwenImagePipeline with LoRAs (load_lora_weights + set_adapters) and "
                                    "custom schedulers (float32, CPU)") as f:
        f.attrs["lora_dir"] = "tests/data/golden/lora"
        f.attrs["peft_version"] = str(peft.__version__)
        f.attrs["lightning_scheduler_config"] = json.dumps(LIGHTNING_SCHEDULER_CONFIG, sort_keys=True)
        g = f.create_group("cases")
        for k, (adapters, sched, steps, negative, (height, width)) in enumerate(LORA_CASES):
            pipe.scheduler = lightning if sched == "lightning" else model_scheduler
            seed = 6000 + k
            pipe.set_adapters([s for s, _ in adapters], [w for _, w in adapters])
            check_lora_applied(pipe, files, adapters, linears, base_weights)
            r = run_pipeline_case(pipe, LORA_PROMPT, negative, 4.0, height, width, seed, steps=steps)
            pipe.disable_lora()
            plain = run_pipeline_case(pipe, LORA_PROMPT, negative, 4.0, height, width, seed, steps=steps)
            pipe.enable_lora()
            effect = ((r["final_latents"] - plain["final_latents"]).norm() / plain["final_latents"].norm()).item()
            # The C++ test's bound (latents NMSE 1e-10) resolves 1e-5 relative: 1 % is a thousand times that.
            if not effect > 0.01:
                fail(f"lora case {k}: the LoRAs change the latents by only {effect:.3g} (relative): a golden that "
                     "cannot tell a LoRA from none")
            changed_pixels = float(np.mean(r["image_uint8"] != plain["image_uint8"]))
            if not changed_pixels > 0.1:
                fail(f"lora case {k}: the LoRAs change only {changed_pixels:.1%} of the image's values")
            c = g.create_group(f"{k:02d}")
            c.attrs["lora_files"] = json.dumps([f"{s}.safetensors" for s, _ in adapters])
            c.attrs["lora_strengths"] = np.asarray([w for _, w in adapters], dtype=np.float64)
            c.attrs["scheduler"] = sched
            c.attrs["prompt"] = LORA_PROMPT
            c.attrs["negative_prompt"] = negative if negative is not None else ""
            c.attrs["true_cfg"] = np.int64(negative is not None)
            c.attrs["true_cfg_scale"] = np.float64(4.0)
            c.attrs["height"] = np.int64(height)
            c.attrs["width"] = np.int64(width)
            c.attrs["steps"] = np.int64(steps)
            c.attrs["seed"] = np.int64(seed)
            c.attrs["max_sequence_length"] = np.int64(512)
            c.attrs["lora_effect"] = np.float64(effect)
            c.attrs["lora_changed_pixels"] = np.float64(changed_pixels)
            put(c, "sigmas", r["sigmas"], np.float32)
            put(c, "timesteps", r["timesteps"], np.float32)
            put(c, "final_latents", r["final_latents"], np.float32)
            put(c, "final_latents_without_lora", plain["final_latents"], np.float32)
            put(c, "image_uint8", r["image_uint8"], np.uint8)
            log(f"lora case {k}: {adapters} {sched} {steps} steps cfg {negative is not None} {height}x{width}: "
                f"the LoRAs move the latents by {effect:.3f} (relative) and change {changed_pixels:.0%} of the pixels")
        pipe.scheduler = model_scheduler
        s = f.create_group("schedules")
        for name, config in CUSTOM_SCHEDULER_CONFIGS.items():
            sched = FlowMatchEulerDiscreteScheduler.from_config(config)
            sg = s.create_group(name)
            sg.attrs["config"] = json.dumps(config, sort_keys=True)
            for n in LORA_SCHED_STEPS:
                for seq in LORA_SCHED_SEQ_LENS:
                    mu, sigmas, timesteps = qwen_schedule(sched, n, seq)
                    if torch.isnan(sigmas).any():
                        fail(f"lora: schedule {name} N={n} S={seq} has NaN")
                    cg = sg.create_group(f"steps_{n}/seq_{seq}")
                    cg.attrs["mu"] = np.float64(mu)
                    put(cg, "sigmas", sigmas, np.float32)
                    put(cg, "timesteps", timesteps, np.float32)
    size = sum(p.stat().st_size for p in lora_dir.iterdir())
    log(f"lora: wrote {len(LORA_CASES)} cases, {len(CUSTOM_SCHEDULER_CONFIGS)} schedulers and {len(files)} LoRA files "
        f"({size / 1e3:.0f} kB)")


# ------------------------------------------------------------------------------------------
# Stage: image_processor (the Edit pipelines' image side: Pillow resamplers, sizes, processors)

def resample_source(width, height, seed):
    """Seeded noise over a gradient, with a 0/255 checker in green so ringing reaches the clip."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, size=(height, width, 3), dtype=np.int64)
    y, x = np.mgrid[0:height, 0:width]
    gradient = x * 255 // max(width - 1, 1) // 2 + y * 255 // max(height - 1, 1) // 2
    checker = ((x // 3 + y // 2) % 2) * 255
    img = np.stack([(noise[..., 0] + gradient) // 2, (noise[..., 1] // 4 + checker * 3 // 4), noise[..., 2]], axis=-1)
    return np.clip(img, 0, 255).astype(np.uint8)


def pattern_image(width, height):
    """A large source too big to store: integer arithmetic the C++ test repeats exactly."""
    y, x = np.mgrid[0:height, 0:width].astype(np.int64)
    c = np.arange(3, dtype=np.int64)
    x, y = x[..., None], y[..., None]
    return (((x * 7 + y * 3 + c * 85) ^ ((x * y * 31 + c * 17) >> 3)) & 255).astype(np.uint8)


def sha256_hex(array):
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# The published processor config of Qwen-Image-Edit (processor/preprocessor_config.json).
EDIT_PREPROCESSOR_CONFIG = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
}


def stage_image_processor(out):
    import PIL
    from PIL import Image
    from diffusers.image_processor import VaeImageProcessor
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as edit_plus
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    sources = {  # name: (width, height, seed)
        "noise_37x23": (37, 23, 11), "noise_64x48": (64, 48, 12), "wide_301x5": (301, 5, 13),
        "tall_1x17": (1, 17, 14), "tiny_3x2": (3, 2, 15), "odd_101x67": (101, 67, 16), "dot_1x1": (1, 1, 17),
    }
    images = {name: resample_source(w, h, seed) for name, (w, h, seed) in sources.items()}
    resizes = [  # (source, width, height): copies, one axis only, up, down, mixed, to one pixel
        ("noise_37x23", 37, 23), ("noise_37x23", 74, 46), ("noise_37x23", 111, 69), ("noise_37x23", 18, 11),
        ("noise_37x23", 9, 5), ("noise_37x23", 12, 23), ("noise_37x23", 37, 50), ("noise_37x23", 29, 31),
        ("noise_37x23", 5, 3), ("noise_37x23", 1, 1), ("noise_64x48", 16, 12), ("noise_64x48", 21, 16),
        ("noise_64x48", 64, 7), ("noise_64x48", 100, 75), ("wide_301x5", 60, 1), ("wide_301x5", 301, 20),
        ("wide_301x5", 7, 5), ("wide_301x5", 30, 30), ("tall_1x17", 1, 40), ("tall_1x17", 3, 17),
        ("tall_1x17", 5, 5), ("tall_1x17", 1, 4), ("tiny_3x2", 60, 41), ("tiny_3x2", 7, 5),
        ("odd_101x67", 67, 101), ("odd_101x67", 33, 22), ("odd_101x67", 120, 80), ("dot_1x1", 4, 3),
        # Pillow 13 runs the vertical pass first when the height shrinks by more than twice as
        # many pixels as the width: wider and shorter, both smaller, and either side of the edge.
        ("odd_101x67", 112, 56), ("noise_64x48", 60, 20), ("noise_64x48", 50, 30), ("odd_101x67", 95, 55),
        ("odd_101x67", 95, 54), ("wide_301x5", 400, 2),
    ]
    filters = {"bicubic": Image.Resampling.BICUBIC, "lanczos": Image.Resampling.LANCZOS}
    with h5_create(out / "image_processor.h5", "the Edit pipelines' image side: Pillow BICUBIC/LANCZOS resize, "
                   "calculate_dimensions, smart_resize, Qwen2VLImageProcessorPil, VaeImageProcessor.preprocess") as f:
        f.attrs["pillow_version"] = PIL.__version__
        g = f.create_group("sources")
        for name, img in images.items():
            put(g, name, img, np.uint8)  # [h, w, 3]

        g = f.create_group("resize")
        for i, (src, w, h) in enumerate(resizes):
            for fname, filt in filters.items():
                c = g.create_group(f"{i:02d}_{fname}")
                c.attrs["source"], c.attrs["filter"] = src, fname
                c.attrs["width"], c.attrs["height"] = np.int64(w), np.int64(h)
                result = np.asarray(Image.fromarray(images[src], "RGB").resize((w, h), filt))
                put(c, "image", result, np.uint8)  # [h, w, 3]

        # calculate_dimensions of both pipeline modules: ratios of real image sizes, common
        # aspects, and ratios whose width lands on a tie (x.5 multiples of 32) at power-of-2 areas.
        areas = [1024 * 1024, 384 * 384, 48 * 48, 80 * 80, 1000, 512 * 512]
        ratios = [w / h for w, h in [(1, 1), (4, 3), (3, 4), (16, 9), (9, 16), (2, 1), (1, 2), (21, 9), (1, 17),
                                     (301, 5), (5, 301), (37, 23), (101, 67), (1400, 900), (1, 3), (7, 1)]]
        ratios += [math.pi, math.e, 0.1234567, 1.0000001]
        ratios += [(32 * k + 16) ** 2 / (1024 * 1024) for k in range(10, 60, 3)]
        ratios += [(32 * k + 16) ** 2 / (512 * 512) for k in range(2, 40, 5)]
        widths = np.zeros((2, len(areas), len(ratios)), np.int64)
        heights = np.zeros_like(widths)
        ties = 0
        for a, area in enumerate(areas):
            for r, ratio in enumerate(ratios):
                w1, h1, _ = edit.calculate_dimensions(area, ratio)
                w2, h2 = edit_plus.calculate_dimensions(area, ratio)
                widths[:, a, r], heights[:, a, r] = (w1, w2), (h1, h2)
                width = math.sqrt(area * ratio)
                ties += (width / 32) % 1 == 0.5 or (width / ratio / 32) % 1 == 0.5
        if ties < 10:
            fail(f"calculate_dimensions: only {ties} ties to even among the cases")
        g = f.create_group("calculate_dimensions")
        g.attrs["target_areas"] = np.array(areas, np.int64)
        g.attrs["ratios"] = np.array(ratios, np.float64)
        g.attrs["ties"] = np.int64(ties)
        put(g, "width", widths, np.int64)  # [module (edit, edit_plus), area, ratio]
        put(g, "height", heights, np.int64)

        # smart_resize: sizes around the multiples (ties at 14 mod 28), tiny, huge, extreme aspect.
        budgets = [(28, 56 * 56, 28 * 28 * 1280), (28, 3136, 12845056), (32, 65536, 16777216), (28, 3136, 3136 * 4)]
        sizes = [(h, w) for h in (1, 13, 14, 15, 28, 42, 70, 98, 100, 385, 1000, 1024, 1036, 4000)
                 for w in (1, 14, 27, 42, 56, 200, 384, 1023, 1024, 2001, 5000)]
        sizes += [(1, 200), (200, 1), (3, 600), (5, 301), (4000, 3000), (8000, 6000), (1400, 900), (48, 80)]
        sizes = [(h, w) for h, w in sizes if max(h, w) / min(h, w) <= 200]
        raising = [(1, 201), (201, 1), (3, 601), (1000, 4), (2, 1000)]
        for h, w in raising:
            try:
                smart_resize(h, w)
                fail(f"smart_resize({h}, {w}) did not raise")
            except ValueError:
                pass
        resized = np.array([[smart_resize(h, w, factor=fa, min_pixels=mn, max_pixels=mx) for h, w in sizes]
                            for fa, mn, mx in budgets], np.int64)
        g = f.create_group("smart_resize")
        g.attrs["budgets"] = np.array(budgets, np.int64).reshape(-1)  # (factor, min_pixels, max_pixels) each
        put(g, "sizes", np.array(sizes, np.int64), np.int64)  # [n, (height, width)]
        put(g, "resized", resized, np.int64)  # [budget, n, (height, width)]
        put(g, "raising", np.array(raising, np.int64), np.int64)  # [n, (height, width)]: aspect > 200

        # Qwen2VLImageProcessorPil with the class defaults and with Qwen-Image-Edit's config.
        configs = {"class_default": {}, "qwen_image_edit": EDIT_PREPROCESSOR_CONFIG}
        inputs = {"noise_64x48": images["noise_64x48"],  # round to 56x56
                  "noise_37x23": images["noise_37x23"],  # under min_pixels: scaled up
                  "tall_1x17": images["tall_1x17"], "wide_301x5": images["wide_301x5"],
                  "odd_101x67": images["odd_101x67"],
                  "pattern_1400x900": pattern_image(1400, 900)}  # past the class default's max_pixels
        g = f.create_group("qwen2vl")
        for cname, config in configs.items():
            processor = Qwen2VLImageProcessorPil.from_dict(dict(config))
            cg = g.create_group(cname)
            cg.attrs["preprocessor_config"] = json.dumps(config)
            cg.attrs["min_pixels"] = np.int64(processor.size["shortest_edge"])
            cg.attrs["max_pixels"] = np.int64(processor.size["longest_edge"])
            for iname, img in inputs.items():
                result = processor(images=Image.fromarray(img, "RGB"), return_tensors="np")
                pixel_values = np.asarray(result["pixel_values"])
                if pixel_values.dtype != np.float32:
                    fail(f"qwen2vl {cname}/{iname}: pixel_values are {pixel_values.dtype}")
                c = cg.create_group(iname)
                c.attrs["pixel_values_shape"] = np.array(pixel_values.shape, np.int64)
                c.attrs["pixel_values_sha256"] = sha256_hex(pixel_values)
                put(c, "image_grid_thw", np.asarray(result["image_grid_thw"]), np.int64)  # [1, 3]
                if cname == "class_default" and pixel_values.nbytes <= 120_000:
                    put(c, "pixel_values", pixel_values, np.float32)  # [Np, 1176]
                else:  # a sample of rows (the same images as above, or too large); the hash holds all
                    rows = np.unique([0, len(pixel_values) // 2, len(pixel_values) - 1])
                    put(c, "sample_rows", rows, np.int64)
                    put(c, "pixel_values_sample", pixel_values[rows], np.float32)

        # VaeImageProcessor.preprocess (the pipelines' vae_scale_factor * 2 = 16): an image at its
        # size (the resize a copy), and one the preprocess itself resizes (Lanczos).
        ip = VaeImageProcessor(vae_scale_factor=16)
        g = f.create_group("vae_preprocess")
        for name, src, h, w in [("noise_64x48_same", "noise_64x48", 48, 64), ("odd_101x67_to_48x32", "odd_101x67", 32, 48)]:
            c = g.create_group(name)
            c.attrs["source"], c.attrs["width"], c.attrs["height"] = src, np.int64(w), np.int64(h)
            put(c, "pixels", ip.preprocess(Image.fromarray(images[src], "RGB"), h, w)[0], np.float32)  # [3, h, w]

        # The pipelines' step 3 on whole images, as their __call__ writes it (hashes: 1 MP outputs).
        g = f.create_group("edit_inputs")
        for name, img in [("odd_101x67", images["odd_101x67"]), ("tall_1x17", images["tall_1x17"]),
                          ("pattern_1400x900", pattern_image(1400, 900))]:
            pil = Image.fromarray(img, "RGB")
            image_width, image_height = pil.size
            c = g.create_group(name)
            # QwenImageEditPipeline
            cw, ch, _ = edit.calculate_dimensions(1024 * 1024, image_width / image_height)
            prompt_image = ip.resize(pil, ch, cw)
            vae = ip.preprocess(prompt_image, ch, cw)
            c.attrs["edit_size"] = np.array([cw, ch], np.int64)
            c.attrs["edit_vl_image_sha256"] = sha256_hex(np.asarray(prompt_image))
            c.attrs["edit_vae_pixels_sha256"] = sha256_hex(vae.numpy())
            # QwenImageEditPlusPipeline
            cw, ch = edit_plus.calculate_dimensions(edit_plus.CONDITION_IMAGE_SIZE, image_width / image_height)
            vw, vh = edit_plus.calculate_dimensions(edit_plus.VAE_IMAGE_SIZE, image_width / image_height)
            c.attrs["plus_vl_size"] = np.array([cw, ch], np.int64)
            c.attrs["plus_vae_size"] = np.array([vw, vh], np.int64)
            c.attrs["plus_vl_image_sha256"] = sha256_hex(np.asarray(ip.resize(pil, ch, cw)))
            c.attrs["plus_vae_pixels_sha256"] = sha256_hex(ip.preprocess(pil, vh, vw).numpy())


# ------------------------------------------------------------------------------------------
# Verification: regenerate into a temp dir and compare every dataset and attribute.

def compare_h5(a_path, b_path):
    diffs = []
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        def walk(name, obj):
            if name not in b:
                diffs.append(f"{name}: missing in the new file")
                return
            other = b[name]
            skip = {"torch_num_threads"}
            for k in obj.attrs:
                if k in skip:
                    continue
                va, vb = obj.attrs[k], other.attrs.get(k)
                if not np.array_equal(np.asarray(va), np.asarray(vb)):
                    diffs.append(f"{name}@{k}: {va!r} != {vb!r}")
            if isinstance(obj, h5py.Dataset):
                x, y = obj[()], other[()]
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    diffs.append(f"{name}: data differs")
        a.visititems(walk)
        for k in a.attrs:  # root attributes (visititems skips the root)
            if k != "torch_num_threads" and not np.array_equal(np.asarray(a.attrs[k]), np.asarray(b.attrs.get(k))):
                diffs.append(f"/@{k}: {a.attrs[k]!r} != {b.attrs.get(k)!r}")

        def walk_b(name, obj):
            if name not in a:
                diffs.append(f"{name}: only in the new file")
        b.visititems(walk_b)
    return diffs


def verify(out, stages):
    with tempfile.TemporaryDirectory(prefix="goldens_verify_") as td:
        tmp = Path(td)
        needs_tiny = ("text_encoder", "transformer", "vae", "pipeline", "lora", "vae_encoder")
        if any(s in stages for s in needs_tiny) and "tiny" not in stages:
            stages = ["tiny"] + stages
        run_stages(tmp, stages)
        bad = 0
        for p in sorted(tmp.glob("*.h5")):
            ref = out / p.name
            if not ref.exists():
                log(f"verify: {ref} does not exist")
                bad += 1
                continue
            d = compare_h5(ref, p)
            same_bytes = ref.read_bytes() == p.read_bytes()
            log(f"verify: {p.name}: {'identical datasets' if not d else f'{len(d)} differences'}"
                f"{', byte-identical file' if same_bytes else ''}")
            for x in d[:20]:
                log("    " + x)
            bad += bool(d)
        for folder in ("tiny-pipeline", "tiny-pipeline-21"):
            tp = tmp / folder
            if tp.exists():
                for p in sorted(x for x in tp.rglob("*") if x.is_file()):
                    ref = out / folder / p.relative_to(tp)
                    if not ref.exists() or ref.read_bytes() != p.read_bytes():
                        log(f"verify: {folder}/{p.relative_to(tp)} differs")
                        bad += 1
                log(f"verify: {folder} compared file by file")
        for p in sorted((tmp / "lora").glob("*")) if (tmp / "lora").exists() else []:
            ref = out / "lora" / p.name
            if not ref.exists() or ref.read_bytes() != p.read_bytes():
                log(f"verify: lora/{p.name} differs")
                bad += 1
        if bad:
            fail(f"verify: {bad} files differ from the committed goldens")
        log("verify: OK, regenerated goldens match the committed ones")


def run_stages(out, stages):
    out.mkdir(parents=True, exist_ok=True)
    fns = {
        "tokenizer": stage_tokenizer, "scheduler": stage_scheduler, "noise": stage_noise, "tiny": stage_tiny,
        "text_encoder": stage_text_encoder, "transformer": stage_transformer, "vae": stage_vae,
        "pipeline": stage_pipeline, "lora": stage_lora, "text_encoder_21": stage_text_encoder_21,
        "scheduler_21": stage_scheduler_21, "transformer_21": stage_transformer_21,
        "vae_21": stage_vae_21, "pipeline_21": stage_pipeline_21, "tiny_21": stage_tiny_21,
        "input_images": lambda out: golden_input_images.stage_input_images(out, h5_create, put, put_text, log),
        "image_processor": stage_image_processor,
        "pipeline_edit": lambda out: golden_pipeline_edit.stage_pipeline_edit(out, load_tiny, h5_create, put, put_text,
                                                                             log, LIGHTNING_SCHEDULER_CONFIG),
        "vae_encoder": stage_vae_encoder,
        "vision": stage_vision,
        "transformer_edit": stage_transformer_edit,
        "text_encoder_edit": stage_text_encoder_edit,
    }
    for s in STAGES:
        if s in stages:
            t0 = time.time()
            torch.manual_seed(0)  # nothing should draw from the global generator; pin it anyway
            fns[s](out)
            log(f"stage {s} done in {time.time() - t0:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "golden"), help="output directory")
    ap.add_argument("--only", default="", help="comma-separated stages: " + ",".join(STAGES))
    ap.add_argument("--verify", action="store_true",
                    help="regenerate into a temp dir and compare with the files in --out (no writes)")
    ap.add_argument("--allow-other-versions", action="store_true",
                    help="do not stop when the installed versions differ from the pins")
    args = ap.parse_args()
    stages = [s.strip() for s in args.only.split(",") if s.strip()] or list(STAGES)
    unknown = set(stages) - set(STAGES)
    if unknown:
        ap.error(f"unknown stages {sorted(unknown)}; choose from {STAGES}")
    installed = {"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                 "transformers": transformers.__version__, "numpy": np.__version__,
                 "tokenizers": tokenizers.__version__, "h5py": h5py.__version__, "peft": peft.__version__}
    off = {k: v for k, v in installed.items() if v != PINNED[k]}
    if off and not args.allow_other_versions:
        fail(f"installed versions differ from the pins {PINNED}: {off} (run tools/golden/setup.sh)")
    log(f"versions {installed}, cpu capability {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}")
    out = Path(args.out)
    if args.verify:
        verify(out, stages)
    else:
        run_stages(out, stages)


if __name__ == "__main__":
    main()
