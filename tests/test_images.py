"""Image files as inputs: every kind of pixel Pillow gives becomes the same MNIST-like digit, and
what cannot be converted faithfully is refused in one line (lenet.images)."""
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from lenet.errors import DataError
from lenet.images import MAX_PIXELS, read_image


@pytest.fixture
def seven(dataset):
    """A real test digit, float32 (28, 28) in [0, 1], light on dark."""
    return dataset.test_x[np.flatnonzero(dataset.test_y == 7)[0], 0]


def u8(x):
    return np.rint(x * 255).astype(np.uint8)


def saved(tmp_path, name, array, mode=None):
    path = tmp_path / name
    (Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)).save(path)
    return path


@pytest.mark.parametrize("ink", [0, 255])
def test_a_digit_drawn_only_in_the_alpha_channel(tmp_path, seven, ink):
    """RGBA, colour constant (black or white ink), the digit in alpha: composited onto the contrasting
    background, it is the digit. Before, its dropped alpha made it a blank image."""
    rgba = np.zeros((28, 28, 4), np.uint8)
    rgba[..., :3], rgba[..., 3] = ink, u8(seven)
    got = read_image(saved(tmp_path, "alpha.png", rgba))
    assert np.abs(got[0] - u8(seven) / 255).max() < 1e-6


def test_grey_with_alpha_and_a_transparent_palette_colour(tmp_path, seven):
    la = Image.merge("LA", [Image.new("L", (28, 28), 0), Image.fromarray(u8(seven))])
    la.save(tmp_path / "la.png")
    assert np.abs(read_image(tmp_path / "la.png")[0] - u8(seven) / 255).max() < 1e-6
    palette = Image.fromarray((seven > 0.5).astype(np.uint8), "P")      # ink colour 1, background 0
    palette.putpalette([255, 255, 255, 0, 0, 0])                        # ... black ink on transparent white
    palette.save(tmp_path / "p.png", transparency=0)
    assert np.array_equal(read_image(tmp_path / "p.png")[0], (seven > 0.5).astype(np.float32))


def test_a_float_tiff_in_0_1_is_taken_as_it_is(tmp_path, seven):
    assert np.array_equal(read_image(saved(tmp_path, "f.tif", seven.astype(np.float32)))[0], seven)


def test_16_bit_png_and_pgm_use_their_whole_range(tmp_path, seven):
    sixteen = np.rint(seven * 65535).astype(np.uint16)
    got = read_image(saved(tmp_path, "g16.png", sixteen))
    assert np.abs(got[0] - seven).max() < 1e-5
    pgm = tmp_path / "g16.pgm"                                  # Pillow reads it as mode I
    pgm.write_bytes(b"P5 28 28 65535\n" + sixteen.astype(">u2").tobytes())
    assert np.abs(read_image(pgm)[0] - seven).max() < 1e-5


@pytest.mark.parametrize("name, array, message", [
    ("f2.tif", np.full((28, 28), 2, np.float32), "F image with values in [2, 2]; expected [0, 1]"),
    ("nan.tif", np.full((28, 28), np.nan, np.float32), "F image with values in [nan, nan]; expected [0, 1]"),
    ("i32.tif", np.arange(28 * 28, dtype=np.int32).reshape(28, 28),
     "a 32-bit integer image has no defined range; save it as 8- or 16-bit grey, or as float in [0, 1]"),
    ("blank.png", np.full((28, 28), 255, np.uint8),
     "every pixel has the same grey level; there is no digit to classify"),
])
def test_values_outside_the_range_of_their_kind_are_refused(tmp_path, name, array, message):
    path = saved(tmp_path, name, array)
    with pytest.raises(DataError, match=f"^{path}: " + message.replace("[", r"\[").replace("]", r"\]") + "$"):
        read_image(path)


def test_colour_and_dark_ink_on_paper(tmp_path, seven):
    rgb = np.stack([255 - u8(seven)] * 3, -1)                           # black ink on white, colour file
    got = read_image(saved(tmp_path, "paper.jpg.png", rgb))
    assert np.abs(got[0] - u8(seven) / 255).max() < 1e-6


def test_a_wide_image_is_shrunk_to_fit_and_centred(tmp_path, seven):
    wide = np.zeros((28, 56), np.uint8)
    wide[:, 14:42] = u8(seven)
    got = read_image(saved(tmp_path, "wide.png", wide))[0]
    assert got.shape == (28, 28)
    assert got[:7].max() == 0 and got[21:].max() == 0 and got[7:21].max() > 0.5     # 28 x 14, centred


def test_the_exif_orientation_is_applied(tmp_path, seven):
    exif = Image.Exif()
    exif[0x0112] = 6                                     # "rotate 90 degrees clockwise to display"
    Image.fromarray(np.rot90(u8(seven))).save(tmp_path / "rotated.png", exif=exif)
    assert np.abs(read_image(tmp_path / "rotated.png")[0] - u8(seven) / 255).max() < 1e-6


