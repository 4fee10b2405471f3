"""Training: the paper's recipe (Vaswani et al. 2017, sec. 5), checkpoints, exact resume, DDP.

* Loss: cross-entropy with label smoothing ``eps_ls = 0.1`` (sec. 5.4) over the non-pad target
  tokens, summed and divided by the number of target tokens of the whole optimizer step (every
  accumulation micro-batch and every replica), so the gradient does not depend on how a step
  is split.
* Optimizer: Adam with ``beta1 = 0.9, beta2 = 0.98, eps = 1e-9`` and the learning rate of
  eq. 3 (:mod:`attnlab.train.schedule`) through ``LambdaLR`` (sec. 5.3); gradient-norm clipping.
* Batches: :class:`attnlab.data.batching.TokenBatcher`, about ``max_tokens`` source and target
  tokens each (sec. 5.1), ``accumulate`` of them per optimizer step.
* Checkpoints: ``out/checkpoints/step-NNNNNNNN/`` written atomically; the last
  ``keep_checkpoints`` are kept; at the end the last ``average_last`` are averaged into
  ``out/model`` (sec. 6.1: "averaging the last 5 checkpoints"), loadable with
  :func:`attnlab.models.transformer.load_pretrained`.
* Resume: ``Trainer.train(resume=True)`` continues from the newest checkpoint with the same
  losses, bit for bit on CPU, as a run never interrupted (weights, Adam moments, schedule,
  data position and RNG states are all restored). The checkpoint is checked whole first
  (digests, schema, every tensor against what it belongs to); a damaged one is skipped with a
  warning, set aside as ``checkpoints/damaged-step-N``, and the previous one used.
* Distributed: under ``torchrun`` call :func:`init_distributed` first; the model is then
  wrapped in ``DistributedDataParallel``, each global batch is split among the ranks, and
  rank 0 alone writes files.

The modules, one concept each:

=================  ===========================================================================
``loop``           :class:`Trainer`: the loop, which knows no task
``objectives/``    one module per task (translation, language model, image classification):
                   batches, loss, metric columns, validation metrics
``step``           one optimizer update over micro-batches and replicas
``config``         :class:`TrainConfig`, every field checked
``optim``          the optimizer and the learning-rate schedule
``position``       where a run stands (counters, best validation, stop reasons)
``checkpoint``     checkpoints on disk: atomic save, checked resume, the averaged final model
``integrity``      a checkpoint's digests and checks of its content before a resume
``rng``            the global RNG states, saved and restored
``distributed``    the process group, sums over replicas, DistributedDataParallel
``metrics``        metrics.csv, TensorBoard, the reporter, the on_evaluate hook's values
``progress``       the time left against step / time bounds, plain lines, train.log, the bar
``validation``     the validation pass
=================  ===========================================================================

Example::

    examples = make_examples(pairs, max_len=model.config.max_len)
    config = TrainConfig(out="runs/numbers", max_tokens=2048, warmup=400, max_steps=2000)
    trainer = Trainer(model, examples, valid_examples, config, objective=TranslationObjective)
    summary = trainer.train()

Files of a run directory ``out``::

    metrics.csv            step, epoch, loss, lr, tokens_per_s, val_loss [, on_evaluate keys]
                           (a classifier: images_per_s, and val_accuracy after val_loss)
    checkpoints/step-N/    model.safetensors, config.json, optimizer.safetensors, state.json
    model/                 averaged weights (+ config.json, tokenizer files)
    summary.json           what train() returns
"""

from .checkpoint import CHECKPOINT_FORMAT, find_checkpoints
from .config import TrainConfig
from .distributed import destroy_distributed, init_distributed, world
from .loop import EvaluateHook, Trainer
from .metrics import IMAGE_METRICS_COLUMNS, METRICS_COLUMNS
from .objectives import Objective

__all__ = [
    "CHECKPOINT_FORMAT",
    "IMAGE_METRICS_COLUMNS",
    "METRICS_COLUMNS",
    "EvaluateHook",
    "Objective",
    "TrainConfig",
    "Trainer",
    "destroy_distributed",
    "find_checkpoints",
    "init_distributed",
    "world",
]
