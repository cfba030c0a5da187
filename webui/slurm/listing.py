# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading one of slurmrestd's big lists record by record (issue 32).

``json.loads`` of a 10,000-job answer of slurmrestd 24.11 (77 MB) builds every record as dicts and lists before the
portal keeps a few fields of each; the portal's parsed jobs then sit among those freed objects, so a gunicorn worker
held about 200 MB after the read. :func:`decode_listing` decodes the answer's top-level object member by member
(``json.JSONDecoder.raw_decode``, the C scanner) and the one list asked for element by element, handing each record
to ``parse`` as soon as it is decoded: one raw record lives at a time (measured with a synthetic answer of the same
size: 4 MB kept after the read instead of 138 MB; ``tests/webui/test_listing.py``).

After such a read :func:`trim_heap` gives the C heap's free pages back to the system (glibc's heap otherwise only
shrinks from its top, so a worker would stay near its peak). A no-op where the C library has no ``malloc_trim``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any
from typing import TypeVar

T = TypeVar("T")
_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _expect(text: str, i: int, chars: str) -> str:
    if i >= len(text) or text[i] not in chars:
        found = repr(text[i]) if i < len(text) else "the end"
        raise json.JSONDecodeError(f"expected one of {chars!r}, found {found}", text, min(i, len(text)))
    return text[i]


def decode_listing(text: str, key: str, parse: Callable[[dict[str, Any]], T]) -> tuple[dict[str, Any], list[T]]:
    """The answer's top-level members except ``key``, and ``parse`` of each object of the ``key`` list (other
    elements are skipped; a ``key`` that is not a list is kept as a member). ``json.JSONDecodeError`` for text that
    is not one JSON object; what ``parse`` raises goes through."""
    members: dict[str, Any] = {}
    items: list[T] = []
    i = _skip(text, 0)
    _expect(text, i, "{")
    i = _skip(text, i + 1)
    while _expect(text, i, '"}') == '"':
        name, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        _expect(text, i, ":")
        i = _skip(text, i + 1)
        if name == key and text.startswith("[", i):
            i = _skip(text, i + 1)
            if not text.startswith("]", i):
                while True:
                    value, i = _DECODER.raw_decode(text, i)
                    if isinstance(value, dict):
                        items.append(parse(value))
                    del value
                    i = _skip(text, i)
                    if _expect(text, i, ",]") == "]":
                        break
                    i = _skip(text, i + 1)
            i += 1
        else:
            members[str(name)], i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if _expect(text, i, ",}") == "}":
            break
        i = _skip(text, i + 1)
        _expect(text, i, '"')  # a member after the comma, not the end
    if _skip(text, i + 1) != len(text):
        raise json.JSONDecodeError("extra data after the object", text, i + 1)
    return members, items


_lock = threading.Lock()
_trim: Any = None  # the C function, False where there is none, None before the first call


def trim_heap() -> bool:
    """Give free heap pages back to the system; True when the C library released some."""
    global _trim
    with _lock:
        if _trim is None:
            try:
                import ctypes

                _trim = ctypes.CDLL("libc.so.6").malloc_trim
                _trim.argtypes = [ctypes.c_size_t]
                _trim.restype = ctypes.c_int
            except (OSError, AttributeError):
                _trim = False
        if _trim is False:
            return False
        return bool(_trim(0))
