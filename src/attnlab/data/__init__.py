"""Data for training: corpora (:mod:`attnlab.data.corpora`), the subword tokenizer
(:mod:`attnlab.data.tokenizer`; Marian's SentencePiece tokenizers in
:mod:`attnlab.data.sentencepiece`, their directories in :mod:`attnlab.data.marian_files`),
training examples (:mod:`attnlab.data.examples`), token-budget batching
(:mod:`attnlab.data.batching`) and the mixing of corpora (:mod:`attnlab.data.mixture`).

Text flows one way: a corpus gives ``(source, target)`` sentence pairs by split; a
:class:`Tokenizer` trained on the train split turns them into ids; :func:`make_examples` frames
them and :class:`TokenBatcher` groups them into batches of similar lengths.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# Loaded on first use (attnlab._lazy): a preparation worker imports attnlab.data.workers,
# which needs no torch; the examples module does.
__getattr__, __dir__ = lazy_exports(globals())  # the names imported below

if TYPE_CHECKING:  # the public names, as type checkers read them; made on first use
    from .batching import TokenBatcher
    from .corpora import (
        MULTI30K_LANGS,
        MULTI30K_SHA256,
        MULTI30K_URL,
        ParallelCorpus,
        default_multi30k_dir,
        multi30k,
        numbers,
        parallel_files,
        read_lines,
        text_corpus,
    )
    from .examples import Example, Examples, collate, make_examples, make_lm_examples
    from .marian_files import from_marian_dir, to_marian_dir
    from .sentencepiece import SentencePieceTokenizer
    from .tokenizer import (
        BOS_ID,
        EOS_ID,
        PAD_ID,
        SPECIAL_TOKENS,
        SRC_TOKENIZER_FILE,
        TGT_TOKENIZER_FILE,
        TOKENIZER_FILE,
        UNK_ID,
        Tokenizer,
        load_tokenizer,
        load_tokenizers,
        save_tokenizers,
    )

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MULTI30K_LANGS",
    "MULTI30K_SHA256",
    "MULTI30K_URL",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "SRC_TOKENIZER_FILE",
    "TGT_TOKENIZER_FILE",
    "TOKENIZER_FILE",
    "UNK_ID",
    "Example",
    "Examples",
    "ParallelCorpus",
    "SentencePieceTokenizer",
    "TokenBatcher",
    "Tokenizer",
    "collate",
    "default_multi30k_dir",
    "from_marian_dir",
    "load_tokenizer",
    "load_tokenizers",
    "make_examples",
    "make_lm_examples",
    "multi30k",
    "numbers",
    "parallel_files",
    "read_lines",
    "save_tokenizers",
    "text_corpus",
    "to_marian_dir",
]
