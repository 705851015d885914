"""Image files -> network inputs: float32 (1, 28, 28) in [0, 1], the digit light on dark as in MNIST.

Accepted: one regular file holding one image (one frame) that Pillow reads, of at most
MAX_PIXELS pixels. Its EXIF orientation is applied, then its pixel values become grey levels:
  8-bit grey, colour, palette, bilevel     luminance / 255
  16-bit grey (PNG, TIFF: mode I;16; PGM:  value / (2^bits - 1), bits the depth of the data: the
    mode I, scaled to 16 bits by its       PNG's sBIT chunk when the values fit it, else the fewest
    maxval)                                bits, at least 8, that hold the largest value (12-bit
                                           scanner data 0..4095 -> / 4095, 8-bit data -> / 255)
  16-bit colour (PNG, TIFF), 16-bit grey   decoded again with both bytes (Pillow keeps the high one);
    with alpha (PNG)                       colour and alpha each by the depth of their data, as above
  32-bit float grey (float TIFF, mode F)   as it is; it must lie in [0, 1]
  32-bit integer grey (mode I, not PGM)    refused: it has no defined range
  transparency (an alpha channel, or a     composited onto white under dark ink and onto black
    transparent palette colour)              under light ink, so a digit drawn only in the
                                             alpha channel keeps its shape
An image whose pixels all hold the same value holds no digit and is refused. Then the image is
shrunk to fit 28x28 keeping its aspect ratio (Lanczos), centred on its median grey, and inverted
if mostly light (dark ink on paper). Anything else is a one-line DataError.
"""
from __future__ import annotations

import os
import struct
import sys
import warnings
from pathlib import Path

import numpy as np

from ._files import open_regular
from .errors import DataError
from .model import IMAGE_SHAPE

SIDE = IMAGE_SHAPE[-1]
MAX_PIXELS = 8192 * 8192          # a 48-megapixel photo of a digit fits; Pillow's own limit is 89 M
ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}
WIDE_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I",   # 16-bit grey (I: a PGM, scaled to 0..65535 by Pillow)
              "F"}                                     # float grey, in [0, 1]


def read_image(path) -> np.ndarray:
    """One image file -> float32 (1, 28, 28) in [0, 1], MNIST polarity (see the module docstring)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    with open_regular(path, DataError) as f:
        try:
            with warnings.catch_warnings():         # sizes past Pillow's warning are refused below
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                img = Image.open(f)
            if img.width * img.height > MAX_PIXELS:
                raise DataError(f"{path}: {img.width} x {img.height} pixels, more than the {MAX_PIXELS:,} accepted")
            if getattr(img, "n_frames", 1) > 1:
                raise DataError(f"{path}: holds {img.n_frames} frames; give one image per file")
            if img.mode == "I" and img.format != "PPM":     # Pillow reads 16-bit PGM as mode I, 0..65535
                raise DataError(f"{path}: a 32-bit integer image has no defined range; "
                                f"save it as 8- or 16-bit grey, or as float in [0, 1]")
            bits = significant_bits(f) if img.format == "PNG" else ()
            wide = wide_colour_levels(f, img, bits)
            grey = composite(*wide) if wide else grey_levels(ImageOps.exif_transpose(img), path, bits[:1])
        except DataError:
            raise
        except Image.DecompressionBombError:
            raise DataError(f"{path}: more than the {MAX_PIXELS:,} pixels accepted") from None
        except UnidentifiedImageError:
            raise DataError(f"{path}: not an image file Pillow can read") from None
        except (OSError, SyntaxError, ValueError) as exc:      # a damaged file, or a mode with no grey
            raise DataError(f"{path}: not a readable image ({' '.join(str(exc).split())})") from None
    if grey.max() == grey.min():
        raise DataError(f"{path}: every pixel has the same grey level; there is no digit to classify")
    pixels = fit(grey)
    return (1.0 - pixels if pixels.mean() > 0.5 else pixels)[None]


def significant_bits(f) -> tuple[int, ...]:
    """Each channel's significant bits from a PNG's sBIT chunk (it comes before the image data),
    or () if it has none."""
    f.seek(8)
    while len(head := f.read(8)) == 8:
        length, kind = struct.unpack(">I4s", head)
        if kind == b"IDAT":
            break
        if kind == b"sBIT":
            return tuple(f.read(min(length, 4)))
        f.seek(length + 4, os.SEEK_CUR)             # the chunk's data and CRC
    return ()


def by_depth(values: np.ndarray, significant: tuple[int, ...]) -> np.ndarray:
    """16-bit samples / (2^bits - 1), bits the depth of their data: the sBIT when the values fit
    it, else the fewest bits, at least 8, that hold the largest value."""
    top = int(values.max())
    bits = max(significant, default=0)
    if not (1 <= bits <= 16 and top < 2 ** bits):
        bits = max(8, top.bit_length())
    return values.astype(np.float32) / np.float32(2 ** bits - 1)


# 16-bit colour (PNG, TIFF) and grey+alpha (PNG), which Pillow cuts to each sample's high byte: the
# rawmode Pillow decodes them with, and one that decodes the same data to the low bytes (the other
# byte order; 16N, a compressed TIFF's samples in this machine's order) or, for grey+alpha, to both
# bytes of each sample
SWAPPED = "B" if sys.byteorder == "little" else "L"
OTHER_BYTE = {"RGB;16B": "RGB;16L", "RGB;16L": "RGB;16B", "RGBA;16B": "RGBA;16L", "RGBA;16L": "RGBA;16B",
              "RGB;16N": f"RGB;16{SWAPPED}", "RGBA;16N": f"RGBA;16{SWAPPED}", "LA;16B": "RGBA"}
LUMA = np.array([0.299, 0.587, 0.114], np.float32)      # ITU-R 601-2 luma, as Pillow's convert("L")
ORIENTATION = 0x0112                                      # the EXIF tag


def wide_colour_levels(f, img, significant: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(luminance, alpha) in [0, 1] of a 16-bit colour or grey+alpha image, decoded again with all
    16 bits, colour and alpha each scaled by the depth of its data, EXIF orientation applied; None
    for any other image."""
    from PIL import Image, ImageOps

    rawmodes = {t[3] if isinstance(t[3], str) else t[3][0] for t in img.tile}
    rawmode = rawmodes.pop() if len(rawmodes) == 1 and img.format in ("PNG", "TIFF") else None
    if rawmode not in OTHER_BYTE:
        return None

    def decode(raw: str) -> np.ndarray:
        f.seek(0)
        again = Image.open(f)
        again.tile = [with_args(t, raw if isinstance(t[3], str) else (raw, *t[3][1:])) for t in again.tile]
        return np.asarray(again)

    if rawmode == "LA;16B":
        both = decode("RGBA")
        samples = both[..., 0::2].astype(np.uint16) << 8 | both[..., 1::2]     # grey, alpha
    else:
        samples = decode(rawmode).astype(np.uint16) << 8 | decode(OTHER_BYTE[rawmode])
    colours = 1 if rawmode == "LA;16B" else 3
    colour = by_depth(samples[..., :colours], significant[:colours])
    lum = colour[..., 0] if colours == 1 else colour @ LUMA
    if samples.shape[-1] > colours:
        alpha = by_depth(samples[..., colours], significant[colours:])
    elif "transparency" in img.info:                                      # tRNS: one transparent colour
        alpha = np.any(samples != np.asarray(img.info["transparency"]), -1).astype(np.float32)
    else:
        alpha = np.ones_like(lum)
    turn = Image.Exif()
    turn[ORIENTATION] = img.getexif().get(ORIENTATION, 1)                  # from its EXIF or XMP

    def oriented(levels: np.ndarray) -> np.ndarray:
        plane = Image.fromarray(levels)                                   # mode F
        plane.info["exif"] = turn.tobytes()
        return np.asarray(ImageOps.exif_transpose(plane), dtype=np.float32)
    return oriented(lum), oriented(alpha)


