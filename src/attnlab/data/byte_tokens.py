"""Bytes inside BPE tokens, for :mod:`attnlab.data.tokenizer`: format 2's byte-fallback tokens
(``<0x00>`` .. ``<0xFF>``, Hugging Face's spelling), format 1's byte-level BPE (GPT-2's, whose
token strings spell each byte with one printable character), and the text of a run of bytes
that need not be valid UTF-8."""

from __future__ import annotations

import tokenizers as hf

__all__ = ["BYTE_SYMBOLS", "BYTE_TOKENS", "SYMBOL_TO_BYTE", "byte_level_backend", "bytes_text"]

BYTE_SYMBOLS = 256
#: The byte-fallback tokens, ids 4..259 in a format-2 vocabulary (Hugging Face's spelling).
BYTE_TOKENS = tuple(f"<0x{byte:02X}>" for byte in range(BYTE_SYMBOLS))


def byte_level_backend() -> hf.Tokenizer:
    """An untrained format-1 tokenizer: GPT-2's byte-level BPE, as attnlab made it before."""
    backend = hf.Tokenizer(hf.models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = hf.decoders.ByteLevel()
    return backend


def _byte_symbols() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character that stands for each byte
    in a format-1 token string -> the byte. Printable Latin-1 bytes stand for themselves; the
    others (control characters, space, ...) are shifted to U+0100 and up (space is "Ġ")."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    symbols = {chr(b): b for b in printable}
    shifted = (b for b in range(BYTE_SYMBOLS) if b not in set(printable))
    symbols.update({chr(BYTE_SYMBOLS + i): b for i, b in enumerate(shifted)})
    return symbols


#: A format-1 token string's character -> the byte it stands for.
SYMBOL_TO_BYTE = _byte_symbols()


def bytes_text(data: bytes | bytearray) -> str:
    """Bytes as text: valid UTF-8 decoded, every byte that is not part of a valid character
    written as an escape (``\\xc3``), never U+FFFD."""
    return bytes(data).decode("utf-8", errors="backslashreplace")
