#!/usr/bin/env python3
"""Draws the desktop app's icon (two linked rings on a rounded square) as PNGs in
src-tauri/icons/, with only the standard library. Run again after changing the drawing."""
import math
import struct
import sys
import zlib
from pathlib import Path

BACKGROUND = (0x1F, 0x3A, 0x5F)
RING_A = (0xF2, 0xA5, 0x3A)
RING_B = (0xE8, 0xEE, 0xF5)


def coverage(size, x, y):
    """The colour at (x, y) in a unit square, or None outside the rounded square."""
    u, v = x / size, y / size
    radius = 0.22
    cu, cv = min(max(u, radius), 1 - radius), min(max(v, radius), 1 - radius)
    if (u - cu) ** 2 + (v - cv) ** 2 > radius**2:
        return None
    colour = BACKGROUND
    for (cx, cy), ring in (((0.39, 0.5), RING_A), ((0.61, 0.5), RING_B)):
        d = math.hypot(u - cx, v - cy)
        if 0.15 <= d <= 0.23:
            colour = ring
    # The first ring passes over the second on the upper crossing: the links interlock.
    d = math.hypot(u - 0.39, v - 0.5)
    if 0.15 <= d <= 0.23 and v < 0.5 and math.hypot(u - 0.61, v - 0.5) <= 0.23:
        colour = RING_A
    return colour


def render(size, samples=4):
    rows = []
    for y in range(size):
        row = bytearray([0])
        for x in range(size):
            r = g = b = a = 0
            for sy in range(samples):
                for sx in range(samples):
                    c = coverage(size, x + (sx + 0.5) / samples, y + (sy + 0.5) / samples)
                    if c is not None:
                        r, g, b, a = r + c[0], g + c[1], b + c[2], a + 1
            n = samples * samples
            row += bytes([r // a, g // a, b // a, 255 * a // n] if a else [0, 0, 0, 0])
        rows.append(bytes(row))
    return b"".join(rows)


def png(size):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(render(size), 9)) + chunk(b"IEND", b"")


def main():
    root = Path(__file__).resolve().parents[2]
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "src-tauri" / "icons"
    out.mkdir(parents=True, exist_ok=True)
    for name, size in (("32x32.png", 32), ("128x128.png", 128), ("128x128@2x.png", 256), ("icon.png", 512)):
        (out / name).write_bytes(png(size))
        print(out / name)


if __name__ == "__main__":
    main()
