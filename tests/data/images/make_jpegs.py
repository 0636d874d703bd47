"""Writes the JPEGs of other kinds than Tessera's own writer makes (it writes baseline 4:2:0
only), for ImageFiles.JpegWindowDecodeHasTheWholeDecodesPixels: progressive, and chroma at
full (4:4:4) and half horizontal (4:2:2) resolution. Run with Debian's python3 (PIL):

    /usr/bin/python3 tests/data/images/make_jpegs.py tests/data/images
"""
import sys

import numpy as np
from PIL import Image

out = sys.argv[1]
H, W = 157, 213  # not whole blocks either way
y, x = np.mgrid[0:H, 0:W]
rng = np.random.default_rng(7)
pixels = np.stack([0.5 + 0.35 * np.sin(0.05 * (x + 2 * y + 17 * c)) + 0.1 * rng.random((H, W)) for c in range(3)], -1)
image = Image.fromarray((np.clip(pixels, 0, 1) * 255).astype(np.uint8))
image.save(f"{out}/progressive.jpg", quality=90, progressive=True)
image.save(f"{out}/subsampled-444.jpg", quality=90, subsampling=0)
image.save(f"{out}/subsampled-422.jpg", quality=90, subsampling=1)
