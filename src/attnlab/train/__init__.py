"""Training (being split into a package: the loop, its config, checkpoints, distributed, the
metrics log and one objective per task). Everything is importable from ``attnlab.train``."""

from .loop import (
    CHECKPOINT_FORMAT,
    IMAGE_METRICS_COLUMNS,
    METRICS_COLUMNS,
    TrainConfig,
    Trainer,
    _capture_rng,
    _optimizer,
    _restore_rng,
    _world,
    destroy_distributed,
    find_checkpoints,
    init_distributed,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "IMAGE_METRICS_COLUMNS",
    "METRICS_COLUMNS",
    "TrainConfig",
    "Trainer",
    "_capture_rng",
    "_optimizer",
    "_restore_rng",
    "_world",
    "destroy_distributed",
    "find_checkpoints",
    "init_distributed",
]
