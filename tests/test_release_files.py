"""The release's files: CITATION.cff (Citation File Format), CHANGELOG.md (Keep a Changelog,
with the version policy), no tracked file naming a directory outside the repository, and the
Multi30K headline quoted alike everywhere, from its one results file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import attnlab

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_is_valid_cff_with_the_paper_as_a_reference():
    data = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    for key in ("cff-version", "message", "title", "authors"):  # CFF 1.2.0's required keys
        assert data.get(key), key
    assert re.fullmatch(r"1\.2\.\d+", str(data["cff-version"]))
    assert all(a.get("name") or a.get("family-names") for a in data["authors"])
    assert str(data["version"]) == attnlab.__version__  # one version, written in _version.py
    (paper,) = [r for r in data["references"] if r["title"] == "Attention Is All You Need"]
    assert paper["year"] == 2017 and paper["authors"][0]["family-names"] == "Vaswani"
    assert "NeurIPS" in paper["collection-title"]


def test_changelog_has_an_unreleased_section_and_the_version_policy():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^(#{2,3}) (.+)$", text, re.MULTILINE)
    titles = [title for _, title in headings]
    assert "[Unreleased]" in titles and "Version policy" in titles
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    for kind in ("### Added", "### Changed", "### Deprecated"):
        assert kind in unreleased, kind
    assert "semantic versioning" in text and "one minor" in text


#: Ways a file can name the directory beside the repository that one machine keeps data in (CI's
#: copy of Multi30K): written in pieces, so that this file does not name it either.
OUTSIDE = (".." + "/" + "shared", "shared" + "/" + "data" + "/")


def test_no_tracked_file_names_a_directory_outside_the_repository():
    """A fresh clone works anywhere: data is found where attnlab looks ($ATTNLAB_MULTI30K, else
    its download cache), never at a path beside the repository. Only the CI entry point
    (.ci/) may point ATTNLAB_MULTI30K at the CI machine's copy."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or a copy): no list of tracked files")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode("utf-8", "surrogateescape")
    found = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if name.startswith(".ci/") or not path.is_file():  # .ci/: CI's own machine; gone: moved
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary: weights, pictures, archives
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            found += [f"{name}:{number}: {line.strip()}" for piece in OUTSIDE if piece in line]
    assert not found, "a path outside the repository:\n" + "\n".join(found)


#: The Multi30K headline: the test BLEU of the recipe's three seeds at the length penalty the
#: recipe decodes with, read from the one results file that holds it.
MULTI30K_RESULTS = ROOT / "benchmarks/results/multi30k_alpha.json"

#: Every place that quotes the headline: per page, patterns whose named groups are keys of
#: :func:`multi30k_headline`; each must match, and every match must give the file's figures.
HEADLINE_QUOTES = {
    "README.md": [
        r"The Multi30K recipe scores (?P<bleu>[\d.]+) BLEU \(mean of 3 seeds; (?P<tok>[\d.]+) as",
        r"\*\*(?P<bleu>[\d.]+) ± (?P<bleu_sd>[\d.]+) BLEU\*\* over 3 seeds, chrF (?P<chrf>[\d.]+);"
        r" lowercased and Moses-tokenised as the literature reports it,"
        r" (?P<tok>[\d.]+) ± (?P<tok_sd>[\d.]+)",
    ],
    "README.zh.md": [
        r"Multi30K 配方的得分是 (?P<bleu>[\d.]+) BLEU（3 个随机种子的平均；"
        r"按文献的算法，即小写并分词后，为 (?P<tok>[\d.]+)）",
        r"3 个随机种子上 \*\*(?P<bleu>[\d.]+) ± (?P<bleu_sd>[\d.]+) BLEU\*\*，"
        r"chrF (?P<chrf>[\d.]+)；"
        r"按文献的算法（小写并用 Moses 分词）为 (?P<tok>[\d.]+) ± (?P<tok_sd>[\d.]+)",
    ],
    "docs/benchmarks.md": [
        r"\| mean ± sd \(range\) \| \*\*(?P<bleu>[\d.]+) ± (?P<bleu_sd>[\d.]+) \([\d.-]+\)\*\* \|"
        r" (?P<tok>[\d.]+) ± (?P<tok_sd>[\d.]+) \([\d.-]+\) \| (?P<chrf>[\d.]+) ±",
        r"40\.0 cased, detokenised BLEU by (?P<gap>[\d.]+) \(mean (?P<bleu>[\d.]+) with the alpha",
        r"41\.5 in\s+the literature's variant by (?P<tok_gap>[\d.]+) \(mean (?P<tok>[\d.]+);",
        r"disagrees: \*\*(?P<bleu>[\d.]+) ± (?P<bleu_sd>[\d.]+)\*\* cased",
        r"(?P<tok>[\d.]+) against [\d.]+ in the literature's variant, while chrF",
    ],
}
#: Where in a page the current recipe's figures stand (the pages before and after it hold the
#: earlier recipes' tables).
HEADLINE_SECTIONS = {"docs/benchmarks.md": ("### Training on Multi30K", "#### How the recipe")}
#: A figure quoted as Multi30K's BLEU: a number just before "BLEU" on a line naming Multi30K.
BLEU_QUOTE = re.compile(r"(\d+\.\d+)(?:\*\*)?(?: ± \d+\.\d+)?(?:\*\*)? BLEU")


