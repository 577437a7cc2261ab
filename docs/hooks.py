"""MkDocs hook: the pages that live at the top of the repository (README.md as the home page,
PROTOCOL.md, BENCHMARKS.md, ARCHITECTURE.md) link into ``docs/`` as ``docs/x.md``; in the site
they sit inside ``docs/`` themselves, so those links lose the prefix."""

from __future__ import annotations

import re
from typing import Any

_INTO_DOCS = re.compile(r"\]\(docs/")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Rewrite ``](docs/...)`` links of the top-level pages to be relative to ``docs/``."""
    return _INTO_DOCS.sub("](", markdown)
