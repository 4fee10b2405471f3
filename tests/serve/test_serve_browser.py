"""End to end: the attention explorer's page (`attnlab serve`) in a real browser.

The real server runs as a subprocess over the session's small numbers model; Playwright drives
Debian's Chromium (/usr/bin/chromium, headless; never a downloaded browser). Skipped only when
that Chromium or the playwright package is missing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)", allow_module_level=True)
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"playwright is not importable: {exc}", allow_module_level=True)

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SENTENCE = "three hundred and twelve"
TIMEOUT_MS = 15_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The weights of the single-head heatmap as [[q, k, w], ...] in document order.
CELLS_JS = "cs => cs.map(c => [Number(c.dataset.q), Number(c.dataset.k), Number(c.dataset.w)])"


# -- helpers -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(url: str, body: object | None = None) -> tuple[int, dict]:
    """(status, JSON body) of a GET, or of a POST of ``body`` as JSON; 4xx answers included."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _api(url: str, body: object | None = None) -> dict:
    status, payload = _request(url, body)
    assert status == 200, (url, status, payload)
    return payload


def _cells(page: Page) -> list[list[float]]:
    return page.eval_on_selector_all("#heatmap .cell", CELLS_JS)


def _map(answer: dict, kind: str, layer: int, head: int) -> list[list[float]]:
    """One head's weights, rows of keys, from an /api/attention answer (flat maps)."""
    maps = answer[kind]
    q, k = maps["queries"], maps["keys"]
    start = (maps["layers"].index(layer) * len(maps["heads"]) + maps["heads"].index(head)) * q * k
    return [maps["weights"][start + i * k : start + (i + 1) * k] for i in range(q)]


class Expected:
    """The API's maps for one request body, asked one (layer, head) at a time."""

    def __init__(self, server: str, body: dict) -> None:
        self.server, self.body = server, body

    def __call__(self, kind: str, layer: int, head: int) -> list[list[float]]:
        asked = {**self.body, "layers": [layer], "heads": [head]}
        answer = _api(self.server + "/api/attention", asked)
        return _map(answer, kind, layer, head)


def _weights_cap(model_dir: Path) -> int:
    """A --max-weights for which an answer on SENTENCE holds two heads of one layer: so the
    page has heads and layers to fetch as it shows them."""
    from attnlab.inference.translator import Translator
    from attnlab.serve import Explorer

    answer = Explorer(Translator.load(model_dir, device="cpu"), model_dir).translate(SENTENCE)
    s, t = len(answer["source_tokens"]), len(answer["output_tokens"])
    return int(2.5 * (s * s + t * t + t * s))  # one head of one layer: s^2 + t^2 + t s


def _flat(matrix: list[list[float]]) -> list[list[float]]:
    return [[i, j, w] for i, row in enumerate(matrix) for j, w in enumerate(row)]


def _selected(page: Page) -> tuple[int, int]:
    """(layer, head) the page's selectors show."""
    return int(page.input_value("#layer")), int(page.input_value("#head"))


def _cell_shape(page: Page, host: str) -> tuple[int, int, int]:
    """(rows, columns, DOM cells) of the heatmap drawn in ``host``: a DOM grid, or a canvas
    for matrices too large for one element per cell."""
    grid = page.locator(f"{host} .hm, {host} canvas").first
    rows = int(grid.get_attribute("data-rows"))
    cols = int(grid.get_attribute("data-cols"))
    return rows, cols, page.locator(f"{host} .cell").count()


