"""The case rule of Tile names, and fresh names for the temporaries the front end introduces.

Tensors and size symbols are capitalised, index variables are lower-case. Leading underscores
do not count: PlaidML's EDSL prints its tensors as ``_X0``, ``_X12`` and its index variables as
``x0`` (and an index may be written ``_x0``), so the case is that of the first letter after them.
A name of underscores and digits only (``_``, ``_0``) has no capital letter: an index variable.
"""

from __future__ import annotations

import re
from collections.abc import Container

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_capitalised(name: str) -> bool:
    """True when `name` names a tensor or size: its first character after leading underscores is
    an upper-case letter."""
    return name.lstrip("_")[:1].isupper()


def fresh_name(base: str, *taken: Container[str]) -> str:
    """`base`, or `base2`, `base3`, ...: the first that none of the `taken` collections holds.
    Requires `base` capitalised (the result names a tensor); guarantees the result is too."""
    name, k = base, 1
    while any(name in t for t in taken):
        k += 1
        name = f"{base}{k}"
    return name
