#!/usr/bin/env python3
"""Checks a `generate --output-format webdataset` folder with Python's own tarfile: the tars
NNNNN.tar of K consecutive samples each (K = --images-per-tar), every sample KEY.png then
KEY.json in index order (KEY = the index in nine digits), regular files with mode 0644, owner 0
and mtime 0; each PNG whole and of the sha256 its .json records, each .json the image's record;
manifest.jsonl naming each image's tar, member and the member's offset and size; no staged file
left. With a reference folder (a flat-layout run of the same prompts), each PNG is that run's
image byte for byte. With the `webdataset` package installed, the tars are also read as a
WebDataset. Standard library only otherwise. Exit 0 = good, 1 = a problem.

usage: check_tars.py OUT N K [REFERENCE_DIR]"""
import hashlib
import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mpi"))
from check_outputs import png_bytes_complete  # noqa: E402


def main():
    out, n, k = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    reference = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    problems = []
    expected_tars = [f"{t:05d}.tar" for t in range((n + k - 1) // k)]
    tars = sorted(p.name for p in out.glob("*.tar"))
    if tars != expected_tars:
        problems.append(f"tars {tars}, expected {expected_tars}")
    lines = {}
    for line in (out / "manifest.jsonl").read_text().splitlines():
        record = json.loads(line)
        lines[record["index"]] = record
    if sorted(lines) != list(range(n)):
        problems.append(f"manifest indices {sorted(lines)}, expected 0..{n - 1}")
    ref_files = {}
    if reference is not None:
        for line in (reference / "manifest.jsonl").read_text().splitlines():
            record = json.loads(line)
            ref_files[record["index"]] = reference / record["file"]
    samples = 0
    for t, name in enumerate(expected_tars):
        path = out / name
        if not path.exists():
            continue
        raw = path.read_bytes()
        with tarfile.open(path) as tar:
            members = tar.getmembers()
            want = [f"{i:09d}.{ext}" for i in range(t * k, min(n, (t + 1) * k)) for ext in ("png", "json")]
            if [m.name for m in members] != want:
                problems.append(f"{name}: members {[m.name for m in members]}, expected {want}")
                continue
            for m in members:
                if not m.isreg() or m.mode != 0o644 or m.mtime != 0 or m.uid != 0 or m.gid != 0:
                    problems.append(f"{name}:{m.name}: not a regular file of mode 644, owner 0, mtime 0")
            for png_member, json_member in zip(members[::2], members[1::2]):
                i = int(png_member.name[:9])
                png = tar.extractfile(png_member).read()
                record = json.loads(tar.extractfile(json_member).read())
                samples += 1
                if not png_bytes_complete(png):
                    problems.append(f"{name}:{png_member.name}: not a whole PNG")
                if record.get("index") != i or record.get("status") != "ok":
                    problems.append(f"{name}:{json_member.name}: index {record.get('index')}, status {record.get('status')}")
                if record.get("sha256") != hashlib.sha256(png).hexdigest():
                    problems.append(f"{name}:{png_member.name}: its sha256 is not the one its .json records")
                if "file" in record or "file_stat" in record:
                    problems.append(f"{name}:{json_member.name}: holds where a staged file lay")
                if i in ref_files and ref_files[i].read_bytes() != png:
                    problems.append(f"{name}:{png_member.name}: differs from {ref_files[i]}")
                line = lines.get(i, {})
                placed = (line.get("file"), line.get("member"), line.get("member_offset"), line.get("member_size"))
                if placed != (name, png_member.name, png_member.offset_data, png_member.size):
                    problems.append(f"image {i}: the manifest places it at {placed}, the tar at "
                                    f"{(name, png_member.name, png_member.offset_data, png_member.size)}")
                off = png_member.offset_data
                if raw[off:off + png_member.size] != png:
                    problems.append(f"image {i}: the bytes at its listed offset are not its PNG")
                if line.get("sha256") != record.get("sha256") or line.get("prompt") != record.get("prompt"):
                    problems.append(f"image {i}: the manifest line and the .json disagree")
    if samples != n:
        problems.append(f"{samples} samples in the tars, expected {n}")
    staged = [str(p.relative_to(out)) for p in out.iterdir() if p.is_dir() and p.name.isdigit()]
    if staged:
        problems.append(f"staged folders left: {staged}")
    try:
        import webdataset  # noqa: F401
    except ImportError:
        print("check_tars: the webdataset package is not installed: read with tarfile only")
    else:
        dataset = webdataset.WebDataset([str(out / t) for t in expected_tars], shardshuffle=False)
        keys = [sample["__key__"] for sample in dataset]
        if keys != [f"{i:09d}" for i in range(n)]:
            problems.append(f"webdataset reads keys {keys}")
        print(f"check_tars: webdataset {webdataset.__version__} reads {len(keys)} samples")
    for p in problems:
        print("check_tars:", p)
    print(f"check_tars: {out}: {len(tars)} tars, {samples} samples, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
