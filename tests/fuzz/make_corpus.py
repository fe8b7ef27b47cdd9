#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ and the manifest fixture, from real files.

Usage: python3 tests/fuzz/make_corpus.py DITBATCH_BINARY

Seeds are the real files the parsers read, or subsets of them that stay valid: the tiny
diffusers pipeline of tests/data/golden (configs, safetensors headers and tensors, tokenizer
files), the example prompt files of jobs/examples, and a manifest.jsonl that `ditbatch
generate` writes for a tiny model (whose PNGs and latents become tests/fuzz/fixtures/manifest,
the folder the manifest target resumes in). Run it again when a format changes; then run the
fuzzers and minimise (tools/fuzz.sh, -merge=1). Only the standard library and ditbatch.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "golden", "tiny-pipeline")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
FIXTURES = os.path.join(ROOT, "tests", "fuzz", "fixtures")


INPUT_IMAGE_SEEDS = ["rgb8.png", "grey2.png", "la16.png", "palette4.png", "rgb8_interlaced.png", "rgb8_exif6.png",
                     "rgb8_raw_profile_exif5.png", "rgb8_xmp8.png", "q90_420.jpg", "progressive.jpg", "cmyk.jpg",
                     "grey.jpg", "exif5.jpg", "xmp6.jpg", "lossy.webp", "lossless_alpha.webp", "lossy_exif7.webp",
                     "animated.webp"]


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def seed(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def files(*named):
    """The multi-file input of fuzz_util.h: each file after a line '>>> NAME'."""
    return b"\n".join(b">>> " + name.encode() + b"\n" + data for name, data in named)


def safetensors_parts(path):
    raw = read(path)
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:], raw[:8 + n]


def safetensors_subset(path, budget):
    """A valid safetensors file holding the real tensors of `path` that fit in `budget` bytes."""
    header, data, _ = safetensors_parts(path)
    out_header = {"__metadata__": header.get("__metadata__", {"format": "pt"})}
    body = b""
    for name in sorted(k for k in header if k != "__metadata__"):
        begin, end = header[name]["data_offsets"]
        if len(body) + end - begin > budget:
            continue
        out_header[name] = dict(header[name], data_offsets=[len(body), len(body) + end - begin])
        body += data[begin:end]
    text = json.dumps(out_header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + body


def sharded_name(name):
    """The file of the same image under --layout sharded: "000001-x.png" -> "00000/000000001-x.png"."""
    stem, _, rest = name.partition("-")
    if stem.isdigit() and len(stem) == 6:
        name = f"{int(stem):09d}-{rest}"
    return f"{int(stem) // 10000 if stem.isdigit() else 0:05d}/{name}"


def sharded_manifest(manifest):
    """The fixture's manifest as a --layout sharded run lists it (the fuzz target lays the same
    PNGs and latents out in 00000/ too: their bytes do not depend on the layout)."""
    lines = []
    for line in manifest.splitlines():
        record = json.loads(line)
        for key in ("file", "latents_file"):
            if key in record:
                record[key] = sharded_name(record[key])
        record.pop("file_stat", None)  # another path, another inode: the rerun hashes them
        record.pop("latents_file_stat", None)
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)


DEEP_LEVELS = 30000  # past every parser's nesting limit, and deep enough to overflow a recursive one


def deep(levels=DEEP_LEVELS, open_="[", close="]"):
    return open_ * levels + close * levels


