"""BLEU for every target language (issue 48): the tokenizer follows the target language as
sacreBLEU's command line picks it (zh -> zh, ja -> ja-mecab, ko -> ko-mecab, 13a otherwise),
the signature names it, ``[eval] bleu_tokenize`` overrides it, and a tokenizer whose packages
are missing is one line naming the extra that installs them. On an English->Chinese set,
BLEU equals sacreBLEU's command line."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from _helpers import TINY_CLI
from attnlab.cli import describe_error, main
from attnlab.inference.scores import bleu_tokenizer, score
from attnlab.jobs import Job

ROOT = Path(__file__).resolve().parents[2]

_DIGITS = "零一二三四五六七八九"


def _chinese(n: int) -> str:
    """``n`` (0..9999) in Chinese numerals: 342 -> 三百四十二, 105 -> 一百零五, 15 -> 十五."""
    if n < 10:
        return _DIGITS[n]
    words, gap = [], False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = n // value % 10
        if digit == 0:
            gap = bool(words)  # a zero inside the number is said once, before the next digit
            continue
        if gap:
            words.append("零")
            gap = False
        words.append(("" if value == 10 and n < 20 else _DIGITS[digit]) + unit)
    return "".join(words)


def test_the_chinese_numerals_are_written_as_taught():
    cases = {342: "三百四十二", 105: "一百零五", 15: "十五", 10: "十", 1010: "一千零一十"}
    cases |= {2003: "二千零三", 9999: "九千九百九十九", 7: "七", 120: "一百二十"}
    assert {n: _chinese(n) for n in cases} == cases


def _en_zh(count: int = 60) -> tuple[list[str], list[str]]:
    """References "我有N本书。" ("I have N books."), and hypotheses of a middling system: most
    numbers right, some off by one or ten, some with another measure word."""
    draw = random.Random(48)
    hyps, refs = [], []
    for _ in range(count):
        n = draw.randrange(1, 10000)
        refs.append(f"我有{_chinese(n)}本书。")
        wrong = draw.random()
        m = n + 1 if wrong < 0.3 else n + 10 if wrong < 0.45 else n
        noun = "个苹果" if draw.random() < 0.2 else "本书"
        hyps.append(f"我有{_chinese(min(m, 9999))}{noun}。")
    return hyps, refs


def test_bleu_of_a_chinese_target_is_tokenised_as_sacrebleus_command_line_does(tmp_path):
    hyps, refs = _en_zh()
    result = score(hyps, refs, tgt_lang="zh")
    assert "|tok:zh|" in result.bleu_signature
    (tmp_path / "hyp.zh").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (tmp_path / "ref.zh").write_text("\n".join(refs) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.zh")]
    command += ["-i", str(tmp_path / "hyp.zh"), "-l", "en-zh", "-w", "4"]
    found = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
    assert result.bleu == pytest.approx(found["score"], abs=0.005)
    assert result.bleu_signature == found["signature"]
    # 13a sees each sentence as one or two "words": BLEU near nothing, exact match the
    # headline; zh tokenisation counts the characters, and BLEU leads.
    assert score(hyps, refs).bleu < result.bleu / 3 and 40 < result.bleu < 95
    assert score(hyps, refs).headline[0] == "exact_match"
    assert result.headline == ("bleu", "chrf")


def test_the_tokenizer_follows_the_target_language_unless_the_job_names_one():
    cases = {"zh": "zh", "zh-CN": "zh", "ZH_hant": "zh", "ja": "ja-mecab", "ko-KR": "ko-mecab"}
    cases |= {"de": "13a", "en": "13a", "tgt": "13a", "": "13a"}
    assert {lang: bleu_tokenizer(lang) for lang in cases} == cases
    assert bleu_tokenizer(None) == "13a"
    assert bleu_tokenizer("zh", "char") == "char" and bleu_tokenizer("de", "intl") == "intl"
    with pytest.raises(ValueError, match=r"^bleu_tokenize: expected one of sacreBLEU's .*'zhh'"):
        bleu_tokenizer("zh", "zhh")
    same = ["我有三本书"]
    assert "|tok:char|" in score(same, same, bleu_tokenize="char").bleu_signature


def test_eval_bleu_tokenize_is_checked_when_the_job_is_read():
    assert Job.from_dict({"eval": {"bleu_tokenize": "zh"}}).eval.bleu_tokenize == "zh"
    assert Job.from_dict({}).eval.bleu_tokenize is None
    for bad in ("13b", 13):
        with pytest.raises(ValueError, match=r"^\[eval\] bleu_tokenize: expected") as error:
            Job.from_dict({"eval": {"bleu_tokenize": bad}})
        assert repr(bad) in str(error.value)


def test_a_tokenizer_without_its_packages_is_one_line_naming_the_extra(
    monkeypatch, capsys, tmp_path
):
    monkeypatch.setitem(sys.modules, "MeCab", None)  # importing it fails: not installed
    monkeypatch.setitem(sys.modules, "mecab_ko", None)
    for lang, extra in (("ja", "ja"), ("ko", "ko")):
        with pytest.raises(ImportError) as error:
            score(["a"], ["a"], tgt_lang=lang)
        status, line = describe_error(error.value)
        assert status == 1 and line.endswith(f"pip install 'attnlab[{extra}]'"), line
        assert f"BLEU tokenizer {lang}-mecab needs" in line
    # A training run says so before any work, in one line.
    out = tmp_path / "run"
    argv = [*TINY_CLI, "--out", str(out), "--set", "eval.bleu_tokenize=ja-mecab"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        "attnlab train: error: BLEU tokenizer ja-mecab needs mecab-python3 and ipadic, which "
        "are not installed: pip install 'attnlab[ja]'\n"
    )
    assert not (out / "tokenizers").exists()  # before the work


@pytest.mark.slow  # a short training
def test_a_jobs_bleu_tokenize_reaches_the_scores_of_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*TINY_CLI, "--out", str(out), "--no-progress", "--set", "eval.bleu_tokenize=char"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "|tok:char|" in results["bleu_signature"]
    assert json.loads((out / "model" / "job.json").read_text())["eval"]["bleu_tokenize"] == "char"
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--json", "--limit", "3"]) == 0
    assert "|tok:char|" in json.loads(capsys.readouterr().out)["bleu_signature"]