# -- fixtures ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _serving(model_dir: Path, log_path: Path, *options: str) -> Iterator[str]:
    """``attnlab serve --model model_dir`` on a free loopback port; its base URL."""
    import attnlab

    port = _free_port()
    env = dict(os.environ)
    src = str(Path(attnlab.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH")] if p)
    cmd = [sys.executable, "-m", "attnlab", "serve", "--model", str(model_dir)]
    cmd += ["--port", str(port), *options]
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"attnlab serve exited ({proc.returncode}):\n{log_path.read_text()}")
            try:
                _request(base + "/api/model")
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(f"attnlab serve did not answer in 30 s:\n{log_path.read_text()}")
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(numbers_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``attnlab serve`` over the numbers model on a free loopback port; its base URL."""
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    # A cap at which an answer holds two heads of one layer: the page fetches the others, and
    # the other layer, when it shows them.
    cap = ("--max-weights", str(_weights_cap(numbers_model_dir)))
    with _serving(numbers_model_dir, log_path, *cap) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def _explorer(browser: Browser, server: str) -> Iterator[Page]:
    """The explorer at ``server``, loaded (model summary shown), at 1280x800; fails on any
    script error of the page."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready='true']")
    yield page
    context.close()
    assert not errors, f"script errors on the page: {errors}"


@pytest.fixture
def page(browser: Browser, server: str) -> Iterator[Page]:
    """The explorer over the numbers model (see `_explorer`)."""
    with _explorer(browser, server) as page:
        yield page


# -- tests -------------------------------------------------------------------------------------


def test_translate_and_explore_attention(
    page: Page, server: str, tmp_path: Path, numbers_model_dir: Path
) -> None:
    model = _api(server + "/api/model")
    summary = page.text_content("#model-summary")
    assert f"heads{model['num_heads']}" in summary.replace(" ", "")
    assert f"d_model{model['d_model']}" in summary.replace(" ", "")
    assert model["positional"] in summary

    page.fill("#text", SENTENCE)
    page.click("#translate")
    body = {"text": SENTENCE, "beam_size": model["beam_size"]}
    expected = _api(server + "/api/attention", body)
    assert expected["capped"] and expected["encoder"]["layers"] == [0]  # capped: two heads of
    assert expected["encoder"]["heads"] == [0, 1]  # the first layer; the page fetches the rest
    weights = Expected(server, body)
    page.wait_for_function("document.querySelector('#translation').textContent.trim() !== ''")
    assert page.text_content("#translation") == expected["translation"]
    assert expected["translation"]
    expect(page.locator("#truncated-notice")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()

    src = expected["source_tokens"]
    tgt = expected["target_tokens"]

    # Encoder self-attention, layer 0 head 0: source x source cells, the API's weights.
    page.wait_for_selector("#heatmap .cell")
    assert page.get_attribute("[data-kind=encoder]", "aria-checked") == "true"
    assert _selected(page) == (0, 0)
    before = _cells(page)
    assert len(before) == len(src) * len(src)
    assert before == _flat(weights("encoder", 0, 0))
    for j, token in enumerate(src):  # key labels across the top, in order
        label = page.locator(f"#heatmap .lbl-k[data-k='{j}'] .tok")
        assert label.get_attribute("title") == json.dumps(token)

    # Another head, then another layer: other weights.
    page.select_option("#head", "1")
    after_head = _cells(page)
    assert after_head != before
    assert after_head == _flat(weights("encoder", 0, 1))
    page.select_option("#layer", "1")  # not in the first answer: the page fetches it
    page.wait_for_selector("#heatmap[data-layer='1'] .cell")
    after_layer = _cells(page)
    assert after_layer != after_head
    assert after_layer == _flat(weights("encoder", 1, 1))

    # Hovering a query label lights its row (and, queries being keys, its column).
    page.hover("#heatmap .lbl-q[data-q='1']")
    row = page.locator("#heatmap .cell.hl-row")
    expect(row).to_have_count(len(src))
    assert set(row.evaluate_all("cs => cs.map(c => c.dataset.q)")) == {"1"}
    expect(page.locator("#heatmap .cell.hl-col")).to_have_count(len(src))
    # A click pins it past the mouse leaving; Escape unpins.
    page.click("#heatmap .lbl-q[data-q='1']")
    page.hover("#translation")
    expect(page.locator("#heatmap .cell.hl-row")).to_have_count(len(src))
    page.keyboard.press("Escape")
    expect(page.locator("#heatmap .cell.hl-row")).to_have_count(0)

    # Hovering a cell: the tooltip "query -> key: weight".
    page.hover("#heatmap .cell[data-q='0'][data-k='1']")
    expect(page.locator("#tooltip")).to_be_visible()
    assert f"{weights('encoder', 1, 1)[0][1]:.3f}" in page.text_content("#tooltip")

    # Cross-attention: target x source cells.
    page.click("[data-kind=cross]")
    layer, head = _selected(page)
    cross = _cells(page)
    assert len(cross) == len(tgt) * len(src)
    assert cross == _flat(weights("cross", layer, head))

    # Decoder self-attention: target x target, nothing above the diagonal.
    page.click("[data-kind=decoder]")
    layer, head = _selected(page)
    decoder = _cells(page)
    assert len(decoder) == len(tgt) * len(tgt)
    assert decoder == _flat(weights("decoder", layer, head))
    assert all(w == 0 for q, k, w in decoder if k > q)

    # All heads: one small heatmap per head; clicking one opens it.
    page.select_option("#head", "all")
    expect(page.locator("#heatmap .mini")).to_have_count(model["num_heads"])
    expect(page.locator("#heatmap .cell")).to_have_count(0)
    page.click("#heatmap .mini[data-head='2']")
    assert _selected(page) == (layer, 2)
    assert _cells(page) == _flat(weights("decoder", layer, 2))

    # The picture for the docs: cross-attention of the last layer, one head.
    page.click("[data-kind=cross]")
    page.select_option("#layer", str(model["decoder_layers"] - 1))
    page.select_option("#head", "0")
    page.mouse.move(0, 0)
    shot = tmp_path / "attnlab-serve.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert len(data) > 1000
    assert data.startswith(PNG_MAGIC)
    if os.environ.get("ATTNLAB_SCREENSHOT_DIR"):
        out = Path(os.environ["ATTNLAB_SCREENSHOT_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, out / shot.name)


def test_positional_and_masks_tabs(page: Page, server: str) -> None:
    page.click("[data-tab=positional]")
    expect(page.locator("#panel-positional")).to_be_visible()
    expect(page.locator("#panel-attention")).to_be_hidden()
    positional = _api(server + "/api/positional")
    page.wait_for_selector("#pos-matrix .hm, #pos-matrix canvas")
    expect(page.locator("#pos-note")).to_have_text(positional["note"])
    if positional["matrix"] is not None:
        rows, cols, cells = _cell_shape(page, "#pos-matrix")
        assert (rows, cols) == (len(positional["matrix"]), len(positional["matrix"][0]))
        assert cells in (0, rows * cols)
    if positional["similarity"] is not None:
        n = positional["length"]
        assert _cell_shape(page, "#pos-similarity")[:2] == (n, n)
        # A shorter length redraws it.
        page.fill("#pos-length-number", "7")
        page.press("#pos-length-number", "Tab")
        expect(page.locator("#pos-similarity .cell")).to_have_count(49)

    page.click("[data-tab=masks]")
    expect(page.locator("#panel-masks")).to_be_visible()
    texts = ["two", SENTENCE]
    page.fill("#mask-texts", "\n".join(texts))
    page.click("#show-masks")
    masks = _api(server + "/api/masks", {"texts": texts})
    b, s = len(masks["tokens"]), len(masks["look_ahead"])
    cells = page.locator("#masks .cell")
    expect(cells).to_have_count(b * s + s * s + b * s * s)
    allowed = sum(map(sum, masks["padding"])) + sum(map(sum, masks["look_ahead"]))
    allowed += sum(sum(map(sum, m)) for m in masks["combined"])
    expect(page.locator("#masks .cell.on")).to_have_count(allowed)
    expect(page.locator(".mask-legend")).to_contain_text("may attend")


def test_terminology_prefix_and_confidence(page: Page, server: str, tmp_path: Path) -> None:
    """The page's "Terminology and completion" fields reach the API, and the output tokens are
    coloured by the API's probabilities, the doubtful ones outlined, with a legend."""
    body = {"text": SENTENCE, "beam_size": 4, "constraints": ["neun"], "prefix": "drei"}
    expected = _api(server + "/api/attention", body)
    assert expected["translation"].startswith("drei") and "neun" in expected["translation"]

    page.fill("#text", SENTENCE)
    page.select_option("#beam", "4")  # the server's default is the numbers recipe's greedy
    page.click("#guide summary")
    page.fill("#constraints", "neun\n\n")  # blank lines are no phrases
    page.fill("#prefix", "drei")
    page.click("#translate")
    page.wait_for_function("document.querySelector('#translation').textContent.trim() !== ''")
    assert page.text_content("#translation") == expected["translation"]
    expect(page.locator("#error")).to_be_hidden()
    chips = page.locator("#output-tokens .tok")
    expect(chips).to_have_count(len(expected["output_tokens"]))
    probs = chips.evaluate_all("cs => cs.map(c => Number(c.dataset.prob))")
    low = chips.evaluate_all("cs => cs.map(c => c.classList.contains('low'))")
    colours = set(chips.evaluate_all("cs => cs.map(c => getComputedStyle(c).backgroundColor)"))
    for p, lp, is_low in zip(probs, expected["token_log_probs"], low, strict=True):
        assert abs(p - math.exp(lp)) < 1e-3
        assert is_low == (p < 0.2)
    assert len(colours) > 1 or len(set(round(p, 2) for p in probs)) == 1
    expect(page.locator("#confidence-legend .legend-bar")).to_be_visible()
    expect(page.locator("#confidence-legend")).to_contain_text("P(token)")
    expect(page.locator("#confidence-summary")).to_contain_text("log P =")
    page.screenshot(path=str(tmp_path / "confidence.png"))
    assert (tmp_path / "confidence.png").read_bytes().startswith(PNG_MAGIC)

    # A request that cannot be met: the API's message in the error box.
    page.select_option("#beam", "1")
    page.fill("#constraints", "neun\nacht")
    status, answer = _request(
        server + "/api/attention", {**body, "beam_size": 1, "constraints": ["neun", "acht"]}
    )
    assert status == 422
    page.click("#translate")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_contain_text(answer["error"])


def test_errors_and_truncation(page: Page, server: str) -> None:
    # An empty text: the API's message in the error box (Enter submits).
    status, answer = _request(server + "/api/attention", {"text": "   "})
    assert status == 422
    page.fill("#text", "   ")
    page.press("#text", "Enter")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_contain_text(answer["error"])

    # A source over max_len tokens: cut, and the page says so; a 64x64-ish heatmap renders.
    model = _api(server + "/api/model")
    long_text = " ".join([SENTENCE] * (model["max_len"] // 2))
    page.fill("#text", long_text)
    page.select_option("#beam", "1")
    page.press("#text", "Enter")
    notice = page.locator("#truncated-notice")
    expect(notice).to_be_visible(timeout=30_000)
    expect(notice).to_contain_text(f"cut to {model['max_len']} tokens")
    expect(page.locator("#error")).to_be_hidden()
    n = model["max_len"]
    expect(page.locator("#heatmap .cell")).to_have_count(n * n)
    width = page.evaluate("document.querySelector('#heatmap .hm').getBoundingClientRect().width")
    assert width <= 1280


def test_an_imported_marian_model(browser: Browser, tmp_path: Path) -> None:
    """The explorer opens a model imported from a transformers Marian directory: its
    translation, its SentencePiece tokens (the source framed with ``</s>``, the decoder
    starting from ``<pad>``) on the heatmap, and the positional tab."""
    transformers = pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parents[1] / "formats"))  # test_marian_text
    from test_marian_text import _marian_dir

    from _paths import skip_without_multi30k

    skip_without_multi30k()
    from attnlab.cli import main

    assert transformers is not None
    marian = _marian_dir(tmp_path / "marian", separate=False, seed=5)
    model_dir = tmp_path / "imported"
    assert main(["import", str(marian), "--out", str(model_dir)]) == 0
    with _serving(model_dir, tmp_path / "server.log") as base, _explorer(browser, base) as page:
        text = "A dog runs through the park."
        page.fill("#text", text)
        page.click("#translate")
        model = _api(base + "/api/model")
        expected = _api(base + "/api/attention", {"text": text, "beam_size": model["beam_size"]})
        page.wait_for_selector("#heatmap .cell")
        assert page.text_content("#translation") == expected["translation"]
        src = expected["source_tokens"]
        assert src[-1] == "</s>" and expected["target_tokens"][0] == "<pad>"
        assert len(_cells(page)) == len(src) * len(src)
        last = page.locator(f"#heatmap .lbl-k[data-k='{len(src) - 1}'] .tok")
        assert last.get_attribute("title") == json.dumps("</s>")
        page.click("[data-tab=positional]")
        page.wait_for_selector("#pos-matrix .hm, #pos-matrix canvas")
        positional = _api(base + "/api/positional")
        expect(page.locator("#pos-note")).to_have_text(positional["note"])