def test_several_frames_are_refused(tmp_path, seven):
    frames = [Image.fromarray(u8(seven)), Image.fromarray(u8(seven[::-1]))]
    frames[0].save(tmp_path / "two.tif", save_all=True, append_images=frames[1:])
    with pytest.raises(DataError, match="two.tif: holds 2 frames; give one image per file$"):
        read_image(tmp_path / "two.tif")


def png_header_only(path, width, height):
    """A PNG that declares width x height grey pixels and holds none (Pillow reads the header first)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize("side, message", [
    (20_000, f"more than the {MAX_PIXELS:,} pixels accepted"),                  # Pillow's DecompressionBombError
    (10_000, f"10000 x 10000 pixels, more than the {MAX_PIXELS:,} accepted"),    # past Pillow's warning: ours
])
def test_huge_images_are_refused_from_their_header(tmp_path, side, message, recwarn):
    path = png_header_only(tmp_path / "huge.png", side, side)
    with pytest.raises(DataError, match=f"^{path}: {message}$"):
        read_image(path)
    assert not recwarn.list                              # no DecompressionBombWarning printed besides


def test_a_damaged_image_is_one_line(tmp_path):
    path = png_header_only(tmp_path / "empty.png", 28, 28)
    with pytest.raises(DataError, match=f"^{path}: not a readable image \\(.+\\)$"):
        read_image(path)
    (tmp_path / "words.png").write_text("not an image")
    with pytest.raises(DataError, match="words.png: not an image file Pillow can read$"):
        read_image(tmp_path / "words.png")


def png_bytes(values: np.ndarray, colour_type: int = 0, depth: int = 16, chunks: dict | None = None) -> bytes:
    """A PNG of `values` ((H, W) or (H, W, channels), big-endian samples of `depth` bits, each row
    Paeth-filtered) with extra chunks before the image data, written by hand: Pillow writes neither
    sBIT nor 16-bit colour."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    h, w = values.shape[:2]
    rows = values.astype(">u2" if depth == 16 else np.uint8).reshape(h, -1)
    if depth < 8:                                         # pack the samples, most significant first
        rows = np.packbits(np.unpackbits(rows[..., None], axis=-1)[..., 8 - depth:].reshape(h, -1), axis=-1)
    rows = rows.view(np.uint8).reshape(h, -1).astype(np.int32)
    step = max(1, depth * (values.size // (h * w)) // 8)          # bytes per pixel, as the filters count
    body, above = b"", np.zeros_like(rows[0])
    for row in rows:
        left, corner = (np.concatenate([np.zeros(step, np.int32), r[:-step]]) for r in (row, above))
        guess = left + above - corner
        near = [np.abs(guess - v) for v in (left, above, corner)]
        paeth = np.where((near[0] <= near[1]) & (near[0] <= near[2]), left, np.where(near[1] <= near[2], above, corner))
        body += b"\4" + ((row - paeth) % 256).astype(np.uint8).tobytes()
        above = row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour_type, 0, 0, 0))
            + b"".join(chunk(k, v) for k, v in (chunks or {}).items())
            + chunk(b"IDAT", zlib.compress(body)) + chunk(b"IEND", b""))


@pytest.fixture
def zero(dataset):
    """A real test digit 0 that the shipped weights classify right from its 8-bit form."""
    return dataset.test_x[np.flatnonzero(dataset.test_y == 0)[0], 0]


def classify(x) -> int:
    import lenet
    return int(lenet.load("numpy").predict(np.ascontiguousarray(x[None])).argmax())


@pytest.mark.parametrize("sbit", [None, b"\x0c"])
def test_12_bit_data_in_a_16_bit_png_keeps_its_range(tmp_path, zero, sbit):
    """A scanner's 12-bit data (0..4095) in a 16-bit PNG, with or without an sBIT chunk of 12:
    scaled by 4095, not 65535 (which made it a faint image the network called a 1)."""
    path = tmp_path / "twelve.png"
    path.write_bytes(png_bytes(np.rint(zero * 4095), chunks={b"sBIT": sbit} if sbit else None))
    got = read_image(path)
    assert np.abs(got[0] - zero).max() < 1e-3 and classify(got) == classify(zero[None]) == 0


def test_sbit_is_a_precision_when_the_data_fills_16_bits(tmp_path, seven):
    """The PNG rule: sBIT 12 with the samples scaled up to 16 bits: read as 16-bit data."""
    path = tmp_path / "scaled.png"
    path.write_bytes(png_bytes(np.rint(seven * 65535), chunks={b"sBIT": b"\x0c"}))
    assert np.abs(read_image(path)[0] - seven).max() < 1e-5