def multi30k_headline() -> dict[str, str]:
    """The headline's figures as the pages write them (2 decimals), from the results file."""
    import json

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    data = json.loads(MULTI30K_RESULTS.read_text(encoding="utf-8"))
    recipe = (ROOT / "src/attnlab/recipes/multi30k-en-de.toml").read_text(encoding="utf-8")
    alpha = tomllib.loads(recipe)["eval"]["alpha"]
    assert data["chosen_alpha"] == alpha, "the results file is not the recipe's decoding"
    (summary,) = [s for a, s in data["test_summary"].items() if float(a) == alpha]
    bleu, tok, chrf = summary["bleu"], summary["bleu_tokenized"], summary["chrf"]
    return {
        "bleu": f"{bleu['mean']:.2f}",
        "bleu_sd": f"{bleu['sd']:.2f}",
        "tok": f"{tok['mean']:.2f}",
        "tok_sd": f"{tok['sd']:.2f}",
        "chrf": f"{chrf['mean']:.2f}",
        "gap": f"{40.0 - bleu['mean']:.2f}",  # the goals: 40.0 cased, 41.5 tokenised
        "tok_gap": f"{41.5 - tok['mean']:.2f}",
    }


def other_bleu_quotes(text: str, bleu: str) -> list[str]:
    """The lines of ``text`` that quote a Multi30K BLEU other than ``bleu`` (the lines about
    the seeds' ensemble quote its own results file: checked below)."""
    return [
        line.strip()
        for line in text.splitlines()
        if "Multi30K" in line
        and ENSEMBLE_ROW not in line
        and ENSEMBLE_ROW_ZH not in line
        and any(f != bleu for f in BLEU_QUOTE.findall(line))
    ]


#: The README's row on the teachers' ensemble (issue 45), and its results file.
ENSEMBLE_ROW = "the ensemble of 3 Multi30K recipe seeds"
ENSEMBLE_ROW_ZH = "Multi30K 配方 3 个种子的集成"
DISTILL_RESULTS = ROOT / "benchmarks/results/distill.json"


def test_the_ensemble_row_quotes_its_results_file():
    import json

    report = json.loads(DISTILL_RESULTS.read_text(encoding="utf-8"))
    ensemble = report["quality"]["ensemble of 3"]
    teachers = [q["valid/float32"]["bleu"] for q in report["teacher_quality"].values()]
    valid, mean = ensemble["valid/float32"]["bleu"], sum(teachers) / len(teachers)
    test = ensemble["test/float32"]
    figures = [f"{valid - mean:+.2f}", f"{valid:.2f}", f"{mean:.2f}", f"{test['bleu']:.2f}"]
    figures.append(f"{test['bleu_tokenized']:.2f}")
    # The student of the recipe's shape that the row quotes (chosen on validation).
    student = report["quality"][report["recipe_student"]["chosen"]]
    figures += [f"{student['valid/float32']['bleu']:.2f}", f"{student['test/float32']['bleu']:.2f}"]
    for name, row in (("README.md", ENSEMBLE_ROW), ("README.zh.md", ENSEMBLE_ROW_ZH)):
        line = next(x for x in (ROOT / name).read_text("utf-8").splitlines() if row in x)
        for figure in figures:
            assert figure.lstrip("+") in line, f"{name}: the ensemble row lacks {figure}"


