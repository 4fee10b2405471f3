"""The Vision Transformer (ViT; Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image is cut into non-overlapping ``P x P`` patches, each patch is projected linearly to
``d_model`` (sec. 3.1, eq. 1), a learned class token is prepended, position embeddings are
added, and the sequence runs through a pre-LN Transformer encoder (:class:`attnlab.Encoder`,
GELU, a final LayerNorm; eq. 2-4). The class token's output feeds a linear classifier.

* :class:`VisionConfig`: the hyper-parameters, with the paper's Ti/S/B/L-16 presets (Table 1;
  Ti and S from Touvron et al. 2021) and ``digits`` for 8x8 scikit-learn digits on a CPU.
* :func:`patchify` and :class:`PatchEmbedding`: images -> patches -> tokens.
* :func:`sincos_2d_table`: the fixed 2-D sine-cosine position table (Beyer et al. 2022; MAE).
* :class:`VisionTransformer`: the model; ``save_pretrained`` / ``from_pretrained`` as the other
  attnlab models, and ``attnlab.load_pretrained`` knows it (model_type ``"vit"``).
* :func:`count_vit_parameters`: the closed-form parameter count (ViT-B/16: 86,567,656).
* :func:`attention_rollout` and :func:`class_token_rollout`: attention rollout (Abnar and
  Zuidema 2020), what ViT's figure 6 shows.

Images are float tensors ``(B, C, H, W)``, ``H == W == image_size``; tokens are ``(B, T, d)``
with ``T = 1 + N``, the class token first, then the ``N = (image_size / patch_size)^2``
patches in row-major order (patch ``(r, c)`` is token ``1 + r * grid + c``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_bool,
    check_positive_int,
    check_positive_number,
    check_rate,
    check_type,
    shape_of,
)
from .._ops import dropout
from ..nn.attention import MultiHeadAttention
from ..nn.layers import ACTIVATIONS, Encoder
from .config import PresetConfig
from .saved import PretrainedModel, register_model_type

__all__ = [
    "PatchEmbedding",
    "VisionConfig",
    "VisionTransformer",
    "attention_rollout",
    "class_token_rollout",
    "count_vit_parameters",
    "patchify",
    "sincos_2d_table",
]

VISION_POSITIONAL_KINDS = ("learned", "sinusoidal", "none")
HEAD_FUSIONS = ("mean", "max", "min")


@dataclass
class VisionConfig(PresetConfig):
    """Hyper-parameters of a :class:`VisionTransformer` (defaults: ViT-B/16 at 224 px, Table 1).

    Attributes:
        image_size: side of the square input images, in pixels (224 in the paper).
        patch_size: side P of the square patches; must divide ``image_size`` (16 for "/16").
        in_channels: colour channels C of the images (3 for RGB, 1 for grayscale).
        num_classes: K, the classifier's outputs (1000 for ImageNet).
        d_model: D, the token width ("hidden size", Table 1).
        num_heads: attention heads; must divide ``d_model``.
        d_ff: the MLP's inner width ("MLP size", Table 1).
        num_layers: encoder layers ("layers", Table 1).
        dropout: dropout after the embeddings, on each residual branch and after the MLP's GELU
            (as ViT's MlpBlock); 0.1 for ImageNet in Table 3.
        attention_dropout: dropout on the attention weights (0 in ViT).
        activation: the MLP's activation, ``gelu`` (ViT) or another of :mod:`attnlab.nn.layers`'.
        layer_norm_eps: LayerNorm epsilon (1e-6 as ViT's code).
        positional: ``learned`` (ViT: a trained ``(1 + N, D)`` table), ``sinusoidal`` (the fixed
            2-D sine-cosine table of :func:`sincos_2d_table`), or ``none`` (the model then sees
            the patches as a set: permuting them leaves the logits unchanged).
        bias: biases of the encoder's linear maps (attention projections and MLP); the patch
            embedding and the head always have one.
    """

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    num_layers: int = 12
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "gelu"
    layer_norm_eps: float = 1e-6
    positional: str = "learned"
    bias: bool = True

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        # 8x8 grayscale digits (scikit-learn's), 16 patches of 2x2: trains on a CPU in minutes.
        "digits": {
            "image_size": 8,
            "patch_size": 2,
            "in_channels": 1,
            "num_classes": 10,
            "d_model": 64,
            "num_heads": 4,
            "d_ff": 128,
            "num_layers": 4,
            "dropout": 0.1,
        },
        # ViT-Ti/16 and ViT-S/16 (Touvron et al. 2021, DeiT): 5.7M and 22.1M parameters.
        "vit-ti16": {"d_model": 192, "num_heads": 3, "d_ff": 768},
        "vit-s16": {"d_model": 384, "num_heads": 6, "d_ff": 1536},
        # ViT-B/16 and ViT-L/16 (Dosovitskiy et al. 2021, Table 1): 86.6M and 304.3M.
        "vit-b16": {},
        "vit-l16": {"d_model": 1024, "num_heads": 16, "d_ff": 4096, "num_layers": 24},
    }

    @property
    def grid_size(self) -> int:
        """Patches along each side: ``image_size // patch_size``."""
        return self.image_size // self.patch_size

    @property
    def num_patches(self) -> int:
        """N, the patch tokens: ``grid_size ** 2`` (the sequence is ``1 + N`` long)."""
        return self.grid_size**2

    def validate(self) -> None:
        """Raise ValueError (naming the field) unless the config describes a buildable model."""
        for name in (
            "image_size",
            "patch_size",
            "in_channels",
            "num_classes",
            "d_model",
            "num_heads",
            "d_ff",
            "num_layers",
        ):
            check_positive_int(getattr(self, name), name)
        for name in ("dropout", "attention_dropout"):
            check_rate(getattr(self, name), name)
        check_positive_number(self.layer_norm_eps, "layer_norm_eps")
        check_bool(self.bias, "bias")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation: expected one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        if self.positional not in VISION_POSITIONAL_KINDS:
            raise ValueError(
                f"positional: expected one of {list(VISION_POSITIONAL_KINDS)}, got "
                f"{self.positional!r}"
            )
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size: {self.image_size} is not divisible by patch_size={self.patch_size}"
            )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: {self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        if self.positional == "sinusoidal" and self.d_model % 4:
            raise ValueError(
                f"d_model: {self.d_model} is not divisible by 4, which the 2-D sin-cos table "
                f"needs (positional='sinusoidal': sin and cos of the row and of the column)"
            )

    def num_parameters(self) -> int:
        """The parameter count of a :class:`VisionTransformer` of this config (see
        :func:`count_vit_parameters`)."""
        return count_vit_parameters(self)


def count_vit_parameters(config: VisionConfig) -> int:
    """The number of parameters of ``VisionTransformer(config)``, from the shapes.

    Patch embedding ``C P^2 D + D``; class token ``D``; learned positions ``(1 + N) D``; per
    layer: attention ``4 D^2 (+ 4 D)``, MLP ``2 D D_ff (+ D_ff + D)``, two LayerNorms ``4 D``;
    the final LayerNorm ``2 D``; the head ``D K + K``. ViT-B/16 with 1000 classes has
    86,567,656 (the "86M" of Table 1; timm's ``vit_base_patch16_224`` has as many).
    """
    _check_vision_config(config)
    d, d_ff, bias = config.d_model, config.d_ff, int(config.bias)
    patches = config.in_channels * config.patch_size**2 * d + d
    class_token = d
    positions = (1 + config.num_patches) * d if config.positional == "learned" else 0
    attention = 4 * d * d + bias * 4 * d
    mlp = 2 * d * d_ff + bias * (d_ff + d)
    layer = attention + mlp + 2 * (2 * d)
    head = d * config.num_classes + config.num_classes
    return patches + class_token + positions + config.num_layers * layer + 2 * d + head


# -- patches -----------------------------------------------------------------------------------


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into flattened non-overlapping patches (ViT, sec. 3.1: ``x_p``).

    Args:
        images: ``(B, C, H, W)``, ``H`` and ``W`` divisible by ``patch_size``.
        patch_size: P.

    Returns:
        ``(B, N, C * P * P)`` with ``N = (H / P) (W / P)``, patches in row-major order; inside a
        patch the values are channel-major, then row, then column: the order in which
        ``Conv2d.weight`` of shape ``(D, C, P, P)`` flattens, so that
        ``PatchEmbedding(x) == patchify(x, P) @ weight.reshape(D, -1).T + bias``.
    """
    check_positive_int(patch_size, "patch_size")
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError(f"images: expected shape (B, C, H, W), got {shape_of(images)}")
    height, width = images.shape[-2:]
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"images: {height}x{width} is not divisible into {patch_size}x{patch_size} patches"
        )
    columns = F.unfold(images, kernel_size=patch_size, stride=patch_size)  # (B, C*P*P, N)
    return columns.transpose(1, 2)  # (B, N, C*P*P)


def check_images(images: object, image_size: int, in_channels: int) -> None:
    """Raise unless ``images`` is a float ``(B, C, H, W)`` tensor of ``in_channels`` channels
    and ``image_size x image_size`` pixels; the error says what to change."""
    expected = f"(B, {in_channels}, {image_size}, {image_size})"
    check_type(images, Tensor, "images", f"a float tensor of shape {expected}")
    if images.dim() == 3:
        hint = (
            "add the channel dimension: images.unsqueeze(1)"
            if in_channels == 1
            else "for one image, add the batch dimension: images.unsqueeze(0)"
        )
        raise ValueError(f"images: expected shape {expected}, got {tuple(images.shape)}; {hint}")
    if images.dim() != 4:
        raise ValueError(f"images: expected shape {expected}, got {tuple(images.shape)}")
    if not images.dtype.is_floating_point:
        raise TypeError(
            f"images: expected a floating dtype, got {images.dtype} (convert, e.g. "
            f"images.float() / 255)"
        )
    batch, channels, height, width = images.shape
    if channels != in_channels:
        raise ValueError(
            f"images: expected {in_channels} channel(s) (in_channels={in_channels}), got "
            f"{channels} in shape {tuple(images.shape)}"
        )
    if height != image_size or width != image_size:
        raise ValueError(
            f"images: expected {image_size}x{image_size} images (image_size={image_size}), got "
            f"{height}x{width}"
        )
    if batch == 0:
        raise ValueError(f"images: empty batch, shape {tuple(images.shape)}")


class PatchEmbedding(nn.Module):
    """Linear projection of flattened patches (ViT, sec. 3.1, eq. 1: ``x_p^i E``), computed as
    a convolution with kernel and stride ``patch_size``.

    Args:
        image_size, patch_size, in_channels, d_model: as :class:`VisionConfig`.

    Shape: ``forward(images (B, C, H, W)) -> (B, N, d_model)``, patches in row-major order;
    ``H == W == image_size`` (checked, see :func:`check_images`). Images of another floating
    dtype are cast to the weights' (float64 pixels into a float32 model).
    """

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_model: int) -> None:
        super().__init__()
        for name, value in (
            ("image_size", image_size),
            ("patch_size", patch_size),
            ("in_channels", in_channels),
            ("d_model", d_model),
        ):
            check_positive_int(value, name)
        if image_size % patch_size:
            raise ValueError(
                f"image_size: {image_size} is not divisible by patch_size={patch_size}"
            )
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}, patch_size={self.patch_size}"

    def forward(self, images: Tensor) -> Tensor:
        check_images(images, self.image_size, self.in_channels)
        x = self.proj(images.to(self.proj.weight.dtype))  # (B, d_model, grid, grid)
        return x.flatten(2).transpose(1, 2)  # (B, N, d_model), row-major patches


def sincos_2d_table(grid: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """The fixed 2-D sine-cosine position table of the ``grid x grid`` patches, ``(N, d_model)``
    float64 (Beyer et al. 2022, "Better plain ViT baselines"; He et al. 2022, MAE).

    Each quarter of the channels holds one of ``sin(r w_k)``, ``cos(r w_k)``, ``sin(c w_k)``,
    ``cos(c w_k)`` (in that order) for patch row ``r`` and column ``c``, with the paper's
    frequencies ``w_k = base^(-k / (d_model / 4))``, ``k = 0 .. d_model / 4 - 1`` (Vaswani et
    al. 2017, sec. 3.5, per axis). The first half of a row depends on the patch row alone, the
    second half on the column alone. Row ``r * grid + c`` is patch ``(r, c)``.
    """
    check_positive_int(grid, "grid")
    check_positive_int(d_model, "d_model")
    if d_model % 4:
        raise ValueError(f"d_model: {d_model} is not divisible by 4 (sin and cos of two axes)")
    quarter = d_model // 4
    omega = base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (d/4,)
    rows, cols = torch.meshgrid(
        torch.arange(grid, dtype=torch.float64),
        torch.arange(grid, dtype=torch.float64),
        indexing="ij",
    )
    row_angles = rows.reshape(-1, 1) * omega  # (N, d/4)
    col_angles = cols.reshape(-1, 1) * omega  # (N, d/4)
    return torch.cat(
        [row_angles.sin(), row_angles.cos(), col_angles.sin(), col_angles.cos()], dim=1
    )  # (N, d_model)


# -- the model ---------------------------------------------------------------------------------


def _check_vision_config(config: object) -> VisionConfig:
    config = check_type(config, VisionConfig, "config", "a VisionConfig")
    config.validate()
    return config


class VisionTransformer(PretrainedModel):
    """The Vision Transformer (Dosovitskiy et al. 2021, sec. 3.1, figure 1, eq. 1-4).

    ``z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos`` (eq. 1), dropout, then ``num_layers``
    pre-LN encoder layers of multi-head self-attention and a GELU MLP (eq. 2, 3), a final
    LayerNorm (eq. 4), and the linear ``head`` on the class token's output.

    Initialisation (as ViT's code): Xavier-uniform linear weights (q, k and v each on their own,
    the patch projection as a linear map of the flattened patch, as MAE), zero biases; class
    token and learned positions N(0, 0.02^2). The ``head`` is zero-initialised, as ViT's code
    does: a fresh model predicts the uniform distribution (loss ``ln K``) and its logits are all
    zero until trained.

    Shape: ``forward(images (B, C, H, W)) -> logits (B, num_classes)``;
    ``features(images) -> (B, 1 + N, d_model)``; ``attention(images) -> [(B, H, T, T)] * L``.

    Example::

        model = VisionTransformer(VisionConfig.preset("digits"))
        logits = model(images)                      # images (B, 1, 8, 8) float
        saliency = class_token_rollout(model, images)  # (B, 4, 4)
    """

    model_type = "vit"
    config_class = VisionConfig
    uses_layers = ("num_layers",)
    config: VisionConfig

    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        self.config = _check_vision_config(config)
        c = config
        d = c.d_model
        self.patch_embed = PatchEmbedding(c.image_size, c.patch_size, c.in_channels, d)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.position_embedding: Tensor | None
        if c.positional == "learned":
            self.position_embedding = nn.Parameter(torch.zeros(1, 1 + c.num_patches, d))
        elif c.positional == "sinusoidal":
            # Fixed, so not saved: rebuilt from the config on load.
            self.register_buffer("position_embedding", self._fixed_table(), persistent=False)
        else:
            self.position_embedding = None
        self.dropout = c.dropout
        self.encoder = Encoder(
            c.num_layers,
            d,
            c.num_heads,
            c.d_ff,
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            activation_dropout=c.dropout,
            activation=c.activation,
            norm_first=True,
            layer_norm_eps=c.layer_norm_eps,
            bias=c.bias,
        )
        self.head = nn.Linear(d, c.num_classes)
        self._init_weights()

    def _fixed_table(self) -> Tensor:
        """The sinusoidal position table ``(1, 1 + N, d_model)``, float32, the class row 0."""
        d = self.config.d_model
        if torch.empty(0).is_meta:  # built on the meta device to be loaded: the shape alone
            return torch.empty(1, 1 + self.config.num_patches, d)
        table = sincos_2d_table(self.config.grid_size, d)
        return torch.cat([torch.zeros(1, d, dtype=table.dtype), table])[None].to(torch.float32)

    def reset_buffers(self) -> None:
        """Compute the fixed position table again (it is not saved; a model loaded on the meta
        device calls this)."""
        if self.config.positional == "sinusoidal":
            self.position_embedding = self._fixed_table()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for module in self.modules():
            if isinstance(module, MultiHeadAttention) and module.in_proj is not None:
                for block in module.in_proj.weight.chunk(3):  # W^Q, W^K, W^V: (d, d) each
                    nn.init.xavier_uniform_(block)
        proj = self.patch_embed.proj
        nn.init.xavier_uniform_(proj.weight.view(proj.weight.shape[0], -1))
        nn.init.zeros_(proj.bias)
        nn.init.normal_(self.class_token, std=0.02)
        if isinstance(self.position_embedding, nn.Parameter):
            nn.init.normal_(self.position_embedding, std=0.02)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def positional_table(self) -> Tensor | None:
        """The position embeddings ``(1 + N, d_model)`` (row 0: the class token's, then the
        patches row-major), or None for ``positional="none"``."""
        if self.position_embedding is None:
            return None
        return self.position_embedding[0]

    def _run(self, images: Tensor, need_weights: bool) -> tuple[Tensor, list[Tensor] | None]:
        x = self.patch_embed(images)  # (B, N, d), checks images
        token = self.class_token.expand(x.shape[0], -1, -1)  # (B, 1, d)
        x = torch.cat([token, x], dim=1)  # (B, 1 + N, d)
        if self.position_embedding is not None:
            x = x + self.position_embedding.to(x.dtype)
        x = dropout(x, self.dropout, self.training)
        return self.encoder(x, need_weights=need_weights)  # final-normed, eq. 4's LN

    def features(self, images: Tensor) -> Tensor:
        """The encoder's final-normed tokens ``(B, 1 + N, d_model)``; token 0 is the class
        token's ``y`` of eq. 4."""
        x, _ = self._run(images, need_weights=False)
        return x

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(B, num_classes)`` of images ``(B, C, H, W)``."""
        x, _ = self._run(images, need_weights=False)
        return self.head(x[:, 0])  # (B, num_classes)

    @torch.no_grad()
    def attention(self, images: Tensor) -> list[Tensor]:
        """Self-attention weights of every layer, each ``(B, H, 1 + N, 1 + N)`` (rows sum to 1;
        token 0 is the class token)."""
        _, weights = self._run(images, need_weights=True)
        return weights


register_model_type(VisionTransformer)


# -- attention rollout -------------------------------------------------------------------------


def attention_rollout(
    attentions: Sequence[Tensor], *, head_fusion: str = "mean", residual: bool = True
) -> Tensor:
    """Attention rollout (Abnar and Zuidema 2020, sec. 3): how much each input token flows into
    each output token through all layers, with the residual connections accounted for.

    Per layer the heads are fused (``mean``, or ``max`` / ``min`` over heads), the residual is
    added as ``0.5 A + 0.5 I`` (when ``residual``), and rows are renormalised to sum to 1
    (a row of zeros stays zero). The layers are then multiplied from the first to the last:
    ``rollout = A_L ... A_2 A_1``.

    Args:
        attentions: per layer, ``(B, H, T, T)`` weights (e.g. :meth:`VisionTransformer.attention`).
        head_fusion: ``"mean"``, ``"max"`` or ``"min"``.
        residual: add the identity for the residual connections.

    Returns:
        ``(B, T, T)``: row ``i`` is the share of each input token in output token ``i``, summing
        to 1. Computed in float32 at least (float64 stays float64).
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion: expected one of {list(HEAD_FUSIONS)}, got {head_fusion!r}")
    check_bool(residual, "residual", TypeError)
    if isinstance(attentions, Tensor) or not isinstance(attentions, Sequence):
        given = type(attentions).__name__
        if isinstance(attentions, Tensor):
            given = f"a tensor of shape {tuple(attentions.shape)} (use list(tensor) for layers)"
        raise TypeError(
            f"attentions: expected a list over layers of (B, H, T, T) tensors, got {given}"
        )
    if len(attentions) == 0:
        raise ValueError("attentions: expected at least one layer, got an empty list")
    first = attentions[0]
    for i, a in enumerate(attentions):
        if not isinstance(a, Tensor) or a.dim() != 4 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"attentions[{i}]: expected a (B, H, T, T) tensor, got {shape_of(a)}")
        if a.shape != first.shape:
            raise ValueError(
                f"attentions[{i}]: shape {tuple(a.shape)} differs from attentions[0]'s "
                f"{tuple(first.shape)}"
            )
        if not a.dtype.is_floating_point:
            raise TypeError(f"attentions[{i}]: expected a floating dtype, got {a.dtype}")
    dtype = torch.promote_types(first.dtype, torch.float32)
    size = first.shape[-1]
    eye = torch.eye(size, dtype=dtype, device=first.device)
    rollout = None
    for a in attentions:
        a = a.detach().to(dtype)
        fused = {"mean": a.mean, "max": a.amax, "min": a.amin}[head_fusion](dim=1)  # (B, T, T)
        if residual:
            fused = 0.5 * fused + 0.5 * eye
        fused = fused / fused.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
        rollout = fused if rollout is None else fused @ rollout  # A_l (A_{l-1} ... A_1)
    return rollout


def class_token_rollout(
    model: VisionTransformer,
    images: Tensor,
    *,
    head_fusion: str = "mean",
    residual: bool = True,
) -> Tensor:
    """Where the class token looks, through all layers: row 0 of :func:`attention_rollout`
    over the patch tokens, as the patch grid ``(B, grid, grid)``, each map summing to 1.

    ViT's figure 6 shows such maps upsampled over the images
    (:func:`attnlab.instruments.viz.attention_rollout_map` draws one).
    """
    check_type(model, VisionTransformer, "model", "a VisionTransformer")
    rollout = attention_rollout(model.attention(images), head_fusion=head_fusion, residual=residual)
    grid = model.config.grid_size
    patches = rollout[:, 0, 1:]  # (B, N): the class token's share of each patch
    patches = patches / patches.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(patches.dtype).tiny)
    return patches.reshape(-1, grid, grid)  # (B, grid, grid)
