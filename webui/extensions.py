# SPDX-License-Identifier: GPL-3.0-or-later
"""Extension objects, created unbound and initialised in ``create_app``."""

from __future__ import annotations

from flask_sqlalchemy import SQLAlchemy
from flask_wtf.csrf import CSRFProtect  # type: ignore[import-untyped]

from webui.models import Base

csrf = CSRFProtect()
db = SQLAlchemy(model_class=Base)
