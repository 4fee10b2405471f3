"""The engines a :class:`~attnlab.inference.translator.Translator` decodes with: ``"torch"``
(attnlab's own searches, every feature) or ``"ctranslate2"`` (CTranslate2, for speed on what it
supports). An engine replaces only the search of one batch: tokenizing, bounds, batching and
prefixes stay the Translator's, so both engines read and write text through the model's own
tokenizers.

:func:`check_engine` is the one rule for what an engine cannot do, refused in one line before
any work (the CLI calls it on its flags before loading a model). :class:`CTranslate2Engine`
converts the model once (:func:`~attnlab.formats.ctranslate2.to_ctranslate2`) into a cache entry
keyed by its weights, and decodes source ids into rows of ids and scores (:data:`Row`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from .._checks import check_choice
from ..decode.options import DecodingOptions
from ..decode.search import length_penalty

__all__ = ["ENGINES", "CTranslate2Engine", "Row", "check_engine"]

#: One output of a search: its ids (EOS last where it finished), each token's log-probability
#: (empty where not asked for), ``log P``, the score the search ranked by, and whether it
#: finished; an n-best row the beam did not fill has no ids.
Row = tuple[list[int], list[float], float, float, bool]

#: How many times the beam CTranslate2's beam search collects in finished hypotheses before it
#: stops (its ``patience``), for attnlab's length penalty to rank. Chosen on Multi30K's
#: validation split with the recipe's model (tools/engine_parity.py): 1 picks another output
#: than the torch engine for 27 of 1,014 sentences, 1.5 for 2, 2 for none.
PATIENCE = 2.0

#: The engines, the first the default.
ENGINES = ("torch", "ctranslate2")
_INSTALL = "pip install 'attnlab[ctranslate2]'"


def check_engine(
    engine: object, *, models: int = 1, constraints: bool = False, quantize: str | None = None
) -> str:
    """``engine`` if it is one of :data:`ENGINES` and can decode ``models`` models (several: an
    ensemble), with lexical ``constraints`` or not, with ``quantize`` weights; else a
    ValueError naming the engine and the option (ImportError where the ``ctranslate2`` package
    is missing). Nothing is quietly done by the other engine."""
    name: str = check_choice(engine, ENGINES, "engine")
    if name == "torch":
        return name
    why = ""
    if models > 1:
        why = f"an ensemble ({models} models): it decodes one model"
    elif constraints:
        why = "constraints: it has no lexically constrained search"
    elif quantize not in (None, "int8"):
        why = f"quantize: expected int8 or None, got {quantize!r}"
    if why:
        raise ValueError(f"engine ctranslate2: {why}; the torch engine can")
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        message = f"engine ctranslate2: the ctranslate2 package is not installed; {_INSTALL}"
        raise ImportError(message, name="ctranslate2") from None
    return name


class CTranslate2Engine:
    """A model decoded by CTranslate2 (``ctranslate2.Translator``) on the model's device (CUDA
    or CPU, with torch's thread count, ``torch.get_num_threads()``, as ``intra_threads``).

    The model is converted on first use into ``cache_dir`` (default ``ctranslate2/`` in
    attnlab's cache, :func:`~attnlab.data.shardformat.cache_root`: ``$ATTNLAB_CACHE``), in an
    entry named by the SHA-256 of its weights (every tensor), its config, its tokenizers, the
    exporter's :data:`~attnlab.formats.ctranslate2.EXPORT_VERSION`, the installed CTranslate2
    and the weight type; written atomically, so a later engine for the same model converts
    nothing. ``quantize="int8"``: int8 weights and CTranslate2's ``compute_type="int8"``; None:
    float32.

    Outputs rank as on the torch engine, by attnlab's ``log P / ((5 + |Y|) / 6) ** alpha``
    (|Y| counts EOS), not by CTranslate2's ``log P / |Y| ** length_penalty``: its beam search
    keeps collecting finished hypotheses until it holds :data:`PATIENCE` times the beam (its
    ``patience``), and they are ranked here by the decoding's ``alpha``. Both engines extend
    and finish hypotheses the same way, so the two choose the same outputs wherever the
    torch engine's own search finished its best one among them (benchmarks/results/
    engine_multi30k.json counts how often it did). Each output's token log-probabilities are
    the model's (``score_batch``), for greedy search and sampling too.
    """

    def __init__(
        self,
        model: Any,
        src_tokenizer: Any,
        tgt_tokenizer: Any,
        *,
        quantize: str | None = None,
        seed: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        from ..formats.common import vocabulary

        check_engine("ctranslate2", quantize=quantize)
        c = model.config
        self.src_tokens = vocabulary(src_tokenizer, c.vocab_size, "source")
        self.tgt_tokens = vocabulary(tgt_tokenizer, c.target_vocab_size, "target")
        self.tgt_ids = {token: i for i, token in enumerate(self.tgt_tokens)}
        self.eos_id, self.pad_id = c.eos_id, c.pad_id
        banned = sorted({c.pad_id, c.bos_id} - {c.eos_id})  # as attnlab: never generated
        self.banned = [[self.tgt_tokens[i]] for i in banned] or None
        self.compute_type = quantize or "float32"
        self.path = convert(model, (src_tokenizer, tgt_tokenizer), self.compute_type, cache_dir)
        self.device = next(model.parameters()).device
        self.seed = seed
        self.translator = self._load(seed)

    def _load(self, seed: int | None) -> Any:
        """A ``ctranslate2.Translator`` of the converted model; its random stream starts from
        ``seed`` (CTranslate2 seeds a worker's generator when the worker starts)."""
        import ctranslate2

        if seed is not None:
            ctranslate2.set_random_seed(int(seed) % 2**32)
        cuda = self.device.type == "cuda"
        return ctranslate2.Translator(
            str(self.path),
            device="cuda" if cuda else "cpu",
            device_index=(self.device.index or 0) if cuda else 0,
            compute_type=self.compute_type,
            intra_threads=0 if cuda else torch.get_num_threads(),
        )

    def search(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]],
        options: DecodingOptions,
        limits: list[int],
        scored: bool = True,
    ) -> list[Row]:
        """``options.n_best`` outputs per source as :data:`Row` (rows ``i * n_best ...``; an
        empty one where the beam finished fewer), the output of row ``i`` at most
        ``limits[i]`` tokens (the
        prefix included). CTranslate2 takes one length limit a batch: greedy search and
        sampling decode to the longest and cut each row to its own (exact: a row's tokens do not
        depend on its limit), beam search decodes the rows of each limit together. ``scored``:
        each token's log-probability from a second pass (``score_batch``); else none, and each
        row's ``log P`` from CTranslate2's own score, unless a row was cut to its limit.
        Plain lists, not a :class:`~attnlab.decode.search.Generation`: at batch 1 the torch ops
        of one would cost as much as the rest of the Translator's work on a sentence."""
        n = options.n_best
        # The translator's stream where the call keeps its seed (as the torch engine's
        # generator), else a stream of the call's own seed.
        fresh = options.seed is not None and options.seed != self.seed
        translator = self._load(options.seed) if fresh else self.translator
        beam = 1 if options.sample else options.beam_size
        settings: dict[str, Any] = dict(
            beam_size=beam,
            patience=PATIENCE,
            num_hypotheses=round(beam * PATIENCE) if beam > 1 else n,
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=self.banned,
            return_end_token=True,
            return_scores=True,
        )
        if options.sample:
            settings.update(
                sampling_topk=options.top_k or 0,
                sampling_topp=1.0 if options.top_p is None else options.top_p,
                sampling_temperature=options.temperature,
            )
        groups: dict[int, list[int]] = {}
        for i, limit in enumerate(limits):
            groups.setdefault(max(limits) if beam == 1 else limit, []).append(i)
        found: list[list[int]] = [[] for _ in range(len(sources) * n)]
        log_probs = [0.0] * len(found)
        # The prefixes' log P, for the ranking and for rows not scored again below.
        ranked = beam > 1 or not scored
        forced = self._prefix_log_probs(sources, prefixes) if ranked else [0.0] * len(sources)
        cut = False  # a row cut to its own limit: CTranslate2's log P is of the longer output
        for longest, rows in groups.items():
            penalty = _their_penalty(options.alpha, [len(sources[i]) for i in rows])
            results = translator.translate_batch(
                [[self.src_tokens[t] for t in sources[i]] for i in rows],
                [[self.tgt_tokens[t] for t in prefixes[i]] or None for i in rows],
                max_decoding_length=longest,
                length_penalty=penalty,
                **settings,
            )
            for i, result in zip(rows, results, strict=True):
                outputs = [
                    (score * len(tokens) ** penalty + forced[i], tokens)
                    for tokens, score in zip(result.hypotheses, result.scores, strict=True)
                ]
                outputs.sort(key=lambda o: -o[0] / length_penalty(len(o[1]), options.alpha))
                for k, (log_prob, tokens) in enumerate(outputs[:n]):
                    found[i * n + k] = [self.tgt_ids[t] for t in tokens][: limits[i]]
                    log_probs[i * n + k] = log_prob
                    cut |= len(tokens) > limits[i]
        if scored or cut:
            return self._scored(sources, found, n, options.alpha)
        return [
            (ids, [], p, p / length_penalty(len(ids), options.alpha), self._done(ids))
            for ids, p in zip(found, log_probs, strict=True)
        ]

    def _prefix_log_probs(self, sources: list[list[int]], prefixes: list[list[int]]) -> list[float]:
        """Each source's prefix's log-probability (0 without a prefix): CTranslate2's scores
        leave the forced tokens out, and attnlab's ``log P`` (which its length penalty ranks)
        counts them."""
        rows = [i for i, prefix in enumerate(prefixes) if prefix]
        found = [0.0] * len(sources)
        scored = self._token_log_probs([sources[i] for i in rows], [prefixes[i] for i in rows])
        for i, log_probs in zip(rows, scored, strict=True):
            found[i] = sum(log_probs[: len(prefixes[i])])
        return found

    def _token_log_probs(
        self, sources: list[list[int]], targets: list[list[int]]
    ) -> list[list[float]]:
        """Each target's token log-probabilities given its source, from CTranslate2's
        ``score_batch`` (which appends EOS to a target: one more than its tokens)."""
        if not targets:
            return []
        scored = self.translator.score_batch(
            [[self.src_tokens[t] for t in source] for source in sources],
            [[self.tgt_tokens[t] for t in target] for target in targets],
            max_input_length=0,
        )
        return [result.log_probs for result in scored]

    def _done(self, ids: list[int]) -> bool:
        return bool(ids) and ids[-1] == self.eos_id

    def _scored(
        self, sources: list[list[int]], found: list[list[int]], n: int, alpha: float
    ) -> list[Row]:
        """``found`` (rows of ids, EOS last where finished) as rows, each token's
        log-probability from CTranslate2's ``score_batch`` (which appends EOS to a target)."""
        done = [self._done(ids) for ids in found]
        kept = [r for r, ids in enumerate(found) if ids]
        scored = self._token_log_probs(
            [sources[r // n] for r in kept], [found[r][: len(found[r]) - done[r]] for r in kept]
        )
        rows: list[Row] = [([], [], 0.0, 0.0, False)] * len(found)
        for r, log_probs in zip(kept, scored, strict=True):
            ids = found[r]
            tokens = log_probs[: len(ids)]
            log_prob = sum(tokens)
            rows[r] = (ids, tokens, log_prob, log_prob / length_penalty(len(ids), alpha), done[r])
        return rows


def _their_penalty(alpha: float, source_lengths: list[int]) -> float:
    """CTranslate2's length penalty for a batch: GNMT's exponent in ``|Y|`` at the sources' mean
    length, EOS counted (``alpha |Y| / (5 + |Y|)``), at least 1e-6 (at 0 CTranslate2 stops once
    its best hypothesis finishes). It decides only which finished hypotheses CTranslate2 hands
    back where more finish in its last step than it returns (at most ``beam_size * patience``),
    so that those it drops are the ones attnlab's penalty ranks last too."""
    length = sum(source_lengths) / len(source_lengths) + 1
    return max(alpha * length / (5 + length), 1e-6)


def convert(
    model: Any, tokenizers: tuple[Any, Any], weights: str, cache_dir: str | os.PathLike[str] | None
) -> Path:
    """The cache entry of ``model`` converted with ``weights`` (see :class:`CTranslate2Engine`):
    made once, atomically (a conversion cut short leaves no entry)."""
    import ctranslate2

    from ..data.shardformat import cache_root
    from ..formats.ctranslate2 import EXPORT_VERSION, to_ctranslate2

    digest = hashlib.sha256()
    head = {
        "exporter": EXPORT_VERSION,
        "ctranslate2": ctranslate2.__version__,
        "weights": weights,
        "config": model.config.to_dict(),
        "tokenizers": [tokenizer.fingerprint() for tokenizer in tokenizers],
    }
    digest.update(json.dumps(head, sort_keys=True).encode("utf-8"))
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"\n{name} {value.dtype} {tuple(value.shape)}\n".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().data)
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "ctranslate2"
    entry = root / digest.hexdigest()
    if not (entry / "model.bin").is_file():  # an entry is whole or absent (atomic rename)
        quantization = None if weights == "float32" else weights
        to_ctranslate2(model, tokenizers, entry, quantization=quantization, force=True)
    return entry
