"""The main job: train a model end to end, and evaluate it.

A :class:`Job` is one TOML file (or a task's recipe alone) with five tables (six for a
student)::

    [task]       # what to learn: numbers | multi30k | files | text | digits, the data
    [tokenizer]  # BPE: vocabulary size, joint or separate
    [model]      # a TransformerConfig (VisionConfig for digits) preset and fields to override
    [train]      # attnlab.train.TrainConfig fields (batch tokens, schedule, steps, ...)
    [eval]       # beam search for the final test and the BLEU measured while training
    [distill]    # optional: a student's teachers, whose translations it trains on

What a job leaves out comes from its task's recipe, a packaged TOML file
(``attnlab/recipes/*.toml``, linked from the repository's ``configs/``); the tasks are the
registry :data:`attnlab.tasks.TASKS`. Every key of every table is checked when the job is parsed
(:meth:`Job.from_dict`, with "did you mean" for a near miss), and every value of ``[model]``
and ``[train]`` by :meth:`Job.check`, before any work starts.

:func:`train_job` runs it: load the corpus, train the tokenizers on the training split only,
encode, build the model, train (checkpoints, resume, metrics), average the last checkpoints
into ``OUT/model`` (weights, config, tokenizers, the job), then translate the test split with
beam search and score it (``OUT/results.json``). :func:`evaluate_model` scores a saved model
on a split of its task.
"""

from ..tasks import TASKS, Task
from .job import JOB_FILE, TABLES, EvalOptions, Job, TokenizerOptions, recipe, task_from
from .run import RESULTS_FILE, evaluate_model, read_job, train_job

__all__ = [
    "JOB_FILE",
    "RESULTS_FILE",
    "TABLES",
    "TASKS",
    "EvalOptions",
    "Job",
    "Task",
    "TokenizerOptions",
    "evaluate_model",
    "read_job",
    "recipe",
    "task_from",
    "train_job",
]
