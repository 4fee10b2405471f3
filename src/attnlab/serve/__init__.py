"""``attnlab serve``: the attention explorer, a page and a JSON API over a trained
encoder-decoder model (docs/serve.md).

:func:`create_app` builds the FastAPI app (the model is loaded once); :func:`run` serves it
with uvicorn (:mod:`~attnlab.serve.process`). The model work itself, apart from HTTP, is the
model host (:mod:`~attnlab.serve.service`) and, for the page, :class:`Explorer`.
"""

from __future__ import annotations

from .app import create_app
from .errors import MAX_BODY_BYTES
from .explorer import Explorer
from .process import make_server, run

__all__ = ["MAX_BODY_BYTES", "Explorer", "create_app", "make_server", "run"]
