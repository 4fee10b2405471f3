"""The main job: compose it, check it, train a model end to end, and evaluate it.

A :class:`Job` is one TOML file (or a task's recipe alone) with five tables (six for a
student)::

    [task]       # what to learn: numbers | multi30k | files | text | digits, the data
    [tokenizer]  # BPE: vocabulary size, joint or separate
    [model]      # a TransformerConfig (VisionConfig for digits) preset and fields to override
    [train]      # attnlab.train.TrainConfig fields (batch tokens, schedule, steps, ...)
    [eval]       # beam search for the final test and the BLEU measured while training
    [distill]    # optional: a student's teachers, whose translations it trains on

What a job leaves out comes from its task's recipe, a packaged TOML file
(``attnlab/recipes/*.toml``, linked from the repository's ``configs/``; read by
:mod:`attnlab.jobs.recipes`); the tasks are the registry :data:`attnlab.tasks.TASKS`.
:func:`compose_job` builds a job as ``attnlab train`` does: the recipe, then a job file (or a
recipe's name, or tables), then flags, then ``--set`` settings, a later one winning::

    job = compose_job("configs/numbers.toml", sets=[("train", "max_steps", 100)])

Every key of every table is checked when the job is parsed (:meth:`Job.from_dict`, with "did
you mean" for a near miss), and every value, once, by :meth:`Job.check`, before any work
starts; it returns the :class:`~attnlab.tasks.TaskContext` the task reads (the job's tables and
the run's :class:`~attnlab.train.TrainConfig`, built there once).

:func:`train_job` runs it: load the corpus, train the tokenizers on the training split only,
encode, build the model, train it with the objective its task names (checkpoints, resume,
metrics), average the last checkpoints into ``OUT/model`` (weights, config, tokenizers, the
job), then translate the test split with beam search and score it (``OUT/results.json``).
:func:`evaluate_model` scores a saved model on a split of its task.
"""

from ..tasks import TASKS, Task, TaskContext
from .compose import compose_job
from .job import JOB_FILE, TABLES, EvalOptions, Job, TokenizerOptions, task_from
from .recipes import recipe, recipe_names, recipe_text
from .run import RESULTS_FILE, evaluate_model, read_job, train_job

__all__ = [
    "JOB_FILE",
    "RESULTS_FILE",
    "TABLES",
    "TASKS",
    "EvalOptions",
    "Job",
    "Task",
    "TaskContext",
    "TokenizerOptions",
    "compose_job",
    "evaluate_model",
    "read_job",
    "recipe",
    "recipe_names",
    "recipe_text",
    "task_from",
    "train_job",
]
