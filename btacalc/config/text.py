"""User-supplied text in configuration (names, sources, ids) passes `errors.clean_text` on validation,
so no renderer (terminal, JSON, CSV) ever sees a control character or a lone surrogate."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from ..errors import clean_text

CleanText = Annotated[str, AfterValidator(clean_text)]


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty (or only spaces and control characters)")
    return text


def cut(text: str) -> str:
    """`text` for an error message: at most 60 characters, a longer one ending in "..." (launch and override
    files quote the offending word back)."""
    return text if len(text) <= 60 else text[:57] + "..."


# a name or id (review5: a profile named "" planned and compared as a row with no device name)
Name = Annotated[str, AfterValidator(clean_text), AfterValidator(_not_blank)]
