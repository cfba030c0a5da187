# SPDX-License-Identifier: GPL-3.0-or-later
"""The commands of docs/site-guide.md, as the `site` scenario runs them: read from the guide's code blocks, the
guide's example values (``sites/hpc``, ``head01``, ``gpu[01-16]``...) replaced by the scenario's, ``.venv/bin/carme``
by the controller's ``carme``. A command added to the guide that the scenario does not run fails
``test_every_guide_command_is_run``; a changed option reaches the scenario as it is written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "site-guide.md"
CARME = ".venv/bin/carme"


def commands(text: str | None = None) -> list[str]:
    """Every ``.venv/bin/carme`` command in the guide's fenced code blocks, continuation lines joined."""
    text = GUIDE.read_text() if text is None else text
    found = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip().startswith(CARME):
                found.append(line.strip())
    return found


def command(verb: str, values: Mapping[str, str], text: str | None = None) -> list[str]:
    """The guide's one command that starts with ``carme VERB`` (e.g. "site init", "deploy"), as argv for the
    controller: each word of the guide that ``values`` names replaced, whole words only."""
    matching = [c for c in commands(text) if c.startswith(f"{CARME} {verb} ") or c == f"{CARME} {verb}"]
    assert len(matching) == 1, f"docs/site-guide.md has {len(matching)} commands 'carme {verb}': {matching}"
    words = shlex.split(matching[0])
    return ["carme", *(_replaced(w, values) for w in words[1:])]


def _replaced(word: str, values: Mapping[str, str]) -> str:
    if word in values:
        return values[word]
    for guide_value, ours in values.items():  # a path under one of the guide's directories
        if word.startswith(guide_value + "/"):
            return ours + word[len(guide_value) :]
    return word
