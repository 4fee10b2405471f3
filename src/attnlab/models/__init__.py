"""The models: :class:`~attnlab.models.config.TransformerConfig` (every option, its presets and
checks; a leaf), the encoder-decoder :class:`~attnlab.models.transformer.Transformer`, the
decoder-only and encoder-only models, the Vision Transformer, and attnlab's saved format
(``config.json`` + ``model.safetensors``, :func:`~attnlab.models.saved.load_pretrained`)."""
