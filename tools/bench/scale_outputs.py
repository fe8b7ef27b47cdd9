#!/usr/bin/env python3
"""Makes OUT look like a finished generate run of N prompts, without running the model: N real
PNG files and OUT/manifest.jsonl with one line per image in ditbatch's own format. Each line is
a copy of TEMPLATE (the manifest line of a real one-image run, so every field, the model
checksum, LoRAs and scheduler are what generate writes), given image i's index, prompt, seed,
file name, sha256 and stat. The PNGs are one real image's bytes, written N times (a rerun reads
none of them; a million 1024x1024 ones would be 1.5 TB).

With IMAGES_PER_TAR (a TEMPLATE of --output-format webdataset: its packed line), the folder is
a WebDataset one instead: tars NNNNN.tar of IMAGES_PER_TAR consecutive samples, each sample
<index:09d>.png and <index:09d>.json (the line less "file" and "file_stat", as generate writes
it), ustar members of mode 0644, owner 0, mtime 0 at the offsets libarchive gives them (Python
formats a few header fields otherwise, and pads the end to 10 KiB); each line names its tar, the
tar's stat and where both members lie in it.

usage: scale_outputs.py OUT N PROMPTS_TXT TEMPLATE_LINE_JSON PNG [SEED [IMAGES_PER_TAR]]"""
import hashlib
import io
import json
import os
import sys
import tarfile


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


def stat_record(path):
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "device": st.st_dev}


def dumps(record):  # generate writes keys sorted (nlohmann's objects) and no spaces
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def add_member(tar, name, data):
    """Appends a member as libarchive writes it; returns where its data starts in the archive."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = len(data), 0o644, 0, 0, 0, "", ""
    header_at = tar.offset
    tar.addfile(info, io.BytesIO(data))
    return header_at + tarfile.BLOCKSIZE  # (a ustar header of a short name is one block)


def main():
    out, n, prompts_path, template_path, png_path = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    images_per_tar = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    n = int(n)
    template = json.loads(open(template_path).read())
    png = open(png_path, "rb").read()
    digest = hashlib.sha256(png).hexdigest()
    prompts = [line.rstrip("\n") for line in open(prompts_path, encoding="utf-8")]
    assert len(prompts) >= n, f"{prompts_path} has {len(prompts)} prompts, fewer than {n}"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "manifest.jsonl.tmp"), "w", encoding="utf-8") as manifest:
        if not images_per_tar:
            for i in range(n):
                name = f"{i:06d}-{slugify(prompts[i])}.png"
                path = os.path.join(out, name)
                with open(path, "wb") as f:
                    f.write(png)
                line = dict(template)
                line.update(index=i, prompt=prompts[i], seed=seed + i, file=name, sha256=digest,
                            file_stat=stat_record(path))
                manifest.write(dumps(line) + "\n")
        for begin in range(0, n if images_per_tar else 0, images_per_tar or 1):
            tar_name = f"{begin // images_per_tar:05d}.tar"
            lines = []
            with tarfile.open(os.path.join(out, tar_name), "w", format=tarfile.USTAR_FORMAT) as tar:
                for i in range(begin, min(n, begin + images_per_tar)):
                    line = dict(template)
                    line.update(index=i, prompt=prompts[i], seed=seed + i, sha256=digest)
                    sample = {k: v for k, v in line.items() if k not in ("file", "file_stat")}
                    for k in ("member", "member_offset", "member_size", "json_member", "json_member_offset",
                              "json_member_size", "json_file", "json_file_stat", "json_sha256"):
                        sample.pop(k, None)
                    record = dumps(sample).encode()
                    line.update(file=tar_name, member=f"{i:09d}.png", member_size=len(png),
                                member_offset=add_member(tar, f"{i:09d}.png", png), json_member=f"{i:09d}.json",
                                json_member_size=len(record),
                                json_member_offset=add_member(tar, f"{i:09d}.json", record),
                                json_sha256=hashlib.sha256(record).hexdigest())
                    line.pop("json_file", None)
                    line.pop("json_file_stat", None)
                    lines.append(line)
            tar_stat = stat_record(os.path.join(out, tar_name))
            for line in lines:
                line["file_stat"] = tar_stat
                manifest.write(dumps(line) + "\n")
    os.rename(os.path.join(out, "manifest.jsonl.tmp"), os.path.join(out, "manifest.jsonl"))


if __name__ == "__main__":
    main()
