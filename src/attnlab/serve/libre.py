"""The LibreTranslate routes' requests and answers (docs/serve.md, "The translation service"):
``POST /translate`` and ``GET /languages`` as LibreTranslate's clients send and read them, with
every numeric field capped.

:func:`parse_translate` checks a request's fields (from JSON or a form) into a
:class:`TranslateCall`, or raises :class:`BadRequest` (a 400 ``{"error": message}`` naming the
field and what was expected); :func:`translate_answer` makes the JSON answer of its results;
:func:`languages` is the ``/languages`` list of the model's one pair. No model work here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._checks import is_int
from ..decode.options import DecodingOptions

__all__ = [
    "AUTO",
    "LANGUAGE_NAMES",
    "MAX_ALTERNATIVES",
    "MAX_CHARACTERS",
    "MAX_CODE",
    "MAX_SENTENCES",
    "BadRequest",
    "TranslateCall",
    "language_name",
    "languages",
    "parse_translate",
    "translate_answer",
]

#: The most sentences in one request (``q`` as a list).
MAX_SENTENCES = 64
#: The most characters in one request, all its sentences together.
MAX_CHARACTERS = 10_000
#: The most ``alternatives`` (n-best translations besides the best) of a sentence.
MAX_ALTERNATIVES = 8
#: The longest language code accepted in ``source`` and ``target``.
MAX_CODE = 32
#: ``source`` for "detect it": accepted as the model's source language (nothing is detected).
AUTO = "auto"
#: The fields ``/translate`` reads (``api_key`` is :mod:`attnlab.serve.keys`'); others that
#: LibreTranslate's clients send (``apiKey``, ``secret``) are ignored, as LibreTranslate does.
FIELDS = ("q", "source", "target", "format", "alternatives", "beam_size")

#: English names of common ISO 639-1 codes, for ``/languages`` (another code names itself).
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish",
    "de": "German", "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian",
    "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish", "he": "Hebrew",
    "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian Bokmål",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "th": "Thai", "tr": "Turkish",
    "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


class BadRequest(ValueError):
    """A request the LibreTranslate routes refuse: a 400 with ``{"error": message}``."""


@dataclass(frozen=True)
class TranslateCall:
    """One ``/translate`` request, checked: ``texts`` (one for a string ``q``; ``many``: ``q``
    was a list), how to decode them (``decoding``: the server's, with the beam asked, widened to
    ``1 + alternatives`` hypotheses each), and ``auto``: ``source`` was ``"auto"``."""

    texts: list[str]
    many: bool
    decoding: DecodingOptions
    auto: bool

    @property
    def alternatives(self) -> int:
        """The translations asked for each text besides the best."""
        return self.decoding.n_best - 1

    @property
    def characters(self) -> int:
        return sum(len(t) for t in self.texts)


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.lower(), code)


def languages(source: str, target: str) -> list[dict[str, Any]]:
    """``GET /languages``: the model's source language with its one target, and the target
    language (listed so that clients which check a target against the codes find it)."""
    return [
        {"code": source, "name": language_name(source), "targets": [target]},
        {"code": target, "name": language_name(target), "targets": []},
    ]


def _count(value: object, name: str, most: int, least: int = 0) -> int:
    """An integer field (a JSON integer, or digits from a form) from ``least`` to ``most``."""
    digits = value.strip() if isinstance(value, str) else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= 9:  # not "²", nor 5,000 digits
        value = int(digits)
    if not is_int(value):
        raise BadRequest(f"{name}: expected an integer from {least} to {most}, got {value!r:.40}")
    if not least <= value <= most:  # type: ignore[operator]
        raise BadRequest(f"{name}: expected an integer from {least} to {most}, got {value}")
    return int(value)  # type: ignore[call-overload]


def _code(value: object, name: str) -> str:
    if value is None:
        raise BadRequest(f"{name}: missing; expected a language code")
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name}: expected a language code (a string), got {value!r:.40}")
    if len(value) > MAX_CODE:
        raise BadRequest(f"{name}: expected a language code of at most {MAX_CODE} characters")
    return _unicode(value, name).strip()


def _unicode(text: str, name: str) -> str:
    """``text``, unless it holds a lone surrogate (JSON's ``"\\ud800"``, or a form's
    percent-escapes that are not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(
            f"{name}: holds an unpaired surrogate or a byte that is not UTF-8 at character "
            f"{error.start}; expected valid Unicode text"
        ) from None
    return text


def _texts(q: object) -> tuple[list[str], bool]:
    if q is None:
        raise BadRequest("q: missing; expected a string or a list of strings")
    many = isinstance(q, list)
    items: list[object] = list(q) if isinstance(q, list) else [q]
    if not items or items == [""]:
        raise BadRequest("q: empty; expected a string or a list of strings to translate")
    if len(items) > MAX_SENTENCES:
        raise BadRequest(f"q: {len(items)} sentences; at most {MAX_SENTENCES} in one request")
    texts: list[str] = []
    for i, text in enumerate(items):
        name = f"q[{i}]" if many else "q"
        if not isinstance(text, str):
            raise BadRequest(f"{name}: expected a string, got {type(text).__name__}")
        texts.append(_unicode(text, name))
    characters = sum(len(t) for t in texts)
    if characters > MAX_CHARACTERS:
        raise BadRequest(f"q: {characters:,} characters; at most {MAX_CHARACTERS:,} in one request")
    return texts, many


def parse_translate(
    fields: Mapping[str, object],
    pair: tuple[str, str],
    served: DecodingOptions,
    *,
    max_beam: int,
) -> TranslateCall:
    """A ``/translate`` request's ``fields`` (a JSON object, or a form's fields) checked
    against the model's language ``pair`` ``(source, target)`` and the caps, its decoding the
    server's (``served``) with what it asks; BadRequest naming the first field at fault."""
    texts, many = _texts(fields.get("q"))
    source, target = _code(fields.get("source"), "source"), _code(fields.get("target"), "target")
    auto = source.lower() == AUTO
    if (not auto and source.lower() != pair[0].lower()) or target.lower() != pair[1].lower():
        raise BadRequest(
            f"source, target: {source}->{target} is not a pair this server translates; it "
            f"translates {pair[0]}->{pair[1]} (source may also be {AUTO!r})"
        )
    form = fields.get("format", "text")
    if form == "html":
        raise BadRequest('format: "html" is not supported; send plain text with "text"')
    if form != "text":
        raise BadRequest(f'format: expected "text", got {form!r:.40}')
    alternatives = _count(fields.get("alternatives", 0), "alternatives", MAX_ALTERNATIVES)
    beam = fields.get("beam_size")
    beam_size = None if beam is None else _count(beam, "beam_size", max_beam, least=1)
    try:
        decoding = served.updated(beam_size=beam_size).widened(1 + alternatives)
    except ValueError as e:  # alternatives from a server that samples
        raise BadRequest(f"alternatives: this server samples its translations; {e}") from None
    return TranslateCall(texts, many, decoding, auto)


def translate_answer(call: TranslateCall, results: Sequence[Sequence[Any]], source: str) -> dict:
    """The JSON answer of ``call``: ``translatedText`` (a string, or a list for a list ``q``),
    ``alternatives`` when asked (the next best translations, best first; a sentence may have
    fewer), ``detectedLanguage`` for ``source: "auto"`` (the model's ``source`` language,
    assumed, with no confidence: nothing was detected). ``results``: per sentence, its
    hypotheses (objects with ``text``), best first."""
    best = [found[0].text if found else "" for found in results]
    others = [[h.text for h in found[1 : 1 + call.alternatives]] for found in results]
    answer: dict[str, Any] = {"translatedText": best if call.many else best[0]}
    if call.alternatives:
        answer["alternatives"] = others if call.many else others[0]
    if call.auto:
        detected = {"language": source}
        answer["detectedLanguage"] = [detected] * len(best) if call.many else detected
    return answer