def deep_seeds():
    """An input per JSON target whose value nests DEEP_LEVELS deep (once a crash in every parser);
    tools/fuzz.sh's -max_len lets the fuzzers mutate inputs of that size."""
    header = json.dumps({"__metadata__": {"format": "pt"}})[:-2] + ', "x": ' + deep() + "}}"
    raw_header = struct.pack("<Q", len(header)) + header.encode()
    seed("safetensors", "deep-header.safetensors", raw_header)
    seed("safetensors_index", "deep.json", '{"metadata": {"total_size": 72}, "weight_map": ' + deep() + "}")
    for component in ("transformer", "vae", "text_encoder"):
        seed(f"model_config_{component}", "deep.bin",
             files(("config.json", ('{"num_layers": ' + deep() + "}").encode()), ("model.safetensors", raw_header)))
    seed("scheduler_config", "deep.json", '{"shift": ' + deep() + "}")
    seed("tokenizer", "deep.bin", files(("vocab.json", ('{"a": ' + deep() + "}").encode()),
                                        ("tokenizer_config.json", ('{"x": ' + deep() + "}").encode())))
    seed("tokenize", "deep.jsonl", '"a fox"\n' + deep() + "\n")
    seed("prompts_jsonl", "deep.jsonl", '{"prompt": "a fox"}\n{"seed": 1, "prompt": ' + deep() + "}\n")
    seed("run_report", "deep.bin", files(("manifest.jsonl", ('{"index": 0, "file": ' + deep() + "}\n").encode()),
                                         ("run.json", ('{"ranks": ' + deep(open_="{", close="}") + "}").encode())))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ditbatch = os.path.abspath(sys.argv[1])
    # Seeds are rewritten by name; other files (finding-*: inputs that once crashed a target) stay.
    components = {"transformer": "diffusion_pytorch_model.safetensors", "vae": "diffusion_pytorch_model.safetensors",
                  "text_encoder": "model.safetensors"}

    # safetensors: real tensors of each component (files that open), and a header alone (refused).
    for component, st in components.items():
        path = os.path.join(TINY, component, st)
        seed("safetensors", f"{component}-subset.safetensors", safetensors_subset(path, 12000))
        seed("safetensors", f"{component}-header-only.safetensors", safetensors_parts(path)[2])
    # safetensors_index: the weight_map of the target's two shards, as diffusers writes it.
    index = {"metadata": {"total_size": 72}, "weight_map": {
        "img_in.bias": "model-00001-of-00002.safetensors", "img_in.weight": "model-00001-of-00002.safetensors",
        "norm_out.linear.weight": "model-00001-of-00002.safetensors",
        "proj_out.bias": "model-00002-of-00002.safetensors", "proj_out.weight": "model-00002-of-00002.safetensors"}}
    seed("safetensors_index", "index.json", json.dumps(index, indent=2))

    # model_config_*: the real config.json and the real safetensors header of each component.
    for component, st in components.items():
        header = safetensors_parts(os.path.join(TINY, component, st))[2]
        seed(f"model_config_{component}", "tiny.bin",
             files(("config.json", read(os.path.join(TINY, component, "config.json"))), ("model.safetensors", header)))
    seed("scheduler_config", "scheduler_config.json", read(os.path.join(TINY, "scheduler", "scheduler_config.json")))

    # input_image: the golden input images of each format, mode and orientation source.
    images = os.path.join(ROOT, "tests", "data", "golden", "input_images")
    for name in INPUT_IMAGE_SEEDS:
        seed("input_image", "seed-" + name, read(os.path.join(images, name)))

    # tokenizer: the tiny folder's files, and the same vocabulary as one tokenizer.json.
    tok = os.path.join(TINY, "tokenizer")
    names = ["vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"]
    seed("tokenizer", "folder.bin", files(*[(n, read(os.path.join(tok, n))) for n in names]))
    vocab = json.loads(read(os.path.join(tok, "vocab.json")))
    added = json.loads(read(os.path.join(tok, "added_tokens.json")))
    merges = [l for l in read(os.path.join(tok, "merges.txt"), "r").split("\n") if l and not l.startswith("#version")]
    tokenizer_json = {"version": "1.0", "added_tokens": [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True} for c, i in added.items()],
        "model": {"type": "BPE", "vocab": vocab, "merges": [m.split(" ") for m in merges]}}
    seed("tokenizer", "tokenizer-json.bin", files(("tokenizer.json", json.dumps(tokenizer_json).encode())))

    # tokenize: stdin lines as users write them (strings and jsonl objects).
    lines = [json.dumps(json.loads(l)["prompt"]) for l in read(os.path.join(ROOT, "jobs", "examples", "prompts.jsonl"),
                                                                "r").splitlines() if l.strip()]
    lines += [json.dumps(t, ensure_ascii=False) for t in
              ["东京的夜景，霓虹灯倒映在雨后的街道上", "café au lait \u2615 \U0001F98A", "  leading spaces\tand tabs  ",
               "<|im_start|>user\nan added token<|im_end|>", "Line one\nline two\r\n", "x" * 300]]
    lines.append(read(os.path.join(ROOT, "jobs", "examples", "prompts.jsonl"), "r").splitlines()[0])
    seed("tokenize", "lines.jsonl", "\n".join(lines) + "\n")

    # prompt files: the examples, and the forms the readers accept (BOM, CRLF, comments, every field).
    seed("prompts_txt", "prompts.txt", read(os.path.join(ROOT, "jobs", "examples", "prompts.txt")))
    seed("prompts_txt", "crlf-bom.txt", b"\xef\xbb\xbf# comment\r\nA fox\r\n\r\n  # indented comment\r\n\xe7\x8b\x90\xe7\x8b\xb8\r\n")
    seed("prompts_jsonl", "prompts.jsonl", read(os.path.join(ROOT, "jobs", "examples", "prompts.jsonl")))
    seed("prompts_jsonl", "every-field.jsonl", json.dumps(
        {"prompt": "a fox", "negative_prompt": "blurry", "seed": 18446744073709551615, "width": 1664, "height": 928,
         "steps": 30, "cfg": 4.5, "name": "fox.png"}) + "\n" + json.dumps({"prompt": "null fields", "seed": None}) + "\n")

    # manifest: a real run of the tiny model (PNGs + latents), resumed by the fuzz target.
    fixture = os.path.join(FIXTURES, "manifest")
    shutil.rmtree(fixture, ignore_errors=True)
    os.makedirs(fixture)
    prompts = [{"prompt": "A red fox in the snow", "seed": 7}, {"prompt": "A lighthouse at dusk", "cfg": 1},
               {"prompt": "A bowl of ramen", "name": "ramen", "negative_prompt": "blurry"}]
    with open(os.path.join(fixture, "prompts.jsonl"), "w") as f:
        f.write("".join(json.dumps(p) + "\n" for p in prompts))
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "tiny.h5")
        out = os.path.join(tmp, "out")
        subprocess.run([ditbatch, "make-tiny", "--seed", "5", "--out", weights], check=True)
        subprocess.run([ditbatch, "generate", "--weights", weights, "--prompts", os.path.join(fixture, "prompts.jsonl"),
                        "--out", out, "--width", "64", "--height", "64", "--steps", "2", "--output-type", "latent"],
                       check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        manifest = read(os.path.join(out, "manifest.jsonl"), "r")
        for name in os.listdir(out):
            if name.endswith(".png") or name.endswith(".latents.h5"):
                shutil.copy(os.path.join(out, name), fixture)
    first = json.loads(manifest.splitlines()[0])
    with open(os.path.join(fixture, "model_checksum"), "w") as f:
        f.write(first["model_checksum"] + "\n")
    seed("manifest", "manifest.jsonl", manifest)
    seed("manifest", "torn-last-line.jsonl", manifest + manifest.splitlines()[0][:40])
    seed("manifest", "sharded.jsonl", sharded_manifest(manifest))
    seed("manifest", "deep-line.jsonl", manifest + '{"index": 1, "loras": ' + deep() + "}\n")
    deep_seeds()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(CORPUS) for f in fs)
    print(f"corpus: {total} bytes in {CORPUS}; fixture: {fixture}")


if __name__ == "__main__":
    main()
