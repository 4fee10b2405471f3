"""The JSON bodies of the server's routes as pydantic models: what a request may hold (checked
strictly: ``"text": 5`` is an error, not ``"5"``) and what an answer holds, for the routes and
for the OpenAPI schema they publish (docs/serve.md). A request's wire format parses into the one
:class:`~attnlab.decode.options.DecodingOptions` the server decodes with."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..decode.options import DecodingOptions
from .explorer import ATTENTION_DECIMALS
from .limits import MAX_BEAM


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    text: str = Field(description="the source sentence", examples=["three hundred and twelve"])
    beam_size: int | None = Field(
        None, ge=1, le=MAX_BEAM, description="beam width, 1 is greedy (default: the server's)"
    )
    constraints: list[str] | None = Field(
        None,
        max_length=MAX_BEAM,
        description="target phrases the translation must contain (at most beam_size; "
        "constrained beam search)",
    )
    prefix: str | None = Field(
        None, description="target text the translation must start with (null or blank: none)"
    )

    def decoding(self, served: DecodingOptions) -> DecodingOptions:
        """The request's decoding: the server's (``served``) with the beam it asks."""
        return served.updated(beam_size=self.beam_size)


class AttentionRequest(TranslateRequest):
    target: str | None = Field(
        None, description="a target sentence to teacher-force (null or blank: the model's own)"
    )
    layers: list[int] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="layer indices to return (encoder and decoder alike), null for all",
    )
    heads: list[int] | None = Field(
        None, min_length=1, max_length=256, description="head indices to return, null for all"
    )


class MasksRequest(_Strict):
    texts: list[str] = Field(min_length=1, max_length=8, description="one batch of sentences")


class ModelInfo(BaseModel):
    model_type: str
    name: str
    num_parameters: int
    d_model: int
    num_heads: int
    encoder_layers: int
    decoder_layers: int
    max_len: int
    positional: str
    norm_first: bool
    beam_size: int
    vocab_size: int
    tgt_vocab_size: int
    positional_max_length: int


class TranslateResponse(BaseModel):
    translation: str
    source_tokens: list[str]
    output_tokens: list[str]
    token_log_probs: list[float] = Field(
        description="each output token's log-probability under the model (EOS's included)"
    )
    log_prob: float = Field(description="their sum: log P(output | source)")
    score: float = Field(description="log_prob / ((5 + tokens) / 6)^0.6, what the beam ranks by")
    constraints: list[str] = Field(description="the phrases the translation contains, as asked")
    truncated: bool
    source_length: int
    max_len: int


class AttentionMaps(BaseModel):
    layers: list[int] = Field(description="the layers returned, in increasing order")
    heads: list[int] = Field(description="the heads returned, in increasing order")
    queries: int = Field(description="rows of each map")
    keys: int = Field(description="columns of each map")
    weights: list[float] = Field(
        description="every map, flat in [layer][head][query][key] order, rounded to "
        f"{ATTENTION_DECIMALS} decimals"
    )


class AttentionResponse(TranslateResponse):
    teacher_forced: bool
    target_tokens: list[str]
    encoder: AttentionMaps = Field(description="queries and keys: source_tokens")
    decoder: AttentionMaps = Field(description="queries and keys: target_tokens")
    cross: AttentionMaps = Field(description="queries: target_tokens, keys: source_tokens")
    elements: int = Field(description="attention weights in this answer")
    max_elements: int = Field(description="the most the server returns in one answer")
    capped: bool = Field(description="true when some asked-for layers were left out")


class PositionalResponse(BaseModel):
    kind: str
    length: int
    d_model: int
    matrix: list[list[float]] | None
    similarity: list[list[float]] | None
    note: str


class MasksResponse(BaseModel):
    tokens: list[list[str]]
    padding: list[list[bool]]
    look_ahead: list[list[bool]]
    combined: list[list[list[bool]]]
    truncated: list[bool]


class ErrorResponse(BaseModel):
    error: str
    status: int


class DetectedLanguage(BaseModel):
    language: str = Field(description="the model's source language (assumed: no detection)")


class LibreTranslateAnswer(BaseModel):
    """LibreTranslate's answer (for the schema; the route builds it as a dict)."""

    translatedText: str | list[str] = Field(
        description="the translation, or one per sentence when q was a list"
    )
    alternatives: list[str] | list[list[str]] | None = Field(
        None, description="the next best translations, when asked (one list per sentence)"
    )
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = Field(
        None, description='for source "auto"'
    )


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class Health(BaseModel):
    live: bool
    ready: bool = Field(description="the model is loaded and warmed up, and not shutting down")
    draining: bool = Field(description="Ctrl-C or SIGTERM came: in-flight requests finish")


def libre_body(pair: tuple[str, str]) -> dict:
    """``/translate``'s JSON body in the schema, for a model of language ``pair`` (the route
    checks it itself, LibreTranslate's way: 400s; it takes the same fields as a URL-encoded
    form)."""
    q = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    fields = {
        "q": {**q, "description": "a sentence, or a list of them"},
        "source": {"type": "string", "enum": [pair[0], "auto"]},
        "target": {"type": "string", "enum": [pair[1]]},
        "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
        "alternatives": {"type": "integer", "minimum": 0, "default": 0},
        "beam_size": {"type": "integer", "minimum": 1},
        "api_key": {"type": "string", "description": "ignored"},
    }
    body = {"type": "object", "required": ["q", "source", "target"], "properties": fields}
    return {"required": True, "content": {"application/json": {"schema": body}}}


#: POST routes and their request bodies (the guard checks these routes' bodies); None: the
#: route checks its fields itself (``/translate``, which takes a form too).
BODIES: dict[str, type[BaseModel] | None] = {
    "/api/translate": TranslateRequest,
    "/api/attention": AttentionRequest,
    "/api/masks": MasksRequest,
    "/translate": None,
}
