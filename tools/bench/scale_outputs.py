#!/usr/bin/env python3
"""Makes OUT look like a finished generate run of N prompts, without running the model: N real
PNG files and OUT/manifest.jsonl with one line per image in ditbatch's own format. Each line is
a copy of TEMPLATE (the manifest line of a real one-image run, so every field, the model
checksum, LoRAs and scheduler are what generate writes), given image i's index, prompt, seed,
file name, sha256 and stat. The PNGs are one real image's bytes, written N times (a rerun reads
none of them; a million 1024x1024 ones would be 1.5 TB).

usage: scale_outputs.py OUT N PROMPTS_TXT TEMPLATE_LINE_JSON PNG [SEED]"""
import json
import os
import re
import sys


def slugify(text):  # pipeline/job.cpp's slugify: ASCII letters and digits, '-' between, 48 at most
    slug = ""
    for ch in text:
        if ch.isascii() and ch.isalnum():
            slug += ch.lower()
        elif slug and slug[-1] != "-":
            slug += "-"
        if len(slug) >= 48:
            break
    return slug.rstrip("-") or "image"


def main():
    out, n, prompts_path, template_path, png_path = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    n = int(n)
    template = json.loads(open(template_path).read())
    png = open(png_path, "rb").read()
    import hashlib
    digest = hashlib.sha256(png).hexdigest()
    prompts = [line.rstrip("\n") for line in open(prompts_path, encoding="utf-8")]
    assert len(prompts) >= n, f"{prompts_path} has {len(prompts)} prompts, fewer than {n}"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "manifest.jsonl.tmp"), "w", encoding="utf-8") as manifest:
        for i in range(n):
            name = f"{i:06d}-{slugify(prompts[i])}.png"
            path = os.path.join(out, name)
            with open(path, "wb") as f:
                f.write(png)
            st = os.stat(path)
            line = dict(template)
            line.update(index=i, prompt=prompts[i], seed=seed + i, file=name, sha256=digest,
                        file_stat={"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
                                   "device": st.st_dev})
            # generate writes keys sorted (nlohmann's objects) and no spaces
            manifest.write(json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.rename(os.path.join(out, "manifest.jsonl.tmp"), os.path.join(out, "manifest.jsonl"))


if __name__ == "__main__":
    main()