def test_every_page_quotes_the_multi30k_headline_from_its_one_results_file():
    headline = multi30k_headline()
    wrong = []
    for name, patterns in HEADLINE_QUOTES.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        if name in HEADLINE_SECTIONS:
            start, end = HEADLINE_SECTIONS[name]
            text = text.split(start, 1)[1].split(end, 1)[0]
        for pattern in patterns:
            matches = list(re.finditer(pattern, text))
            assert matches, f"{name}: no quote of the headline matches {pattern!r}"
            for match in matches:
                wrong += [
                    f"{name}: {key} {value} in {match.group(0)!r}, the results say {headline[key]}"
                    for key, value in match.groupdict().items()
                    if value != headline[key]
                ]
    pages = [ROOT / "README.md", ROOT / "README.zh.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        if page.name != "benchmarks.md":  # the earlier recipes' tables; its quotes are above
            quotes = other_bleu_quotes(page.read_text(encoding="utf-8"), headline["bleu"])
            wrong += [f"{page.relative_to(ROOT)}: {line}" for line in quotes]
    assert not wrong, f"not the headline of {MULTI30K_RESULTS.name}:\n" + "\n".join(wrong)


def test_a_drifted_multi30k_figure_is_found():
    old = "here was run on a GPU. The Multi30K recipe scores 39.9 BLEU (mean of 3 seeds; 40.3 as"
    assert other_bleu_quotes(old, "39.55") == [old]
    assert other_bleu_quotes(old.replace("39.9", "39.55"), "39.55") == []
    assert other_bleu_quotes("Multi30K valid: BLEU | 28.82", "39.55") == []


#: The large-corpus figures: the 4.5M-pair run of benchmarks/data_scale.py, read from its one
#: results file. Memory is one measure, the peak PSS summed over the process tree (issue 48):
#: ``pss`` training with the preparation, ``prep_pss`` preparing alone; every page quotes each.
#: Start-up: ``start``, until the first step begins with the shards ready, ``first_step``,
#: until its line, ``resumed``, until a resumed run's first step begins.
DATA_SCALE_RESULTS = ROOT / "benchmarks/results/data_scale.json"
MEMORY_KEYS = ("pss", "prep_pss")
DATA_SCALE_QUOTES = {
    "README.md": [
        r"on a (?P<lines>[\d.]+M)-pair corpus, (?P<kept>[\d.]+M) pairs kept after cleaning",
        r"vocabulary (?P<vocab>[\d,]+), preset `(?P<preset>\w+)`",
        r"prepared once in (?P<prepare_s>\d+) s",
        r"peak PSS summed over the process tree (?P<pss>[\d,]+) MiB with the preparation",
        r"(?P<prep_pss>[\d,]+) MiB preparing alone",
        r"the first step begins (?P<start>[\d.]+) s after the start",
        r"has run at (?P<first_step>[\d.]+) s",
        r"resumed from a checkpoint, (?P<resumed>[\d.]+) s",
    ],
    "README.zh.md": [
        r"在 (?P<lines>[\d.]+M) 句对的语料上运行 `attnlab train`，"
        r"清洗与去重后保留 (?P<kept>[\d.]+M) 句对",
        r"词表 (?P<vocab>[\d,]+)，预设 `(?P<preset>\w+)`",
        r"只准备一次，用时 (?P<prepare_s>\d+) s",
        r"包括准备在内为 (?P<pss>[\d,]+) MiB",
        r"单独准备时为 (?P<prep_pss>[\d,]+) MiB",
        r"启动 (?P<start>[\d.]+) s 后开始第一步",
        r"(?P<first_step>[\d.]+) s 时第一步完成",
        r"从检查点恢复时为 (?P<resumed>[\d.]+) s",
    ],
    "docs/benchmarks.md": [
        r"`vocab_size` (?P<vocab>[\d,]+)",
        r"preset `(?P<preset>\w+)`, 3 steps",
        r"of which\s+(?P<kept_exact>[\d,]+) pairs are kept \((?P<kept>[\d.]+M);",
        r"\| 4\.5M \| (?P<kept_exact>[\d,]+) \| (?P<prepare_s1>[\d.]+) s / (?P<prep_pss>[\d,]+) "
        r"MiB \| (?P<pss>[\d,]+) MiB \| (?P<start>[\d.]+) s / (?P<first_step>[\d.]+) s / [\d,]+ "
        r"MiB \| (?P<resumed>[\d.]+) s / [\d.]+ s \|",
        r"at a peak PSS of (?P<prep_pss>[\d,]+) MiB",
        r"preparation included, (?P<pss>[\d,]+) MiB \(goal",
        r"the first step\s+begins (?P<start>[\d.]+) s after the start at 4\.5M",
    ],
}


def data_scale_figures() -> dict[str, str]:
    """The 4.5M-pair run's figures as the pages write them, from the results file."""
    import json

    data = json.loads(DATA_SCALE_RESULTS.read_text(encoding="utf-8"))
    big = data["sizes"]["4.5M"]
    training = big["training"]
    kept = big["prepare"]["pairs"]  # after cleaning, whose duplicate filter drops most
    return {
        "lines": f"{big['prepare']['lines'] / 1e6:g}M",
        "kept": f"{kept / 1e6:.2f}M",
        "kept_exact": f"{kept:,}",
        "vocab": f"{data['vocab_size']:,}",
        "preset": data["preset"],
        "prepare_s": f"{big['prepare']['wall_s']:.0f}",
        "prepare_s1": f"{big['prepare']['wall_s']:.1f}",
        "pss": f"{training['cold']['peak_pss_mib']:,.0f}",
        "prep_pss": f"{big['prepare']['peak_pss_mib']:,.0f}",
        "start": f"{training['ready']['start_s']:.1f}",
        "first_step": f"{training['ready']['first_step_s']:.1f}",
        "resumed": f"{training['resumed']['start_s']:.1f}",
    }


def test_every_page_quotes_the_large_corpus_figures_from_their_results_file():
    figures = data_scale_figures()
    held = {key for key in MEMORY_KEYS if key in figures}
    wrong = []
    for name, patterns in DATA_SCALE_QUOTES.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        quoted = set()
        for pattern in patterns:
            matches = list(re.finditer(pattern, text))
            assert matches, f"{name}: no large-corpus quote matches {pattern!r}"
            for match in matches:
                for key, value in match.groupdict().items():
                    quoted.add(key)
                    if key not in figures:
                        wrong.append(
                            f"{name}: quotes {key} {value}; the results hold no such measure"
                        )
                    elif value != figures[key]:
                        wrong.append(f"{name}: {key} {value}, the results say {figures[key]}")
        if held - quoted:
            wrong.append(f"{name}: does not quote the measure(s) {sorted(held - quoted)}")
    assert not wrong, f"not the figures of {DATA_SCALE_RESULTS.name}:\n" + "\n".join(wrong)


#: The engine and service figures (issue 59): benchmarks/engine.py's one sentence at a time,
#: benchmarks/serve_load.py's translate mix (the d_model 256 model, and the numbers demo model
#: in a run of its own), benchmarks/distill_processes.py's teachers on 1 and 2 processes.
ENGINE_RESULTS = {
    name: ROOT / f"benchmarks/results/{name}.json"
    for name in (
        "engine",
        "serve_translate",
        "serve_translate_numbers",
        "distill_processes",
        "serve_soak",
        "serve_soak_unheld",
        "serve_soak_stream",
    )
}


def _soak_figures(prefix: str, soak: dict) -> dict[str, str]:
    """An hour under load (benchmarks/serve_soak.py's report), as the pages write it."""
    rss = soak["rss_mib"]
    figures = {
        "requests": f"{soak['requests']:,}",
        "checked": f"{soak['checked']:,}",
        "5xx": str(soak["errors_5xx"]),
        "unanswered": str(soak["unanswered"]),
        "wrong": str(soak["wrong"]),
        "end": f"{rss['end_mib']:.1f}",
        "checkpoint": f"{rss['checkpoint_mib']:.1f}",
        "rss_ratio": f"{rss['end_mib'] / rss['checkpoint_mib']:.2f}",
        "polite": f"{soak['polite_p99_ms']:.1f}",
        "idle": f"{soak['idle_p99_ms']:.1f}",
        "p99_ratio": f"{soak['goals'][-1]['value']:.2f}",  # of the unrounded p99s
    }
    return {f"{prefix}_{key}": value for key, value in figures.items()}


def engine_figures() -> dict[str, str]:
    """Every figure the pages quote, as they write it, by key (``t1``: 1 thread)."""
    import json

    found = {name: json.loads(p.read_text(encoding="utf-8")) for name, p in ENGINE_RESULTS.items()}
    figures: dict[str, str] = {}
    for run in found["engine"]["results"]:
        name = "trained" if run["model"] == "trained" else "random"
        t, ms = run["threads"], run["contenders"]
        for contender, value in ms.items():
            best = value["ms_per_sentence_best"]
            figures[f"{name}_{contender}_t{t}"] = (
                f"{best:.3f}" if name == "trained" else f"{best:.1f}"
            )
        for contender, ratio in run["ratio_to_anchor"].items():
            figures[f"{name}_{contender}_ratio_t{t}"] = f"{ratio:.2f}"
        figures[f"{name}_speedup_t{t}"] = f"{run['ctranslate2_speedup_over_torch']:.2f}"
    for key, runs in (
        ("d256", found["serve_translate"]),
        ("numbers", found["serve_translate_numbers"]),
    ):
        for run in runs:
            t = run["threads"]
            figures[f"{key}_queue_best_t{t}"] = f"{run['queue_best']['sentences_per_second']:.1f}"
            for r in run["rounds"]:
                name = f"{key}_{r['mode']}_{r['engine'].replace('-', '_')}"  # torch-whole
                figures[f"{name}_c{r['clients']}_t{t}"] = f"{r['sentences_per_second']:.1f}"
                figures[f"{name}_p50_c{r['clients']}_t{t}"] = f"{r['p50_ms']:.1f}"
                figures[f"{name}_p99_c{r['clients']}_t{t}"] = f"{r['p99_ms']:.1f}"
            for goal in run["goals"]:  # issue 47's latency bound at 1 client
                if "queue p50, 1 client" in goal["goal"]:
                    figures[f"{key}_p50_ratio_t{t}"] = f"{goal['value']:.2f}"
            for engine, by_clients in run["batcher_over_queue"].items():
                engine = engine.replace("-", "_")
                for c, ratios in by_clients.items():
                    best = ratios["sentences_per_second_over_queue_best"]
                    figures[f"{key}_{engine}_over_best_c{c}_t{t}"] = f"{best:.2f}"
            for c, ratios in run["ctranslate2_over_torch"].items():
                figures[f"{key}_ct2_over_torch_c{c}_t{t}"] = f"{ratios['sentences_per_second']:.2f}"
            for s in run["soak"]:
                figures[f"{key}_soak{s['soak']}_{s['engine']}_t{t}"] = f"{s['requests']:,}"
            for moment, mib in run["rss_mib"].items():
                figures[f"{key}_rss_{moment}_t{t}"] = f"{mib:.1f}"
            bound = run.get("decode_bound")  # decoding alone: what batching can give
            if bound:
                figures[f"{key}_bound_all_t{t}"] = f"{bound['all']['ratio']:.2f}"
                figures[f"{key}_ending_t{t}"] = str(bound["ending"])
                figures[f"{key}_bound_all_ms_t{t}"] = f"{bound['all']['batch_ms']:.2f}"
                figures[f"{key}_bound_one_ms_t{t}"] = f"{bound['all']['one_ms']:.2f}"
    processes = found["distill_processes"]
    figures["dp_one"] = f"{processes['one_process']['decode_wall_seconds']:.2f}"
    figures["dp_two"] = f"{processes['processes']['decode_wall_seconds']:.2f}"
    figures["dp_ratio"] = f"{processes['wall_ratio']:.2f}"
    soak = found["serve_soak"]
    figures.update(_soak_figures("soak", soak))
    figures["soak_429"] = f"{soak['by_role']['flood']['429']:,}"
    stream = found["serve_soak_stream"]  # the same hour, the batcher streaming
    assert stream["batching"] == "stream"
    figures.update(_soak_figures("stream", stream))
    unheld = found["serve_soak_unheld"]  # the same hour before a 429 was held
    figures.update(
        unheld_429=f"{unheld['by_role']['flood']['429']:,}",
        unheld_rate=f"{unheld['by_role']['flood']['429'] / unheld['rss_mib']['seconds']:,.0f}",
        unheld_polite=f"{unheld['polite_p99_ms']:.1f}",
        unheld_idle=f"{unheld['idle_p99_ms']:.1f}",
        unheld_ratio=f"{unheld['goals'][-1]['value']:.0f}",
    )
    return figures


def _q(pattern: str) -> str:
    """``pattern`` with each ``<key>`` a figure named ``key``."""
    return re.sub(r"<(\w+)>", r"(?P<\1>[\\d.,]+)", pattern)


_ROW = (
    r"\| {c} \| {t} \| <d256_queue_torch_c{c}_t{t}> \| <d256_batcher_torch_c{c}_t{t}> \| "
    r"<d256_batcher_ctranslate2_c{c}_t{t}> \| <d256_torch_over_best_c{c}_t{t}>x[,、] ?"
    r"<d256_ctranslate2_over_best_c{c}_t{t}>x \|"
)
_TABLE = [_q(_ROW.format(c=c, t=t)) for t in (1, 2) for c in (1, 32, 64)]
_ENGINE_DEPLOY = {
    "en": _q(
        r"layers\) took <trained_ct2_direct_t1> ms called directly, "
        r"<trained_ctranslate2_batch1_t1> ms through `Translator\(engine=\"ctranslate2\"\)` "
        r"decoding a file a sentence a batch \(<trained_ctranslate2_batch1_ratio_t1>x: .*?\), "
        r"<trained_ctranslate2_t1> ms at one call a sentence, and <trained_torch_t1> ms "
        r"through the torch engine \(<trained_torch_ratio_t1>x\); on the d_model 256 4 \+ 4 "
        r"shape, <random_ctranslate2_batch1_t1> ms a sentence a batch through the ctranslate2 "
        r"engine against <random_ct2_direct_t1> ms directly "
        r"\(<random_ctranslate2_batch1_ratio_t1>x\) and <random_torch_t1> ms on torch "
        r"\(<random_torch_ratio_t1>x\)"
    ),
    "zh": _q(
        r"直接调用用时 <trained_ct2_direct_t1> ms，通过 `Translator\(engine=\"ctranslate2\"\)` "
        r"逐句成批翻译一个文件时用时 <trained_ctranslate2_batch1_t1> "
        r"ms（<trained_ctranslate2_batch1_ratio_t1>x：.*?）"
        r"，每句调用一次时 <trained_ctranslate2_t1> "
        r"ms，通过 torch 引擎用时 <trained_torch_t1> "
        r"ms（<trained_torch_ratio_t1>x）；在 d_model 256、4 "
        r"\+ 4 层的形状上，ctranslate2 引擎逐句成批用时 "
        r"<random_ctranslate2_batch1_t1> ms，直接调用 "
        r"<random_ct2_direct_t1> ms（<random_ctranslate2_batch1_ratio_t1>x），torch 上 "
        r"<random_torch_t1> ms（<random_torch_ratio_t1>x）"
    ),
}
ENGINE_QUOTES = {
    "docs/serve.md": [
        *_TABLE,
        _q(
            r"at 32 clients the torch batcher answered <numbers_batcher_torch_c32_t1> sentences/s "
            r"streaming against <numbers_batcher_torch_whole_c32_t1> decoding whole batches \(1 "
            r"thread; <numbers_batcher_torch_c32_t2> and <numbers_batcher_torch_whole_c32_t2> at "
            r"2\), and at 1 client, where a stream holds one sentence, "
            r"<numbers_batcher_torch_c1_t1> against <numbers_batcher_torch_whole_c1_t1>"
        ),
        _q(
            r"\(`benchmarks/results/serve_soak.json`; the numbers demo model, 1 torch thread\): "
            r"<soak_requests> requests, <soak_checked> answers checked"
        ),
        _q(
            r"\| 5xx answers other than 503 \| <soak_5xx> \| .*? \| requests left unanswered "
            r"\(bursts included\) \| <soak_unanswered> \| .*? \| <soak_wrong> \| .*? \| "
            r"<soak_end> / <soak_checkpoint> MiB \(<soak_rss_ratio>\) \| .*? \| <soak_polite> / "
            r"<soak_idle> ms \(<soak_p99_ratio>x\)"
        ),
        _q(r"sent <soak_429> requests\s+that were answered 429 in the hour"),
        _q(
            r"now at <soak_p99_ratio>x instead of <unheld_ratio>x\. .*?saw <unheld_429> of them, "
            r"<unheld_rate> a second, .*?a polite p99 of <unheld_polite> ms against <unheld_idle> "
            r"idle"
        ),
        _q(
            r"1 torch thread: <stream_requests> requests, <stream_checked> answers checked; "
            r"<stream_5xx> 5xx answers other than 503, <stream_unanswered> requests unanswered, "
            r"<stream_wrong> answers unlike the sentence alone; RSS <stream_end> MiB at the end "
            r"against <stream_checkpoint> after 5 minutes \(<stream_rss_ratio>\); the polite "
            r"clients' p99 <stream_polite> ms against <stream_idle> idle \(<stream_p99_ratio>x, "
            r"goal 2x, missed\)"
        ),
        _q(
            r"its best rate \(<d256_queue_best_t1> sentences/s at 1 thread, <d256_queue_best_t2> "
            r"at 2\)"
        ),
        _q(
            r"\(torch <d256_soak1_torch_t1> and <d256_soak1_torch_t2> requests, ctranslate2 "
            r"<d256_soak1_ctranslate2_t1> and <d256_soak1_ctranslate2_t2>, at 1 and 2 threads\); "
            r"the torch server's RSS was <d256_rss_torch_before_soak_t1> MiB before that round, "
            r"<d256_rss_torch_after_soak_1_t1> after it and <d256_rss_torch_after_soak_2_t1> "
            r"after a second of 10 s \(at 2 threads <d256_rss_torch_before_soak_t2>, "
            r"<d256_rss_torch_after_soak_1_t2> and <d256_rss_torch_after_soak_2_t2> MiB"
        ),
        _q(r"both thread counts \(the torch batcher <d256_torch_over_best_c32_t1>x at 1 thread\)"),
        _q(
            r"at 32 clients <d256_batcher_torch_whole_c32_t1> sentences/s at 1 thread, "
            r"<d256_torch_whole_over_best_c32_t1>x the queue at its best "
            r"\(<d256_batcher_torch_whole_c32_t2> and <d256_torch_whole_over_best_c32_t2>x at 2\), "
            r"where the stream gave <d256_batcher_torch_c32_t1>;"
        ),
        _q(
            r"at 8 clients the stream answered <d256_batcher_torch_c8_t1> sentences/s against "
            r"<d256_batcher_torch_whole_c8_t1> \(1 thread; <d256_batcher_torch_c8_t2> and "
            r"<d256_batcher_torch_whole_c8_t2> at 2\)\. At 64 clients the two are alike in rate "
            r"\(<d256_batcher_torch_c64_t1> and <d256_batcher_torch_whole_c64_t1> at 1 thread\)"
        ),
        _q(
            r"at 32 clients the p99 was <d256_batcher_torch_whole_p99_c32_t1> ms with whole "
            r"batches and <d256_batcher_torch_p99_c32_t1> streaming \(the queue's: "
            r"<d256_queue_torch_p99_c32_t1> ms\), and at 64 clients "
            r"<d256_batcher_torch_whole_p99_c64_t1> and <d256_batcher_torch_p99_c64_t1> ms "
            r"\(the queue's <d256_queue_torch_p99_c64_t1>\)"
        ),
        _q(
            r"batches of 32 decode <d256_bound_all_t1>x faster a sentence than one at a time "
            r"\(<d256_bound_all_ms_t1> against <d256_bound_one_ms_t1> ms\), and this model ends "
            r"<d256_ending_t1> of the 200 sentences"
        ),
        _q(
            r"streaming gives the early answer at 8 clients \(<numbers_batcher_torch_c8_t1> "
            r"sentences/s against <numbers_batcher_torch_whole_c8_t1> decoding whole batches at 1 "
            r"thread\)"
        ),
        _q(
            r"put the stream's p50 at <numbers_batcher_torch_p50_c1_t1> ms against the "
            r"one-at-a-time queue's <numbers_queue_torch_p50_c1_t1> \(<numbers_p50_ratio_t1>x; at "
            r"2 threads <numbers_batcher_torch_p50_c1_t2> against <numbers_queue_torch_p50_c1_t2>\)"
        ),
        _q(
            r"the ctranslate2 batcher gives <numbers_ct2_over_torch_c1_t1>x the torch batcher's "
            r"sentences/s at 1 client and <numbers_ct2_over_torch_c32_t1>x at 32 \(1 thread; "
            r"<numbers_ct2_over_torch_c1_t2>x and <numbers_ct2_over_torch_c32_t2>x at 2, .*?: "
            r"<trained_ct2_direct_t2> against <trained_ct2_direct_t1> ms a sentence called "
            r"directly"
        ),
    ],
    "docs/serve.zh.md": [
        *_TABLE,
        _q(
            r"32 个客户端时 torch 批处理器流式解码每秒回答 "
            r"<numbers_batcher_torch_c32_t1> 句，按整批解码 "
            r"<numbers_batcher_torch_whole_c32_t1> 句（1 线程；2 线程时 "
            r"<numbers_batcher_torch_c32_t2> 和 <numbers_batcher_torch_whole_c32_t2>），"
            r"1 个客户端时（流里只有一个句子）<numbers_batcher_torch_c1_t1> 对 "
            r"<numbers_batcher_torch_whole_c1_t1>"
        ),
        _q(r"共 <soak_requests> 个请求，<soak_checked> 个回答"),
        _q(
            r"\| 除 503 外的 5xx 回答 \| <soak_5xx> \|.*?\| <soak_unanswered> \|.*?\| <soak_wrong> "
            r"\|.*?\| <soak_end> / <soak_checkpoint> MiB（<soak_rss_ratio>） \|.*?\| <soak_polite> "
            r"/ <soak_idle> ms（<soak_p99_ratio>x）"
        ),
        _q(r"这一小时里有 <soak_429> 个请求得到 429：每个都被扣留一秒"),
        _q(
            r"现在是 <soak_p99_ratio>x，而不是 <unheld_ratio>x。.*?有 <unheld_429> 个 这样的请求，"
            r"每秒 <unheld_rate> 个，.*?守规矩客户端的 p99 是 <unheld_polite> ms，空闲时 "
            r"<unheld_idle> ms"
        ),
        _q(
            r"1 个 torch 线程：共 <stream_requests> 个请求，<stream_checked> 个回答与单独翻译的结果"
            r"核对过；除 503 外的 5xx 回答 <stream_5xx> 个，得不到回答的请求 <stream_unanswered> "
            r"个，与单独翻译该句子不同的回答 <stream_wrong> 个；结束时 RSS <stream_end> MiB，5 "
            r"分钟后为 <stream_checkpoint>（<stream_rss_ratio>）；守规矩客户端的 p99 为 "
            r"<stream_polite> ms，空闲时 <stream_idle> ms（<stream_p99_ratio>x，目标 2x，未达到）"
        ),
        _q(r"它的最佳速率（1 线程 <d256_queue_best_t1> 句/秒，2 线程 <d256_queue_best_t2>）"),
        _q(
            r"（torch <d256_soak1_torch_t1> 和 <d256_soak1_torch_t2> 个请求，ctranslate2 "
            r"<d256_soak1_ctranslate2_t1> 和 "
            r"<d256_soak1_ctranslate2_t2> 个，分别在 1 和 2 线程下）；torch "
            r"服务器的 RSS 在那一轮之前是 <d256_rss_torch_before_soak_t1> MiB，之后 "
            r"<d256_rss_torch_after_soak_1_t1>，又一轮 10 s 之后 "
            r"<d256_rss_torch_after_soak_2_t1>（2 线程时为 "
            r"<d256_rss_torch_before_soak_t2>、<d256_rss_torch_after_soak_1_t2> 和 "
            r"<d256_rss_torch_after_soak_2_t2> MiB"
        ),
        _q(
            r"两种线程数下都超过队列最佳状态的 4x（torch 批处理器在 1 线程时为 "
            r"<d256_torch_over_best_c32_t1>x）"
        ),
        _q(
            r"32 个客户端时 1 线程每秒 <d256_batcher_torch_whole_c32_t1> 句，是队列最佳状态的 "
            r"<d256_torch_whole_over_best_c32_t1>x（2 线程时 <d256_batcher_torch_whole_c32_t2> 句，"
            r"<d256_torch_whole_over_best_c32_t2>x），而流式解码给出 <d256_batcher_torch_c32_t1> 句"
        ),
        _q(
            r"8 个客户端时流式解码每秒回答 <d256_batcher_torch_c8_t1> 句，整批 "
            r"<d256_batcher_torch_whole_c8_t1> 句（1 线程；2 线程时 <d256_batcher_torch_c8_t2> 和 "
            r"<d256_batcher_torch_whole_c8_t2>）。64 个客户端时两者速率相近（1 线程 "
            r"<d256_batcher_torch_c64_t1> 和 <d256_batcher_torch_whole_c64_t1>）"
        ),
        _q(
            r"32 个客户端时 p99 整批为 <d256_batcher_torch_whole_p99_c32_t1> ms，流式为 "
            r"<d256_batcher_torch_p99_c32_t1> ms（队列的是 <d256_queue_torch_p99_c32_t1> ms），"
            r"64 个客户端时为 <d256_batcher_torch_whole_p99_c64_t1> 和 "
            r"<d256_batcher_torch_p99_c64_t1> ms（队列的是 <d256_queue_torch_p99_c64_t1> ms）"
        ),
        _q(
            r"32 句一批的解码每句比一次一句快 <d256_bound_all_t1>x（<d256_bound_all_ms_t1> 对 "
            r"<d256_bound_one_ms_t1> ms），而且这个模型 200 个句子中有 <d256_ending_t1> "
            r"个能正常结束"
        ),
        _q(
            r"流式解码在 8 个客户端时带来更早的回答（1 线程每秒 <numbers_batcher_torch_c8_t1> 句，"
            r"整批 <numbers_batcher_torch_whole_c8_t1> 句）"
        ),
        _q(
            r"这份开销让流的 p50 为 <numbers_batcher_torch_p50_c1_t1> ms，一次一个的队列为 "
            r"<numbers_queue_torch_p50_c1_t1> ms（<numbers_p50_ratio_t1>x；2 线程时 "
            r"<numbers_batcher_torch_p50_c1_t2> 对 <numbers_queue_torch_p50_c1_t2>）"
        ),
        _q(
            r"ctranslate2 批处理器在 1 个客户端时给出 torch 批处理器 "
            r"<numbers_ct2_over_torch_c1_t1>x 的句/秒，32 "
            r"个客户端时 <numbers_ct2_over_torch_c32_t1>x（1 "
            r"线程； 2 线程时 <numbers_ct2_over_torch_c1_t2>x "
            r"和 <numbers_ct2_over_torch_c32_t2>x：.*?直接调用每句 <trained_ct2_direct_t2> 对 "
            r"<trained_ct2_direct_t1> ms"
        ),
    ],
    "docs/deploy.md": [
        _q(
            r"at 32 clients the batcher answered <d256_ctranslate2_over_best_c32_t1>x the "
            r"sentences/s of the one-at-a-time queue at its best \(1 thread; "
            r"<d256_ctranslate2_over_best_c32_t2>x at 2\), and <d256_ct2_over_torch_c32_t1>x the "
            r"torch engine's batcher"
        ),
        _ENGINE_DEPLOY["en"],
    ],
    "docs/deploy.zh.md": [
        _q(
            r"一次一个队列的 <d256_ctranslate2_over_best_c32_t1>x（1 线程；2 线程时 "
            r"<d256_ctranslate2_over_best_c32_t2>x），是 "
            r"torch 引擎批处理器的 <d256_ct2_over_torch_c32_t1>x"
        ),
        _ENGINE_DEPLOY["zh"],
    ],
    "README.md": [
        _q(
            r"the torch engine's batcher <d256_torch_over_best_c32_t1>x the sentences/s with 1 "
            r"torch thread, <d256_torch_over_best_c32_t2>x with 2 \(greedy requests decoded as a "
            r"stream, joining between steps\); the ctranslate2 engine's "
            r"<d256_ctranslate2_over_best_c32_t1>x and <d256_ctranslate2_over_best_c32_t2>x"
        ),
        _q(
            r"`--engine ctranslate2` <trained_speedup_t1>x the torch engine's speed "
            r"\(<trained_ctranslate2_t1> against <trained_torch_t1> ms a sentence\); CTranslate2 "
            r"called directly <trained_ct2_direct_t1> ms"
        ),
    ],
    "README.zh.md": [
        _q(
            r"torch 引擎的批处理器在 1 个 torch 线程时句/秒为队列的 "
            r"<d256_torch_over_best_c32_t1>x，2 个线程时 "
            r"<d256_torch_over_best_c32_t2>x（贪心请求以流的方式解码，在两步之间加入）；"
            r"ctranslate2 引擎的为 "
            r"<d256_ctranslate2_over_best_c32_t1>x 和 <d256_ctranslate2_over_best_c32_t2>x"
        ),
        _q(
            r"`--engine ctranslate2` 的速度是 torch 引擎的 <trained_speedup_t1>x（每句 "
            r"<trained_ctranslate2_t1> 对 <trained_torch_t1> ms）；直接调用 CTranslate2 为 "
            r"<trained_ct2_direct_t1> ms"
        ),
    ],
    "docs/distillation.md": [
        _q(
            r"decoded in <dp_two> s on 2 processes of 1 thread against <dp_one> s on 1 "
            r"\(<dp_ratio>x\)"
        ),
    ],
    "docs/distillation.zh.md": [
        _q(r"解码用时 <dp_two> s，1 个进程用时 <dp_one> s（<dp_ratio>x）"),
    ],
}


def _flat(text: str) -> str:
    """``text`` with its lines joined and no space beside a non-ASCII character: the same
    sentence however a page wraps it (a Chinese line breaks between two characters)."""
    return re.sub(r" (?=[^\x00-\x7f])|(?<=[^\x00-\x7f]) ", "", " ".join(text.split()))


def test_the_engine_and_service_pages_quote_their_results_files():
    figures = engine_figures()
    wrong = []
    for name, patterns in ENGINE_QUOTES.items():
        text = _flat((ROOT / name).read_text(encoding="utf-8"))
        for pattern in patterns:
            match = re.search(_flat(pattern), text)
            if match is None:
                wrong.append(f"{name}: nothing matches {pattern[:80]!r}...")
                continue
            for key, value in match.groupdict().items():
                if value != figures.get(key):
                    wrong.append(f"{name}: {key} {value}, the results say {figures.get(key)}")
    assert not wrong, "not the figures of benchmarks/results:\n" + "\n".join(wrong)
