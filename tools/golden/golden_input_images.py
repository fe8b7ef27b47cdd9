"""Stage input_images: image files of every kind an Edit prompt line may name, and the RGB image
diffusers' load_image (Pillow: open, ImageOps.exif_transpose, convert("RGB")) makes of each.

The files are written into tests/data/golden/input_images/ (the C++ decoder reads them) and the
pixels Pillow decodes into input_images.h5, one group per file: `rgb` [H, W, 3] uint8 and the
file name. PNG variants are written chunk by chunk, so that each stored form (bit depths,
palettes, tRNS, 16-bit samples past 255, eXIf, text-borne EXIF and XMP) is exactly what it says.
"""
import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

SEED = 3501


def textured(h, w, channels, seed, depth=8):
    """Noise over gradients and a hard edge: what resampling, IDCT and upsampling errors show in."""
    rng = np.random.default_rng(seed)
    top = (1 << depth) - 1
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * top // max(w - 1, 1) + c * top // 3) % (top + 1) for c in range(channels)], -1)
    base = base.astype(np.int64)
    base[: h // 2, : w // 3] = top - base[: h // 2, : w // 3]
    noise = rng.integers(-(top // 8), top // 8 + 1, size=(h, w, channels))
    return np.clip(base + noise, 0, top)


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(w, h, depth, color_type, rows, before_idat=b"", after_idat=b"", interlace=0):
    raw = b"".join(b"\0" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + before_idat + chunk(b"IDAT", zlib.compress(raw, 9)) +
            after_idat + chunk(b"IEND", b""))


def pack_rows(samples, depth):
    """[h, w*channels] integer samples -> PNG rows of that bit depth (big-endian, packed below 8)."""
    rows = []
    for row in samples:
        if depth == 16:
            rows.append(b"".join(struct.pack(">H", int(v)) for v in row))
        elif depth == 8:
            rows.append(bytes(int(v) for v in row))
        else:
            per = 8 // depth
            out = bytearray()
            for i in range(0, len(row), per):
                byte = 0
                for j in range(per):
                    v = int(row[i + j]) if i + j < len(row) else 0
                    byte |= v << (8 - depth * (j + 1))
                out.append(byte)
            rows.append(bytes(out))
    return rows


def tiff_orientation_block(orientation, big_endian=False):
    """A minimal EXIF block: a TIFF header and IFD0 with the Orientation tag (SHORT, count 1)."""
    e = ">" if big_endian else "<"
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", 8)
    # two entries: an unrelated tag first (ImageDescription would need data; use XResolution-free
    # Software? keep it SHORT-valued: ResolutionUnit 0x0128 = 2), then Orientation
    ifd = struct.pack(e + "H", 2)
    ifd += struct.pack(e + "HHI", 0x0128, 3, 1) + struct.pack(e + "HH", 2, 0)
    ifd += struct.pack(e + "HHI", 0x0112, 3, 1) + struct.pack(e + "HH", orientation, 0)
    ifd += struct.pack(e + "I", 0)
    return head + ifd


def png_cases():
    h, w = 7, 13
    cases = {}
    rgb = textured(h, w, 3, SEED)
    rgba = np.concatenate([rgb, textured(h, w, 1, SEED + 1)], -1)
    grey = textured(h, w, 1, SEED + 2)
    grey16 = textured(h, w, 1, SEED + 3, depth=16)
    grey16[0, :4, 0] = [0, 255, 256, 65535]  # around the I;16 clip
    cases["rgb8.png"] = png_bytes(w, h, 8, 2, pack_rows(rgb.reshape(h, -1), 8))
    cases["rgba8.png"] = png_bytes(w, h, 8, 6, pack_rows(rgba.reshape(h, -1), 8))
    cases["grey8.png"] = png_bytes(w, h, 8, 0, pack_rows(grey.reshape(h, -1), 8))
    cases["grey16.png"] = png_bytes(w, h, 16, 0, pack_rows(grey16.reshape(h, -1), 16))
    for depth in (1, 2, 4):
        g = textured(h, w, 1, SEED + 4 + depth, depth=depth)
        cases[f"grey{depth}.png"] = png_bytes(w, h, depth, 0, pack_rows(g.reshape(h, -1), depth))
    la = np.concatenate([grey, textured(h, w, 1, SEED + 9)], -1)
    cases["la8.png"] = png_bytes(w, h, 8, 4, pack_rows(la.reshape(h, -1), 8))
    la16 = np.concatenate([grey16, textured(h, w, 1, SEED + 10, depth=16)], -1)
    cases["la16.png"] = png_bytes(w, h, 16, 4, pack_rows(la16.reshape(h, -1), 16))
    cases["rgb16.png"] = png_bytes(w, h, 16, 2, pack_rows(textured(h, w, 3, SEED + 11, 16).reshape(h, -1), 16))
    cases["rgba16.png"] = png_bytes(w, h, 16, 6, pack_rows(textured(h, w, 4, SEED + 12, 16).reshape(h, -1), 16))
    rng = np.random.default_rng(SEED + 13)
    plte = bytes(rng.integers(0, 256, size=3 * 40).astype(np.uint8))
    index = rng.integers(0, 40, size=(h, w))
    trns = bytes([0, 128] + [255] * 10)
    cases["palette8_trns.png"] = png_bytes(w, h, 8, 3, pack_rows(index, 8), chunk(b"PLTE", plte) + chunk(b"tRNS", trns))
    cases["palette4.png"] = png_bytes(w, h, 4, 3, pack_rows(index % 16, 4), chunk(b"PLTE", plte[:48]))
    # indices past a 10-colour palette: Pillow shows them black
    cases["palette_past_plte.png"] = png_bytes(w, h, 8, 3, pack_rows(index, 8), chunk(b"PLTE", plte[:30]))
    cases["rgb8_interlaced.png"] = _pillow_png(Image.fromarray(rgb.astype(np.uint8)), interlace=True)
    cases["rgb8_exif6.png"] = png_bytes(w, h, 8, 2, pack_rows(rgb.reshape(h, -1), 8),
                                        chunk(b"eXIf", tiff_orientation_block(6, big_endian=True)))
    cases["rgb8_exif_after_idat3.png"] = png_bytes(w, h, 8, 2, pack_rows(rgb.reshape(h, -1), 8),
                                                   after_idat=chunk(b"eXIf", tiff_orientation_block(3)))
    block = tiff_orientation_block(5)
    raw_profile = f"\nexif\n{len(block):8}\n{block.hex()}\n".encode()
    cases["rgb8_raw_profile_exif5.png"] = png_bytes(w, h, 8, 2, pack_rows(rgb.reshape(h, -1), 8),
                                                    chunk(b"tEXt", b"Raw profile type exif\0" + raw_profile))
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'
    cases["rgb8_xmp8.png"] = png_bytes(w, h, 8, 2, pack_rows(rgb.reshape(h, -1), 8),
                                       chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp))
    return cases


def _pillow_png(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def _pillow_save(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def jpeg_cases():
    cases = {}
    h, w = 23, 37  # odd: partial MCUs, the edge of fancy upsampling
    rgb = Image.fromarray(textured(h, w, 3, SEED + 20).astype(np.uint8))
    cases["q90_420.jpg"] = _pillow_save(rgb, "JPEG", quality=90)
    cases["q75_422.jpg"] = _pillow_save(rgb, "JPEG", quality=75, subsampling=1)
    cases["q95_444.jpg"] = _pillow_save(rgb, "JPEG", quality=95, subsampling=0)
    cases["progressive.jpg"] = _pillow_save(rgb, "JPEG", quality=85, progressive=True)
    cases["grey.jpg"] = _pillow_save(rgb.convert("L"), "JPEG", quality=90)
    cmyk = Image.fromarray(textured(h, w, 4, SEED + 21).astype(np.uint8), "CMYK")
    cases["cmyk.jpg"] = _pillow_save(cmyk, "JPEG", quality=92)
    for orientation in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        cases[f"exif{orientation}.jpg"] = _pillow_save(rgb, "JPEG", quality=90, exif=exif.tobytes())
    xmp = b'<x:xmpmeta><tiff:Orientation>6</tiff:Orientation></x:xmpmeta>'
    cases["xmp6.jpg"] = _pillow_save(rgb, "JPEG", quality=90, xmp=xmp)
    return cases


def webp_cases():
    cases = {}
    h, w = 23, 37
    rgb = Image.fromarray(textured(h, w, 3, SEED + 30).astype(np.uint8))
    rgba = Image.fromarray(textured(h, w, 4, SEED + 31).astype(np.uint8), "RGBA")
    cases["lossy.webp"] = _pillow_save(rgb, "WEBP", quality=80, method=4)
    cases["lossless.webp"] = _pillow_save(rgb, "WEBP", lossless=True)
    cases["lossy_alpha.webp"] = _pillow_save(rgba, "WEBP", quality=80, method=4)
    cases["lossless_alpha.webp"] = _pillow_save(rgba, "WEBP", lossless=True, exact=True)
    exif = Image.Exif()
    exif[0x0112] = 7
    cases["lossy_exif7.webp"] = _pillow_save(rgb, "WEBP", quality=80, exif=exif.tobytes())
    second = Image.fromarray(textured(h, w, 3, SEED + 32).astype(np.uint8))
    cases["animated.webp"] = _pillow_save(rgb, "WEBP", save_all=True, append_images=[second], lossless=True, duration=100)
    return cases


def load_image_rgb(path):
    """diffusers.utils.load_image, the reference: open, exif_transpose, convert("RGB")."""
    from diffusers.utils import load_image
    return np.asarray(load_image(str(path)), dtype=np.uint8)


def stage_input_images(out, h5_create, put, put_text, log):
    folder = Path(out) / "input_images"
    folder.mkdir(parents=True, exist_ok=True)
    cases = {**png_cases(), **jpeg_cases(), **webp_cases()}
    with h5_create(Path(out) / "input_images.h5", "input images and diffusers load_image's RGB of each") as f:
        f.attrs["pillow_version"] = Image.__version__
        from PIL import features
        f.attrs["pillow_libjpeg_turbo_version"] = str(features.version("libjpeg_turbo"))
        f.attrs["pillow_webp_version"] = str(features.version("webp"))
        for name, data in sorted(cases.items()):
            (folder / name).write_bytes(data)
            rgb = load_image_rgb(folder / name)
            g = f.create_group(name)
            put(g, "rgb", rgb, np.uint8)
            put_text(g, "file", name)
    log(f"input_images: {len(cases)} files")
