# SPDX-License-Identifier: GPL-3.0-or-later
"""The README (issue 28): read in five minutes, the long parts in docs/, and pictures only from the browser tests.

tests/e2e/test_portal_e2e.py takes the README's two screenshots with CARME_E2E_SCREENSHOTS_TO_DOCS=1
(docs/images/dashboard.png and docs/images/session.png, committed). This checks that the e2e test still writes both,
and that every image the README embeds is one of them, present, and a real 1280x800 PNG file."""

from __future__ import annotations

import ast
import re
import struct
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
IMAGES = ("docs/images/dashboard.png", "docs/images/session.png")
E2E = REPO / "tests" / "e2e" / "test_portal_e2e.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature, every chunk's CRC and that it ends with IEND."""
    assert data.startswith(PNG_SIGNATURE), "not a PNG"
    at, kinds, size = len(PNG_SIGNATURE), [], (0, 0)
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in chunk {kind!r}"
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        kinds.append(kind)
        at += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds, kinds
    return size


def test_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, len(lines)
    assert max(len(line) for line in lines) <= 120


def test_the_readme_has_the_two_commands() -> None:
    text = README.read_text()
    assert re.search(r"^make demo\b", text, re.M) and re.search(r"^make test\b", text, re.M)


def embedded_images() -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", README.read_text())


def test_the_readme_embeds_only_the_screenshots_the_e2e_test_takes() -> None:
    assert embedded_images() == list(IMAGES), embedded_images()


@pytest.mark.parametrize("image", IMAGES)
def test_each_embedded_screenshot_is_a_1280x800_png(image: str) -> None:
    path = REPO / image
    assert path.is_file(), f"{image} is missing: CARME_E2E_SCREENSHOTS_TO_DOCS=1 pytest -m e2e {E2E.relative_to(REPO)}"
    assert png_size(path.read_bytes()) == (1280, 800)


def test_the_png_check_reads_a_real_png_and_refuses_a_broken_one() -> None:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 3, 2, 8, 0, 0, 0, 0)  # 3x2, 8-bit greyscale
    pixels = zlib.compress(b"\0\0\0\0" * 2)
    png = PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    assert png_size(png) == (3, 2)
    with pytest.raises(AssertionError, match="bad CRC"):
        png_size(png[:-5] + b"X" + png[-4:])
    with pytest.raises(AssertionError, match="not a PNG"):
        png_size(b"GIF89a" + png[6:])


def test_the_e2e_test_still_takes_both_screenshots() -> None:
    """docs_shot(page, NAME) writes docs/images/NAME.png at 1280x800 when CARME_E2E_SCREENSHOTS_TO_DOCS=1."""
    source = E2E.read_text()
    tree = ast.parse(source)
    names = {
        str(node.args[1].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "docs_shot"
        if isinstance(node.args[1], ast.Constant)
    }
    assert {f"docs/images/{name}.png" for name in names} == set(IMAGES)
    shot = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "docs_shot")
    body = ast.get_source_segment(source, shot) or ""
    assert "CARME_E2E_SCREENSHOTS_TO_DOCS" in body and '"width": 1280, "height": 800' in body
    assert "full_page=False" in body
    assert 'DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"' in source


def test_the_long_parts_are_in_docs() -> None:
    """The verification matrix and the performance section live in docs/, and the README points at them."""
    text = README.read_text()
    for doc in ("docs/verification.md", "docs/performance.md", "docs/portal.md", "docs/secrets.md"):
        assert f"]({doc})" in text, doc
    matrix = (REPO / "docs" / "verification.md").read_text()
    assert "| What | CI (`make test`) | Demo (`make demo`) | Real sites only |" in matrix
    assert len(re.findall(r"^\| .+ \|$", matrix, re.M)) >= 37
    assert "| What | Measured | Goal | |" in (REPO / "docs" / "performance.md").read_text()


def test_the_performance_page_copies_the_last_bench_table() -> None:
    """docs/performance.md shows the table of the newest `make bench` run (bench/results/<date>.md), row for row."""
    newest = max((REPO / "bench" / "results").glob("20??-??-??.md"))
    rows = [line for line in newest.read_text().splitlines() if line.startswith("| ")]
    page = (REPO / "docs" / "performance.md").read_text()
    missing = [row for row in rows if row not in page]
    assert rows and not missing, f"{newest.name}: rows not in docs/performance.md: {missing}"
