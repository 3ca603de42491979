"""User-supplied text in configuration (names, sources, ids) passes `errors.clean_text` on validation,
so no renderer (terminal, JSON, CSV) ever sees a control character or a lone surrogate."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from ..errors import clean_text

CleanText = Annotated[str, AfterValidator(clean_text)]
