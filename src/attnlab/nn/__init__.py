"""The building blocks of the Transformer: masks (the one convention, True = may attend),
attention (eq. 1, multi-head, sec. 3.2), positional encodings (sec. 3.5, learned, rotary,
ALiBi), embeddings, the encoder and decoder layers and stacks (sec. 3.1, 3.3), and the KV cache
of incremental decoding. Tensors are batch-first: ``(B, T, C)``; heads ``(B, H, T, Dh)``."""
