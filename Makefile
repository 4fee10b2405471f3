# attnlab: every target installs what it needs into .venv, under constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
CONSTRAINTS := constraints.txt

.PHONY: test test-wheel test-fast test-load soak demo tour train-multi30k train-multi30k-seeds distill-multi30k finetune-numbers train-digits serve bench bench-constrained explain lint docs format clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's requirements or pins change.
$(STAMP): $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e '.[test,dev]'
	touch $(STAMP)

# The package alone (its core dependencies): what the demo needs, a third of the install time.
CORE_STAMP := $(VENV)/.installed-core
$(CORE_STAMP): $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e .
	touch $(CORE_STAMP)

# Everything, as CI runs it.
test: $(STAMP)
	$(PY) -m pytest -q

# The package as a user installs it: a wheel, no extras, a fresh venv outside the source tree;
# a 20-step training, a translation and an evaluation from the installed command.
WHEEL_DIR := build/wheel-check
test-wheel: $(STAMP)
	rm -rf $(WHEEL_DIR)
	$(PIP) wheel --quiet --no-deps --wheel-dir $(WHEEL_DIR)/dist .
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/python -m pip install --quiet -c $(CONSTRAINTS) $(WHEEL_DIR)/dist/attnlab-*.whl
	cd $(WHEEL_DIR) && venv/bin/attnlab train --task numbers --out run --no-progress \
		--max-steps 20 --eval-every 20 --checkpoint-every 20 --set task.valid_size=20 \
		--set task.test_size=20 --set train.warmup=5 --set train.average_last=1 \
		--set eval.bleu_sentences=5
	cd $(WHEEL_DIR) && venv/bin/attnlab translate --model run/model "twelve" "forty-two"
	cd $(WHEEL_DIR) && venv/bin/attnlab evaluate --model run/model --json > evaluate.json
	cd $(WHEEL_DIR) && venv/bin/python -c "import json, sys; r = json.load(open('evaluate.json')); sys.exit(0 if 0 <= r['chrf'] <= 100 and 'exact_match' in r else 'evaluate.json: ' + str(sorted(r)))"

# The edit-test loop (< 2 minutes on 2 cores): all but the tests marked slow or browser.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not browser"

# Train the offline numbers model from scratch for a fixed number of steps (the same model on a
# fast, slow or busy machine; <= 5 minutes on 2 cores with the install), score it on the 500
# held-out test numbers, and translate a few. A rerun starts the demo over (--overwrite).
demo: $(CORE_STAMP)
	$(VENV)/bin/attnlab train --config configs/numbers.toml --out runs/numbers --overwrite
	$(VENV)/bin/attnlab translate --model runs/numbers/model --beam-size 1 "twelve" \
		"three hundred and twelve" "five thousand, four hundred and ninety-seven"

# The real benchmark: Multi30K en->de, 6,600 steps (40-65 minutes on 2 idle cores, by machine in
# docs/benchmarks.md; a 120-minute cap says so if it fires), sacreBLEU on test_2016_flickr.
train-multi30k: $(STAMP)
	$(VENV)/bin/attnlab train --config configs/multi30k-en-de.toml --out runs/multi30k-en-de

# The README's seed table: the same recipe with seeds 0, 1 and 2, one after the other with 2
# threads each (how the table was trained); the 120-minute cap is lifted (600 minutes, counted
# across resumes, pauses and busy hours included) so that a slower or shared machine trains the
# same models. A rerun retrains only the seeds that did not finish.
train-multi30k-seeds: $(STAMP)
	$(PY) tools/train_seeds.py --config configs/multi30k-en-de.toml --out runs/multi30k-seeds \
		--seeds 0 1 2 --jobs 1 --threads 2 -- --max-minutes 600

# Issue 45's pipeline (docs/distillation.md): the recipe's three seeds as teachers (the target
# above), then the students, each trained on their ensemble's translations of the training
# sources (decoded once into the shard cache, then reused by every student): three of the
# recipe's shape (on the distilled and the original pairs; the same with its steps scaled to
# its pairs, 13,200, since it sees twice the teachers' pairs: the teachers' 56 epochs, not 28;
# on the distilled pairs alone), and the fast deep-encoder students with 1 and 2 decoder layers
# (each choice is made on validation); then benchmarks/distill.py (the ensemble's scores, BLEU
# against tokens/s, the goals; the blind sets of $ATTNLAB_MULTI30K_BLIND translated by every
# system) and its batch-1 profile (--profile). The students train in the order their results
# are needed: the fast one first (the engine's goal), the recipe's shape next (the goal of a
# student above its teacher), the ablations last. A rerun redoes only what is missing: a student
# with a results.json is kept, one killed after a checkpoint resumes from it, and the
# teachers' decoding resumes after its last finished chunk.
define train_student
	@if [ -f runs/$(1)/results.json ]; then echo "$(1): already trained (runs/$(1)/results.json)"; \
	else set -x; $(VENV)/bin/attnlab train --config $(2) --out runs/$(1) --no-progress \
		--max-minutes 600 $(3) $$(ls -d runs/$(1)/checkpoints/step-* >/dev/null 2>&1 && echo --resume); fi
