#!/usr/bin/env python3
"""PSNR between the same-named 8-bit PNGs of two `ditbatch generate` folders (e.g. a CPU run and
a GPU run of the same prompts). Standard library only: the GPU machine has no PIL.

usage: compare_pngs.py REFERENCE_DIR OTHER_DIR [--min-db DB]
Prints one line per image and a last line "PSNR worst X dB over N of M images"; exit 0 when every
image of REFERENCE_DIR has a partner in OTHER_DIR of the same size and the worst PSNR is at
least --min-db (default 30), else 1."""
import math
import struct
import sys
import zlib
from pathlib import Path


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path):
    """(width, height, channels, bytes) of an 8-bit, non-interlaced gray/RGB/RGBA PNG."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, [], None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        raise ValueError(f"{path}: no IHDR")
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"{path}: only 8-bit non-interlaced gray/RGB/RGBA PNGs (depth {depth}, color {color})")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = bytearray(stride * height)
    prev = bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prev[i]
            up_left = prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + left) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + up) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif filt == 4:
                line[i] = (line[i] + paeth(left, up, up_left)) & 0xFF
            elif filt != 0:
                raise ValueError(f"{path}: bad filter {filt} in row {y}")
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return width, height, channels, bytes(out)


def psnr(a, b):
    mse = sum((x - y) * (x - y) for x, y in zip(a, b)) / len(a)
    return 99.0 if mse == 0 else 10.0 * math.log10(255.0 * 255.0 / mse)


def main(argv):
    args = [a for a in argv[1:]]
    min_db = 30.0
    if "--min-db" in args:
        i = args.index("--min-db")
        min_db = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    ref_dir, other_dir = Path(args[0]), Path(args[1])
    refs = sorted(ref_dir.glob("*.png"))
    if not refs:
        print(f"no PNGs in {ref_dir}")
        return 1
    worst, ok, compared = 99.0, True, 0
    for ref in refs:
        other = other_dir / ref.name
        if not other.exists():
            print(f"{ref.name}: missing in {other_dir}")
            ok = False
            continue
        wa, ha, ca, a = read_png(ref)
        wb, hb, cb, b = read_png(other)
        if (wa, ha, ca) != (wb, hb, cb):
            print(f"{ref.name}: {wa}x{ha}x{ca} against {wb}x{hb}x{cb}")
            ok = False
            continue
        db = psnr(a, b)
        worst = min(worst, db)
        compared += 1
        print(f"{ref.name}: {db:.2f} dB")
    ok = ok and compared > 0 and worst >= min_db
    if compared == 0:
        print(f"PSNR: none of the {len(refs)} images could be compared: FAIL")
    else:
        print(f"PSNR worst {worst:.2f} dB over {compared} of {len(refs)} images (at least {min_db:g} dB wanted): "
              f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