def with_args(tile, args):
    """A Pillow tile with other decoder arguments (a named tuple since Pillow 11, a tuple before)."""
    return tile._replace(args=args) if hasattr(tile, "_replace") else (*tile[:3], args)


def grey_levels(img, path: Path, significant: tuple[int, ...] = ()) -> np.ndarray:
    """float32 (H, W) in [0, 1] from a Pillow image of any mode (see the module docstring);
    `significant`: a 16-bit grey PNG's sBIT."""
    if img.mode in WIDE_MODES:
        values = np.asarray(img, dtype=np.float64)
        top = 1 if img.mode == "F" else 65535
        if not np.isfinite(values).all() or values.min() < 0 or values.max() > top:
            raise DataError(f"{path}: {img.mode} image with values in [{values.min():g}, {values.max():g}]; "
                            f"expected [0, {top}]")
        return values.astype(np.float32) if img.mode == "F" else by_depth(values, significant)
    if img.mode not in ALPHA_MODES and "transparency" not in img.info:
        return np.asarray(img.convert("L"), dtype=np.float32) / 255
    return composite(*np.moveaxis(np.asarray(img.convert("RGBA").convert("LA"), dtype=np.float32) / 255, -1, 0))


def composite(lum: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Grey levels with transparency composited onto white under dark ink, onto black under light."""
    weight = alpha.sum()
    ink = (lum * alpha).sum() / weight if weight else 1.0
    background = 1.0 if ink < 0.5 else 0.0
    return lum * alpha + background * (1 - alpha)


def fit(grey: np.ndarray) -> np.ndarray:
    """(H, W) grey levels -> (28, 28): shrunk to fit, keeping the aspect ratio, centred on the median."""
    from PIL import Image

    h, w = grey.shape
    if (h, w) == (SIDE, SIDE):
        return grey
    scale = SIDE / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = np.asarray(Image.fromarray(grey).resize(size, Image.Resampling.LANCZOS))
    out = np.full((SIDE, SIDE), np.median(grey), np.float32)
    top, left = (SIDE - size[1]) // 2, (SIDE - size[0]) // 2
    out[top:top + size[1], left:left + size[0]] = small
    return np.clip(out, 0, 1)
