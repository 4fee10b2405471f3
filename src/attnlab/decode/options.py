"""How to decode: :class:`DecodingOptions`, the one value that says which search to run and with
what, its defaults (the paper's) and its checks decided here and nowhere else.

A model directory carries its recipe's choice in the ``[eval]`` section of its ``job.json``
(what ``attnlab train`` writes beside the model, as a generation config; the Multi30K recipe
chose ``alpha = 1.4`` on validation, the numbers recipe greedy search):
:meth:`DecodingOptions.for_model` reads it, and the values a caller gives win over it::

    options = DecodingOptions.for_model("run/model", beam_size=8)  # the recipe's alpha
    translator = Translator(model, src, tgt, decoding=options)

``attnlab translate``, ``evaluate`` and ``serve``, :class:`attnlab.inference.translator.
Translator` and the explorer decode with one.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._checks import (
    check_bool,
    check_int,
    check_optional_int,
    check_positive_number,
    is_int,
    is_number,
)
from .._rundir import JOB_FILE, read_job_file
from .session import output_limit

if TYPE_CHECKING:
    import torch

__all__ = ["ALPHA", "BEAM_SIZE", "DecodingOptions"]

#: The paper's beam and length penalty (Vaswani et al. 2017, sec. 6.1): every decoder's default.
BEAM_SIZE, ALPHA = 4, 0.6

#: Where the defaults come from, as :meth:`DecodingOptions.carried_by` says it.
PAPER_ORIGIN = "the paper's defaults (the model carries no [eval])"


@dataclass(frozen=True)
class DecodingOptions:
    """How to decode a translation (or a continuation).

    Args:
        beam_size: the beam; 1 decodes greedily (the paper's 4).
        alpha: beam search's length penalty, ``lp = ((5 + length) / 6) ** alpha`` (Wu et al.
            2016; the paper's 0.6; 0: plain log-probability). Every hypothesis's score is
            ``log P / lp``, for greedy search and sampling too.
        max_new_tokens: the longest output in tokens; None: the source's length + 50
            (:data:`~attnlab.decode.session.EXTRA_LENGTH`). Never more than the model's
            ``max_len`` (:meth:`output_limit`).
        sample: draw each token (:func:`attnlab.decode.search.sample`) instead of searching;
            ``temperature`` (> 0), ``top_k`` (the k most probable tokens, None: all) and
            ``top_p`` (nucleus, in (0, 1], None: no filter) shape the distribution, ``seed``
            makes the draws reproducible (None: unseeded).
        n_best: the hypotheses returned per source, best first (1 to ``beam_size``; more than
            one only from beam search, not from sampling).

    Every value is checked when the options are made: ValueError naming the field. The
    options are hashable: a service groups requests that decode alike by them.
    """

    beam_size: int = BEAM_SIZE
    alpha: float = ALPHA
    max_new_tokens: int | None = None
    sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    n_best: int = 1

    def __post_init__(self) -> None:
        check_int(self.beam_size, "beam_size")
        if not (is_number(self.alpha) and math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha: expected a finite number >= 0, got {self.alpha!r}")
        object.__setattr__(self, "alpha", float(self.alpha))
        if self.max_new_tokens is not None:
            check_int(self.max_new_tokens, "max_new_tokens")
        check_bool(self.sample, "sample")
        temperature = check_positive_number(self.temperature, "temperature")
        object.__setattr__(self, "temperature", temperature)
        check_optional_int(self.top_k, "top_k")
        top_p = self.top_p
        if top_p is not None and not (is_number(top_p) and 0 < top_p <= 1):
            raise ValueError(f"top_p: expected a number in (0, 1] or None, got {top_p!r}")
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed: expected an int or None, got {self.seed!r}")
        check_int(self.n_best, "n_best")
        if self.n_best > 1 and self.sample:
            raise ValueError("n_best: n-best lists come from beam search, not from sampling")
        if self.n_best > self.beam_size:
            raise ValueError(
                f"n_best: expected at most beam_size ({self.beam_size}), got {self.n_best}"
            )

    # -- making them ---------------------------------------------------------------------------

    def updated(self, **given: Any) -> DecodingOptions:
        """These options with each of ``given`` that is not None in its field's place (None:
        keep this one's). TypeError for a name that is no field."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(given) - fields)
        if unknown:
            raise TypeError(f"unexpected decoding options {unknown}; known: {sorted(fields)}")
        changes = {k: v for k, v in given.items() if v is not None}
        return dataclasses.replace(self, **changes) if changes else self

    def widened(self, n_best: int = 1, *, constrained: bool = False) -> DecodingOptions:
        """These options asked for ``n_best`` hypotheses a source (and, where ``constrained``,
        for lexical constraints), the one rule for what that needs: the beam raised to at least
        ``n_best``, and to the paper's :data:`BEAM_SIZE` for constraints (a constrained decoding
        is a beam search, also where greedy search was carried); a beam already wide enough is
        kept. ValueError naming ``n_best`` or ``constraints`` when sampling: neither is a draw.
        For a beam the caller chose itself, pass it with ``updated(beam_size=..., n_best=...)``,
        which refuses an ``n_best`` over it instead."""
        self.check_constraints(constrained)
        least = max(n_best, BEAM_SIZE if constrained else 1)
        beam = self.beam_size if self.sample else max(self.beam_size, least)
        return dataclasses.replace(self, beam_size=beam, n_best=n_best)

    def check_constraints(self, constrained: bool) -> None:
        """ValueError naming ``constraints`` when ``constrained`` and these options sample."""
        if constrained and self.sample:
            raise ValueError(
                "constraints: lexically constrained decoding is a beam search; not with sample=True"
            )

    @classmethod
    def from_eval(cls, section: object) -> DecodingOptions | None:
        """The options an ``[eval]`` table (a job's, as ``job.json`` holds it) carries over the
        defaults: its ``beam_size`` (an int >= 1) and ``alpha`` (a number in [0, 1e6)); a value
        of another type is ignored. None when it carries none (or is no
        table)."""
        if not isinstance(section, Mapping):
            return None
        found: dict[str, Any] = {}
        beam = section.get("beam_size")
        if is_int(beam) and beam >= 1:
            found["beam_size"] = beam
        alpha = section.get("alpha")
        if is_number(alpha) and 0 <= alpha < 1e6:
            found["alpha"] = float(alpha)
        return cls(**found) if found else None

    @classmethod
    def carried_by(cls, model_dir: str | os.PathLike[str]) -> tuple[DecodingOptions, str]:
        """The options the model directory ``model_dir`` carries (:meth:`from_eval` of its
        ``job.json``'s ``[eval]``, what its recipe chose on validation), else the defaults;
        and where they come from, for a line that says so. A missing or unreadable
        ``job.json`` is no error here: the defaults."""
        try:
            job: object = read_job_file(model_dir)
        except (OSError, ValueError):
            job = None
        section = job.get("eval") if isinstance(job, dict) else None
        carried = cls.from_eval(section)
        if carried is None:
            return cls(), PAPER_ORIGIN
        return carried, f"the model's recipe ({Path(model_dir) / JOB_FILE} [eval])"

    @classmethod
    def for_model(cls, model_dir: str | os.PathLike[str], **given: Any) -> DecodingOptions:
        """The options to decode the model in ``model_dir`` with: each of ``given`` that is not
        None (a field's name), else what the directory carries (:meth:`carried_by`), else the
        defaults."""
        return cls.carried_by(model_dir)[0].updated(**given)

    # -- using them ----------------------------------------------------------------------------

    def output_limit(self, source_length: int, max_len: int) -> int:
        """The longest output for a source of ``source_length`` tokens: ``max_new_tokens``, or
        the source's length + 50, at most the model's ``max_len``
        (:func:`~attnlab.decode.session.output_limit`)."""
        return output_limit(source_length, self.max_new_tokens, max_len)

    def generator(self, device: str | torch.device) -> torch.Generator | None:
        """A random generator on ``device`` seeded with ``seed`` (None without a seed)."""
        if self.seed is None:
            return None
        import torch

        return torch.Generator(device=device).manual_seed(int(self.seed))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