def test_8_bit_data_in_16_bits_is_not_blank(tmp_path, seven):
    """Values 0..255 in a 16-bit PNG: the same digit as the 8-bit file (it was refused as one grey level)."""
    path = tmp_path / "eight-in-16.png"
    path.write_bytes(png_bytes(u8(seven)))
    assert np.array_equal(read_image(path), read_image(saved(tmp_path, "eight.png", u8(seven))))


def test_only_one_value_throughout_is_blank(tmp_path):
    """Two 16-bit values one apart are two grey levels; one value alone is blank."""
    path = tmp_path / "two-levels.png"
    values = np.full((28, 28), 30000)
    values[10:18, 12:16] = 30001
    path.write_bytes(png_bytes(values))
    assert read_image(path).std() > 0
    path.write_bytes(png_bytes(np.full((28, 28), 30000)))
    with pytest.raises(DataError, match="every pixel has the same grey level"):
        read_image(path)


@pytest.mark.parametrize("colour_type, planes", [
    (2, lambda d, full: [d, d, d]),                     # RGB
    (6, lambda d, full: [d, d, d, full]),               # RGBA, opaque
    (4, lambda d, full: [d, full]),                     # grey + alpha, opaque
    (4, lambda d, full: [0 * d, d]),                    # grey + alpha, the digit in the alpha channel only
])
def test_12_bit_data_in_16_bit_colour_and_alpha_pngs(tmp_path, zero, colour_type, planes):
    """Pillow keeps only the high byte of 16-bit colour and alpha samples (0..15 of 12-bit data: a
    faint digit, called a 1); they are decoded again with both bytes, each plane by its depth."""
    twelve = np.rint(zero * 4095)
    path = tmp_path / "c16.png"
    path.write_bytes(png_bytes(np.stack(planes(twelve, np.full_like(twelve, 4095)), -1), colour_type))
    got = read_image(path)
    assert np.abs(got[0] - zero).max() < 1e-3 and classify(got) == 0


def test_bit_depths_below_8(tmp_path, zero):
    for depth in (1, 2, 4):
        path = tmp_path / f"g{depth}.png"
        path.write_bytes(png_bytes(np.rint(zero * (2 ** depth - 1)), depth=depth))
        assert classify(read_image(path)) == 0, depth


def test_a_16_bit_colour_png_keeps_its_exif_orientation(tmp_path, seven):
    exif = Image.Exif()
    exif[0x0112] = 6                                     # "rotate 90 degrees clockwise to display"
    turned = np.rot90(np.rint(seven * 65535))
    path = tmp_path / "rotated16.png"
    path.write_bytes(png_bytes(np.stack([turned] * 3, -1), 2, chunks={b"eXIf": exif.tobytes()[6:]}))
    assert np.abs(read_image(path)[0] - seven).max() < 1e-5


def tiff_bytes(values: np.ndarray, order: str, deflate: bool = False) -> bytes:
    """A 16-bit RGB(A) TIFF of `values` (H, W, 3 or 4), byte order "<" or ">", raw or deflated (then
    libtiff decodes it), by hand (Pillow writes no 16-bit colour): header, one IFD of LONG entries,
    the samples' bit counts (SHORTs), one strip."""
    h, w, c = values.shape
    data = values.astype(f"{order}u2").tobytes()
    data = zlib.compress(data) if deflate else data
    tags = [256, 257, 258, 259, 262, 273, 277, 278, 279, 284] + ([338] if c == 4 else [])   # 338: unassociated alpha
    bits_at = 8 + 2 + 12 * len(tags) + 4
    value = {256: w, 257: h, 258: bits_at, 259: 8 if deflate else 1, 262: 2, 273: bits_at + 2 * c, 277: c, 278: h,
             279: len(data), 284: 1, 338: 2}
    ifd = struct.pack(f"{order}H", len(tags)) + b"".join(
        struct.pack(f"{order}HHII", t, 3 if t == 258 else 4, c if t == 258 else 1, value[t]) for t in tags)
    return ((b"II*\0" if order == "<" else b"MM\0*") + struct.pack(f"{order}I", 8) + ifd + struct.pack(f"{order}I", 0)
            + struct.pack(f"{order}{c}H", *[16] * c) + data)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("deflate", [False, True])
def test_12_bit_data_in_a_16_bit_colour_tiff(tmp_path, zero, order, channels, deflate):
    twelve = np.rint(zero * 4095)
    path = tmp_path / "c16.tif"
    path.write_bytes(tiff_bytes(np.stack([twelve] * 3 + [np.full_like(twelve, 4095)] * (channels - 3), -1), order,
                                deflate))
    got = read_image(path)
    assert np.abs(got[0] - zero).max() < 1e-3 and classify(got) == 0
