# SPDX-License-Identifier: GPL-3.0-or-later
"""Image digests: what ``carme image build`` records in the portal's catalogue and ``carme-launch`` checks before
it starts a session in the image.

The catalogue's image reference is ``PATH@sha256:HEX`` (:func:`split_reference`); ``PATH`` is a file (SIF,
SquashFS) or a directory image (Charliecloud). A file's digest is the sha256 of its bytes; a directory's is the
sha256 over its tree in sorted order: for each entry its relative path, type, mode bits, and the link target or the
sha256 of the content (ownership is left out: an unprivileged builder cannot keep it). The launcher runs as
the session's user, so what only root can read counts with its metadata alone: a file not readable by others by
its size, a directory others cannot enter is not entered; builder (root) and launcher then agree.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class ImageError(ValueError):
    """The image is missing or its digest differs from the catalogue's."""


def split_reference(reference: str) -> tuple[str, str]:
    """``PATH@sha256:HEX`` -> (PATH, ``sha256:HEX``); a reference without a digest gives (reference, "")."""
    path, sep, digest = reference.rpartition("@")
    if sep and DIGEST_RE.match(digest):
        return path, digest
    return reference, ""


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _enterable(path: str) -> bool:
    st = os.lstat(path)
    return not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IROTH | stat.S_IXOTH) == (stat.S_IROTH | stat.S_IXOTH)


def image_digest(path: str) -> str:
    """``sha256:<hex>`` of the image at ``path`` (file or directory); :class:`ImageError` when it is missing."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ImageError(f"image {path} is missing ({exc.strerror})") from exc
    if not stat.S_ISDIR(st.st_mode):
        return "sha256:" + _file_sha256(path)
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        names = sorted(dirs + files)
        dirs[:] = sorted(d for d in dirs if _enterable(os.path.join(root, d)))  # symlinks and closed ones: listed only
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path)
            lst = os.lstat(full)
            mode = stat.S_IMODE(lst.st_mode)
            if stat.S_ISLNK(lst.st_mode):
                entry = f"l {rel} {os.readlink(full)}"
            elif stat.S_ISDIR(lst.st_mode):
                entry = f"d {rel} {mode:o}"
            elif stat.S_ISREG(lst.st_mode) and mode & stat.S_IROTH:
                entry = f"f {rel} {mode:o} {_file_sha256(full)}"
            elif stat.S_ISREG(lst.st_mode):
                entry = f"f {rel} {mode:o} size={lst.st_size}"
            else:
                entry = f"o {rel} {stat.S_IFMT(lst.st_mode):o}"
            h.update(entry.encode("utf-8", "surrogateescape") + b"\0")
    return "sha256:" + h.hexdigest()


def verify_image(reference: str) -> str:
    """The image's path after checking it against the reference's digest; raises :class:`ImageError`.

    A reference without a digest is only checked for existence."""
    path, digest = split_reference(reference)
    actual = image_digest(path)
    if digest and actual != digest:
        raise ImageError(f"image {path} is corrupt or was replaced: its digest is {actual}, the catalogue's {digest}")
    return path
