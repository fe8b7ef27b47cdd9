#!/usr/bin/env python3
"""Checks a generate output folder: every PNG complete (chunk CRCs, IEND), the manifest holds
each index exactly once with status ok and the PNG's sha256, and (optionally) the PNGs are
byte-identical to a reference folder. PNGs are found in the folder and its subfolders (--layout
sharded), named by their path inside it. Standard library only. Exit 0 = good, 1 = a problem."""
import hashlib
import json
import struct
import sys
import zlib
from pathlib import Path


def png_complete(path):
    return png_bytes_complete(path.read_bytes())


def png_bytes_complete(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return False
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            return False
        crc = struct.unpack(">I", data[end - 4:end])[0]
        if zlib.crc32(data[pos + 4:end - 4]) & 0xFFFFFFFF != crc:
            return False
        if kind == b"IEND":
            return end == len(data)
        pos = end
    return False


def main():
    out = Path(sys.argv[1])
    expected = int(sys.argv[2])
    reference = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    problems = []
    pngs = sorted(p.relative_to(out) for p in out.rglob("*.png"))
    for p in pngs:
        if not png_complete(out / p):
            problems.append(f"{p}: incomplete PNG")
    if len(pngs) != expected:
        problems.append(f"{len(pngs)} PNGs, expected {expected}")
    lines = [json.loads(l) for l in (out / "manifest.jsonl").read_text().splitlines()]
    indices = [l["index"] for l in lines]
    if len(indices) != len(set(indices)):
        problems.append(f"duplicate manifest indices: {indices}")
    ok = [l for l in lines if l["status"] == "ok"]
    if len(ok) != expected:
        problems.append(f"{len(ok)} ok manifest lines, expected {expected}")
    for l in ok:
        f = out / l["file"]
        if not f.exists():
            problems.append(f"manifest names missing {l['file']}")
        elif hashlib.sha256(f.read_bytes()).hexdigest() != l["sha256"]:
            problems.append(f"{l['file']}: sha256 differs from the manifest")
    if reference is not None:
        ref = sorted(p.relative_to(reference) for p in reference.rglob("*.png"))
        if ref != pngs:
            problems.append(f"file names differ from {reference}")
        for name in ref:
            if (out / name).exists() and (out / name).read_bytes() != (reference / name).read_bytes():
                problems.append(f"{name}: bytes differ from {reference / name}")
    for p in problems:
        print("check_outputs:", p)
    print(f"check_outputs: {out}: {len(pngs)} PNGs, {len(lines)} manifest lines, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