endef

distill-multi30k: train-multi30k-seeds
	$(call train_student,multi30k-student-6-2,configs/multi30k-student.toml)
	$(call train_student,multi30k-student-4-4,configs/multi30k-distilled.toml)
	$(call train_student,multi30k-student-4-4-scaled,configs/multi30k-distilled.toml,--set train.max_steps=13200)
	$(call train_student,multi30k-student-6-1,configs/multi30k-student.toml,--set model.num_decoder_layers=1)
	$(call train_student,multi30k-student-4-4-kd-only,configs/multi30k-distilled.toml,--set distill.keep_original=false)
	$(PY) benchmarks/distill.py --runs runs
	$(PY) benchmarks/distill.py --profile

# docs/pretrained.md's domain shift: fine-tune a Multi30K model (run `make train-multi30k`
# first, or set FT_MODEL) on the numbers task written as parallel files, and score before and
# after (numbers test and validation, Multi30K validation); the table and OUT/finetune.json.
# Multi30K: MULTI30K=DIR, else where attnlab looks ($$ATTNLAB_MULTI30K, else the cache that
# `attnlab download multi30k` fills).
FT_MODEL ?= runs/multi30k-en-de/best
MULTI30K ?=
finetune-numbers: $(STAMP)
	$(PY) tools/finetune_domain.py --model $(FT_MODEL) $(if $(MULTI30K),--multi30k $(MULTI30K)) \
		--out runs/finetune-numbers

# A Vision Transformer on scikit-learn's 8x8 digits: >= 97% test accuracy in 3,000 steps
# (about 90 s on 2 idle cores).
train-digits: $(STAMP)
	$(VENV)/bin/attnlab train --task digits --out runs/digits
	$(VENV)/bin/attnlab viz rollout --model runs/digits/model --out runs/digits/pictures
	$(VENV)/bin/attnlab viz learned-pe --model runs/digits/model --out runs/digits/pictures/positions.png

# The attention explorer on the demo's model (run `make demo` first): http://127.0.0.1:8000
MODEL ?= runs/numbers/model
serve: $(STAMP)
	$(VENV)/bin/attnlab serve --model $(MODEL)

tour: $(STAMP)
	$(VENV)/bin/attnlab tour

# The explorer under load: 50 clients for 60 s against `attnlab serve` on 127.0.0.1, with torch
# threads 1 and 2 (run `make demo` first, or set MODEL); only 200s and 503s may come back.
test-load: $(STAMP)
	$(PY) benchmarks/serve_load.py --model $(MODEL) --out benchmarks/results/serve_load.json

# An hour under hostile load (docs/serve.md): `attnlab serve` with keys and limits against 64
# clients, a tenth flooding, a tenth leaving mid-request, a tenth of the requests malformed,
# bursts of 4x; no 5xx but 503, none unanswered, every answer right (run `make demo` first).
soak: $(STAMP)
	$(PY) benchmarks/serve_soak.py --model $(MODEL) --minutes 60 --out benchmarks/results/serve_soak.json

bench: $(STAMP)
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/model.py
	$(PY) benchmarks/decode.py
	$(PY) benchmarks/static_decode.py
	$(PY) benchmarks/int8_linear.py --threads 1
	$(PY) benchmarks/int8_linear.py --threads 2 --out benchmarks/results/int8_linear_2t.json

# Constrained decoding on Multi30K's validation split (README, "Terminology, completion and
# confidence"): constraints met, BLEU/chrF, tokens/s against plain beam search. MODEL is a
# trained Multi30K model; the data is $$ATTNLAB_MULTI30K (or the cache that `attnlab download
# multi30k` and `attnlab train` fill).
MODEL ?= runs/multi30k-2000/model
bench-constrained: $(STAMP)
	$(PY) benchmarks/constrained.py --model $(MODEL)

# The tutorial's claims, run and checked: docs/explain/report.md and its figures.
explain: $(STAMP)
	$(VENV)/bin/attnlab explain --out docs/explain

# Style, and types: mypy strict on the core modules ([tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml) into site/, strict: a broken link, a page missing from the
# nav or a docstring section it cannot parse fails the build. The CLI reference and the API
# index are written from the code at build time (tools/docs_hooks.py). Offline but for PyPI.
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install --quiet -c $(CONSTRAINTS) -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis runs
