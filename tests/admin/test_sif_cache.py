# SPDX-License-Identifier: GPL-3.0-or-later
"""carme_admin.sif_cache: the Debian 13 demo's SIF comes from the cache of the current recipe, with its reference."""

from __future__ import annotations

from pathlib import Path

from carme_admin import sif_cache
from carme_runtime.images import image_digest


def tree(tmp_path: Path, recipe: str) -> Path:
    base = tmp_path / f"base-{recipe}"
    base.mkdir()
    (base / ".carme-recipe").write_text(recipe)
    return base


def test_the_key_follows_the_base_tree_recipe(tmp_path: Path) -> None:
    one, two = sif_cache.recipe_key(tree(tmp_path, "a")), sif_cache.recipe_key(tree(tmp_path, "b"))
    assert one != two and len(one) == 16 and one == sif_cache.recipe_key(tmp_path / "base-a")


def test_the_cached_sif_is_copied_with_its_reference(tmp_path: Path) -> None:
    base = tree(tmp_path, "a")
    cache = tmp_path / "cache"
    (cache / sif_cache.recipe_key(base)).mkdir(parents=True)
    cached = cache / sif_cache.recipe_key(base) / sif_cache.SIF
    cached.write_bytes(b"SIF" * 1000)
    dest = tmp_path / "images" / "apptainer"
    assert sif_cache.main([str(dest), str(base), str(cache)]) == 0
    target = dest / sif_cache.SIF
    reference = f"{target}@{image_digest(str(cached))}"
    assert target.read_bytes() == cached.read_bytes() and oct(target.stat().st_mode & 0o777) == "0o644"
    assert (dest / "carme-base-1.0.ref").read_text() == reference + "\n"
    target.write_bytes(b"altered")  # an altered copy is replaced by the cached one on the next run
    assert sif_cache.main([str(dest), str(base), str(cache)]) == 0
    assert target.read_bytes() == cached.read_bytes()


def test_no_cached_sif_for_the_recipe_is_status_2(tmp_path: Path) -> None:
    assert sif_cache.main([str(tmp_path / "dest"), str(tree(tmp_path, "a")), str(tmp_path / "cache")]) == 2
    assert not (tmp_path / "dest").exists()
