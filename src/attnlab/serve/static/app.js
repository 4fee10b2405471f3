// attnlab attention explorer: the page's only script. No framework, no build step.
// Talks to the JSON API of `attnlab serve` (docs/serve.md) and draws heatmaps as DOM grids
// (one element per cell, so they can be hovered, highlighted and tested) or, for very large
// matrices and the small multiples of "all heads", as canvases.
"use strict";

// ---------------------------------------------------------------- helpers

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const clamp = (x, lo, hi) => Math.min(hi, Math.max(lo, x));

function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

function formatCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " B";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return String(n);
}

function formatValue(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "boolean") return v ? "allowed" : "blocked";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e4)) return v.toExponential(2);
  return v.toFixed(3);
}

function formatTick(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a < 1e-2 || a >= 1e4) return v.toExponential(1);
  return String(Number(v.toPrecision(3)));
}

// ---------------------------------------------------------------- colour
// Ramps are computed in OKLab (perceptually uniform lightness), then converted to sRGB.

function oklchToRgb(L, C, hDeg) {
  const h = (hDeg * Math.PI) / 180;
  const a = C * Math.cos(h);
  const b = C * Math.sin(h);
  const l = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3;
  const m = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3;
  const s = (L - 0.0894841775 * a - 1.291485548 * b) ** 3;
  const lin = [
    4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
    -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
    -0.0041960863 * l - 0.7034186147 * m + 1.707614701 * s,
  ];
  return lin.map((x) => {
    const c = x <= 0.0031308 ? 12.92 * x : 1.055 * Math.max(x, 0) ** (1 / 2.4) - 0.055;
    return Math.round(clamp(c, 0, 1) * 255);
  });
}

const LUT_SIZE = 256;

function makeLut(fn) {
  const rgb = [];
  const css = [];
  for (let i = 0; i < LUT_SIZE; i++) {
    const c = fn(i / (LUT_SIZE - 1));
    rgb.push(c);
    css.push(`rgb(${c[0]},${c[1]},${c[2]})`);
  }
  return { rgb, css };
}

// Sequential, single hue (blue): white-ish for 0, deep blue for 1.
const SEQ = makeLut((t) => oklchToRgb(0.985 - 0.6 * t, 0.012 + 0.135 * Math.sqrt(t), 250 + 15 * t));
// Diverging: orange-red below 0, blue above, near-white at 0 (t in 0..1 maps -1..1).
const DIV = makeLut((t) => {
  const v = 2 * t - 1;
  const a = Math.abs(v);
  return oklchToRgb(0.985 - 0.55 * a, 0.15 * Math.sqrt(a), v < 0 ? 40 : 255);
});

// A scale maps a value to a LUT index; it also knows how to draw its legend.
function sequentialScale(lo, hi) {
  const span = hi - lo || 1;
  return {
    lut: SEQ,
    index: (v) => Math.round(clamp((v - lo) / span, 0, 1) * (LUT_SIZE - 1)),
    ticks: [lo, (lo + hi) / 2, hi],
  };
}

function divergingScale(maxAbs) {
  const m = maxAbs || 1;
  return {
    lut: DIV,
    index: (v) => Math.round(clamp((v / m + 1) / 2, 0, 1) * (LUT_SIZE - 1)),
    ticks: [-m, 0, m],
  };
}

function autoScale(matrix) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of matrix) {
    for (const v of row) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (!Number.isFinite(lo)) return sequentialScale(0, 1);
  if (lo < 0) return divergingScale(Math.max(-lo, hi));
  return sequentialScale(lo, hi);
}

function textColourFor(rgb) {
  const lum = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
  return lum < 140 ? "#fff" : "#1b1f27";
}

function drawLegend(host, scale, title) {
  host.replaceChildren();
  const stops = [];
  for (let i = 0; i <= 10; i++) stops.push(scale.lut.css[Math.round((i / 10) * (LUT_SIZE - 1))]);
  const label = el("span", "legend-title", title);
  const bar = el("span", "legend-bar");
  bar.style.background = `linear-gradient(to right, ${stops.join(",")})`;
  const ticks = el("span", "legend-ticks");
  for (const t of scale.ticks) ticks.append(el("span", "", formatTick(t)));
  const barWrap = el("span", "legend-scale");
  barWrap.append(bar, ticks);
  host.append(label, barWrap);
}

// ---------------------------------------------------------------- tokens

const SPECIALS = new Set(["<pad>", "<bos>", "<eos>", "<unk>"]);

function visibleToken(tok) {
  if (SPECIALS.has(tok)) return tok;
  if (tok === "") return "∅";
  return tok.replace(/ /g, "·").replace(/\n/g, "⏎").replace(/\t/g, "⇥");
}

function tokenSpan(tok, className = "tok") {
  const span = el("span", className, visibleToken(tok));
  if (SPECIALS.has(tok)) span.classList.add("special");
  span.title = JSON.stringify(tok);
  return span;
}

function quoted(tok) {
  return SPECIALS.has(tok) ? tok : `“${visibleToken(tok)}”`;
}

// ---------------------------------------------------------------- tooltip

const tooltip = {
  node: null,
  show(text, x, y) {
    const t = this.node;
    t.textContent = text;
    t.hidden = false;
    const pad = 14;
    const w = t.offsetWidth;
    const h = t.offsetHeight;
    let left = x + pad;
    let top = y + pad;
    if (left + w > window.innerWidth - 4) left = x - pad - w;
    if (top + h > window.innerHeight - 4) top = y - pad - h;
    t.style.left = `${Math.max(4, left)}px`;
    t.style.top = `${Math.max(4, top)}px`;
  },
  hide() {
    if (this.node) this.node.hidden = true;
  },
};

// ---------------------------------------------------------------- heatmaps

// Cell size that fits `cols` columns (and, roughly, `rows` rows) into the host.
function fitCell(host, rows, cols, labelWidth, { min = 6, max = 44, maxHeight } = {}) {
  const width = Math.max(200, (host.clientWidth || 800) - labelWidth - 8);
  // Fit the viewport's height, but never shrink rows below 12 px for that (scroll instead).
  const height = maxHeight ?? Math.max(260, window.innerHeight * 0.72, 12 * rows);
  return Math.floor(clamp(Math.min(width / cols, height / rows), min, max));
}

function labelWidthFor(labels, fontPx) {
  let longest = 1;
  for (const l of labels) longest = Math.max(longest, String(l).length);
  return Math.min(160, Math.round(longest * fontPx * 0.62) + 14);
}

const DOM_CELL_LIMIT = 20000;

/**
 * A heatmap as a DOM grid.
 * opts: rows, cols (label arrays: tokens or numbers), value(i, j), scale (for numbers) or
 * colour(v) -> [rgb] (for booleans), tip(i, j, v), cell (px), linked (rows and columns are
 * the same tokens), tokens (labels are tokens), labelStep (show every n-th label),
 * onFocus(sel) (hover/pin callback), pinned ({axis, index} or null), name (aria label),
 * rowTitle, colTitle.
 * Returns {node, setFocus(sel)}.
 */
function domHeatmap(opts) {
  const { rows, cols, value, scale, tip, cell, linked = false, tokens = false } = opts;
  const labelStep = opts.labelStep || 1;
  const Q = rows.length;
  const K = cols.length;
  const font = clamp(Math.round(cell * 0.72), 9, 13);
  const grid = el("div", "hm");
  grid.setAttribute("role", "group");
  grid.setAttribute("aria-label", opts.name || `heatmap, ${Q} rows by ${K} columns`);
  grid.dataset.rows = Q;
  grid.dataset.cols = K;
  grid.style.setProperty("--cell", `${cell}px`);
  grid.style.setProperty("--label-font", `${font}px`);
  grid.style.gridTemplateColumns = `max-content repeat(${K}, ${cell}px)`;
  grid.style.gridTemplateRows = `max-content repeat(${Q}, ${cell}px)`;

  const corner = el("div", "hm-corner");
  if (opts.rowTitle || opts.colTitle) {
    corner.append(el("span", "axis-col", `${opts.colTitle || ""} →`));
    corner.append(el("span", "axis-row", `↓ ${opts.rowTitle || ""}`));
  }
  grid.append(corner);

  const makeLabel = (label, axis, index) => {
    const node = el("div", `lbl lbl-${axis}`);
    node.dataset[axis] = index;
    const show = index % labelStep === 0;
    if (tokens) node.append(tokenSpan(label));
    else node.append(el("span", "num", show ? String(label) : ""));
    if (opts.onFocus) {
      node.tabIndex = index === 0 ? 0 : -1;
      node.setAttribute("role", "button");
      node.setAttribute("aria-label", `${axis === "q" ? "query" : "key"} ${index}: ${label}`);
    }
    return node;
  };

  const colLabels = cols.map((c, j) => makeLabel(c, "k", j));
  grid.append(...colLabels);
  const rowLabels = [];
  const rowCells = [];
  const colCells = Array.from({ length: K }, () => []);
  const showNumbers = cell >= 36 && !opts.colour;
  for (let i = 0; i < Q; i++) {
    const lbl = makeLabel(rows[i], "q", i);
    rowLabels.push(lbl);
    grid.append(lbl);
    const cells = [];
    for (let j = 0; j < K; j++) {
      const v = value(i, j);
      const c = el("div", "cell");
      c.dataset.q = i;
      c.dataset.k = j;
      c.dataset.w = typeof v === "boolean" ? String(v) : String(v);
      let rgb;
      if (opts.colour) {
        rgb = opts.colour(v);
        c.classList.add(v ? "on" : "off");
      } else {
        const idx = scale.index(v);
        rgb = scale.lut.rgb[idx];
        c.style.background = scale.lut.css[idx];
      }
      if (showNumbers) {
        c.textContent = v.toFixed(2).replace(/^0\./, ".").replace(/^-0\./, "-.");
        c.style.color = textColourFor(rgb);
      }
      cells.push(c);
      colCells[j].push(c);
      grid.append(c);
    }
    rowCells.push(cells);
  }

  // Highlight: {axis: "q"|"k", index} -> its row and/or column.
  let lit = [];
  const setFocus = (sel) => {
    for (const n of lit) n.classList.remove("hl-row", "hl-col", "active");
    lit = [];
    grid.classList.toggle("focus", !!sel);
    if (!sel) return;
    const rowsOn = [];
    const colsOn = [];
    if (linked) {
      rowsOn.push(sel.index);
      colsOn.push(sel.index);
    } else if (sel.axis === "q") rowsOn.push(sel.index);
    else colsOn.push(sel.index);
    for (const r of rowsOn) {
      if (r >= Q) continue;
      for (const c of rowCells[r]) c.classList.add("hl-row");
      rowLabels[r].classList.add("active");
      lit.push(rowLabels[r], ...rowCells[r]);
    }
    for (const k of colsOn) {
      if (k >= K) continue;
      for (const c of colCells[k]) c.classList.add("hl-col");
      colLabels[k].classList.add("active");
      lit.push(colLabels[k], ...colCells[k]);
    }
  };

  // Cell hover: tooltip and a light mark on both labels.
  let marked = [];
  const unmark = () => {
    for (const n of marked) n.classList.remove("cur");
    marked = [];
  };
  grid.addEventListener("mouseover", (ev) => {
    const c = ev.target.closest(".cell");
    if (!c) return;
    const i = Number(c.dataset.q);
    const j = Number(c.dataset.k);
    unmark();
    marked = [rowLabels[i], colLabels[j]];
    for (const n of marked) n.classList.add("cur");
    tooltip.show(tip(i, j, value(i, j)), ev.clientX, ev.clientY);
  });
  grid.addEventListener("mousemove", (ev) => {
    const c = ev.target.closest(".cell");
    if (c && !tooltip.node.hidden) {
      const i = Number(c.dataset.q);
      const j = Number(c.dataset.k);
      tooltip.show(tip(i, j, value(i, j)), ev.clientX, ev.clientY);
    }
  });
  grid.addEventListener("mouseleave", () => {
    unmark();
    tooltip.hide();
  });
  grid.addEventListener("mouseout", (ev) => {
    if (ev.target.closest(".cell") && !ev.relatedTarget?.closest?.(".cell")) {
      unmark();
      tooltip.hide();
    }
  });

  // Label hover / focus / click: highlight, pin.
  if (opts.onFocus) {
    const selOf = (node) => {
      const lbl = node.closest(".lbl");
      if (!lbl) return null;
      return lbl.dataset.q !== undefined
        ? { axis: "q", index: Number(lbl.dataset.q) }
        : { axis: "k", index: Number(lbl.dataset.k) };
    };
    grid.addEventListener("mouseover", (ev) => {
      const sel = selOf(ev.target);
      if (sel) opts.onFocus(sel, "hover");
    });
    grid.addEventListener("mouseout", (ev) => {
      if (ev.target.closest(".lbl") && !ev.relatedTarget?.closest?.(".lbl")) {
        opts.onFocus(null, "hover");
      }
    });
    grid.addEventListener("click", (ev) => {
      const sel = selOf(ev.target);
      if (sel) opts.onFocus(sel, "pin");
    });
    grid.addEventListener("focusin", (ev) => {
      const sel = selOf(ev.target);
      if (sel) opts.onFocus(sel, "hover");
    });
    grid.addEventListener("focusout", () => opts.onFocus(null, "hover"));
    grid.addEventListener("keydown", (ev) => {
      const sel = selOf(ev.target);
      if (!sel) return;
      const labels = sel.axis === "q" ? rowLabels : colLabels;
      const step = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 }[ev.key];
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        opts.onFocus(sel, "pin");
      } else if (ev.key === "Escape") {
        opts.onFocus(null, "unpin");
      } else if (step) {
        ev.preventDefault();
        const next = labels[clamp(sel.index + step, 0, labels.length - 1)];
        labels[sel.index].tabIndex = -1;
        next.tabIndex = 0;
        next.focus();
      } else if (ev.key === "Home" || ev.key === "End") {
        ev.preventDefault();
        const next = labels[ev.key === "Home" ? 0 : labels.length - 1];
        labels[sel.index].tabIndex = -1;
        next.tabIndex = 0;
        next.focus();
      }
    });
  }

  return { node: grid, setFocus };
}

/** A heatmap drawn on a canvas (huge matrices, small multiples). Hover gives a tooltip.
 * Cells are `cell` px square, or `cellW` x `cellH` px (fractions allowed). */
function canvasHeatmap({ matrix, rowsN, colsN, value, scale, colour, cell, cellW, cellH, tip }) {
  const Q = rowsN ?? matrix.length;
  const K = colsN ?? (matrix[0] ? matrix[0].length : 0);
  const cw = cellW ?? cell;
  const ch = cellH ?? cell;
  const get = value ?? ((i, j) => matrix[i][j]);
  const dpr = window.devicePixelRatio || 1;
  const canvas = el("canvas", "hm-canvas");
  canvas.width = Math.max(1, Math.round(K * cw * dpr));
  canvas.height = Math.max(1, Math.round(Q * ch * dpr));
  canvas.style.width = `${canvas.width / dpr}px`;
  canvas.style.height = `${canvas.height / dpr}px`;
  canvas.dataset.rows = Q;
  canvas.dataset.cols = K;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `heatmap, ${Q} rows by ${K} columns`);
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(canvas.width, canvas.height);
  const px = img.data;
  const colOf = Array.from({ length: canvas.width }, (_, x) =>
    Math.min(K - 1, Math.floor((x / canvas.width) * K)));
  for (let y = 0; y < canvas.height; y++) {
    const i = Math.min(Q - 1, Math.floor((y / canvas.height) * Q));
    for (let x = 0; x < canvas.width; x++) {
      const v = get(i, colOf[x]);
      const rgb = colour ? colour(v) : scale.lut.rgb[scale.index(v)];
      const o = (y * canvas.width + x) * 4;
      px[o] = rgb[0];
      px[o + 1] = rgb[1];
      px[o + 2] = rgb[2];
      px[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  if (tip) {
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect();
      const j = clamp(Math.floor(((ev.clientX - r.left) / r.width) * K), 0, K - 1);
      const i = clamp(Math.floor(((ev.clientY - r.top) / r.height) * Q), 0, Q - 1);
      tooltip.show(tip(i, j, get(i, j)), ev.clientX, ev.clientY);
    });
    canvas.addEventListener("mouseleave", () => tooltip.hide());
  }
  return canvas;
}

// ---------------------------------------------------------------- API

async function api(path, body) {
  const init = body === undefined
    ? {}
    : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new Error(`cannot reach the server (${err.message})`);
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    const message = payload && payload.error ? payload.error : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return payload;
}

function showError(message) {
  const box = $("#error");
  box.replaceChildren(el("strong", "", "Error: "), document.createTextNode(message));
  const close = el("button", "close", "×");
  close.type = "button";
  close.setAttribute("aria-label", "Dismiss error");
  close.addEventListener("click", clearError);
  box.append(close);
  box.hidden = false;
}

function clearError() {
  const box = $("#error");
  box.hidden = true;
  box.replaceChildren();
}

// ---------------------------------------------------------------- state

const state = {
  model: null,
  data: null,
  kind: "encoder",
  layer: 0,
  head: 0, // a number or "all"
  pinned: null, // {axis, index}
  hover: null,
  view: null, // the current single-head heatmap ({setFocus})
  tab: "attention",
  positionalLoaded: false,
  masksLoaded: false,
  request: null, // the body of the last /api/attention request, to fetch more layers
  loading: null, // a layer being fetched
};

const KIND_INFO = {
  encoder: {
    title: "Encoder self-attention",
    queries: "source tokens",
    keys: "source tokens",
  },
  decoder: {
    title: "Decoder self-attention",
    queries: "target tokens",
    keys: "target tokens",
  },
  cross: {
    title: "Cross-attention",
    queries: "target tokens",
    keys: "source tokens",
  },
};

// The API sends each kind's maps flat ({layers, heads, queries, keys, weights}) and, for a long
// sentence, only the layers (or, for a very long one, the heads) that fit its cap: unpack them
// to data[kind][layer][head][q][k], with null for a layer or head not sent yet (it is fetched
// when shown).
function layerCount(kind) {
  return kind === "encoder" ? state.model.encoder_layers : state.model.decoder_layers;
}

function mergeMaps(target, data) {
  for (const kind of ["encoder", "decoder", "cross"]) {
    const sent = data[kind];
    if (!target[kind]) target[kind] = Array.from({ length: layerCount(kind) }, () => null);
    const size = sent.queries * sent.keys;
    sent.layers.forEach((layer, li) => {
      const heads = target[kind][layer] || Array.from({ length: state.model.num_heads }, () => null);
      sent.heads.forEach((head, hi) => {
        const start = (li * sent.heads.length + hi) * size;
        const rows = [];
        for (let i = 0; i < sent.queries; i++) {
          rows.push(sent.weights.slice(start + i * sent.keys, start + (i + 1) * sent.keys));
        }
        heads[head] = rows;
      });
      target[kind][layer] = heads;
    });
  }
  return target;
}

async function loadLayer(layer, heads) {
  if (state.loading !== null || !state.request) return;
  state.loading = layer;
  const request = state.request;
  let fetched = false;
  try {
    const ask = { ...request, layers: [layer] };
    if (heads) ask.heads = heads;
    const data = await api("/api/attention", ask);
    if (state.request === request) {
      mergeMaps(state.data, data);
      fetched = true;
    }
  } catch (err) {
    showError(err.message);
  } finally {
    state.loading = null;
  }
  // Draw what is now there, fetching what is still missing (each answer brings at least one
  // head); after a failure, only a layer chosen meanwhile is fetched (no retry loop).
  if (state.data && (fetched || state.layer !== layer)) renderAttention();
}

// The heads of the shown layer still to fetch (all of them when the layer is missing), or
// null when what is shown is all there.
function missingHeads() {
  const perHead = state.data[state.kind][state.layer];
  const all = Array.from({ length: state.model.num_heads }, (_, h) => h);
  if (!perHead) return all;
  const wanted = state.head === "all" ? all : [state.head];
  const missing = wanted.filter((h) => !perHead[h]);
  return missing.length ? missing : null;
}

function axesFor(kind, data) {
  if (kind === "encoder") return [data.source_tokens, data.source_tokens];
  if (kind === "decoder") return [data.target_tokens, data.target_tokens];
  return [data.target_tokens, data.source_tokens];
}

// ---------------------------------------------------------------- model summary

function renderSummary(m) {
  const dl = $("#model-summary");
  dl.replaceChildren();
  const item = (term, value, title) => {
    const div = el("div");
    div.append(el("dt", "", term), el("dd", "", value));
    if (title) div.title = title;
    dl.append(div);
  };
  item("model", m.name || m.model_type);
  item("layers", `${m.encoder_layers} enc + ${m.decoder_layers} dec`);
  item("heads", String(m.num_heads));
  item("d_model", String(m.d_model));
  item("positional", m.positional);
  item("parameters", formatCount(m.num_parameters), `${m.num_parameters.toLocaleString()} parameters`);
  item("max_len", String(m.max_len), "the longest source the model reads, in tokens");
}

// ---------------------------------------------------------------- attention tab

function fillSelect(select, options, value) {
  select.replaceChildren();
  for (const [v, text] of options) {
    const o = el("option", "", text);
    o.value = String(v);
    select.append(o);
  }
  const wanted = String(value);
  select.value = options.some(([v]) => String(v) === wanted) ? wanted : String(options[0][0]);
}

function syncSelectors() {
  const layers = state.data[state.kind];
  state.layer = clamp(state.layer, 0, layers.length - 1);
  fillSelect($("#layer"), layers.map((_, i) => [i, `layer ${i}`]), state.layer);
  const heads = state.model.num_heads;
  if (state.head !== "all") state.head = clamp(state.head, 0, heads - 1);
  const headOptions = heads > 1 ? [["all", "all heads"]] : [];
  for (let h = 0; h < heads; h++) headOptions.push([h, `head ${h}`]);
  fillSelect($("#head"), headOptions, state.head);
  state.head = $("#head").value === "all" ? "all" : Number($("#head").value);
  for (const b of $$("#kind [data-kind]")) {
    const on = b.dataset.kind === state.kind;
    b.setAttribute("aria-checked", String(on));
    b.tabIndex = on ? 0 : -1;
  }
}

function matrixMax(m) {
  let hi = 0;
  for (const row of m) for (const v of row) if (v > hi) hi = v;
  return hi;
}

function attentionScale(matrices) {
  if (!$("#scale-max").checked) return sequentialScale(0, 1);
  let hi = 0;
  for (const m of matrices) hi = Math.max(hi, matrixMax(m));
  return sequentialScale(0, hi || 1);
}

function renderAttention() {
  const data = state.data;
  if (!data) return;
  const host = $("#heatmap");
  const [queries, keys] = axesFor(state.kind, data);
  const info = KIND_INFO[state.kind];
  const perHead = data[state.kind][state.layer];
  const linked = state.kind !== "cross";
  const missing = missingHeads();
  if (missing) {
    // A layer or heads beyond the answer's cap: fetch them, then draw.
    host.replaceChildren();
    $("#view-caption").textContent = `${info.title}, layer ${state.layer}: loading…`;
    loadLayer(state.layer, perHead ? missing : null);
    return;
  }
  host.replaceChildren();
  host.dataset.kind = state.kind;
  host.dataset.layer = state.layer;
  host.dataset.head = state.head;
  state.view = null;
  tooltip.hide();
  const tip = (i, j, v) => `${quoted(queries[i])} → ${quoted(keys[j])}: ${v.toFixed(3)}`;

  if (state.head === "all") {
    const scale = attentionScale(perHead);
    $("#view-caption").textContent =
      `${info.title}, layer ${state.layer}, all ${perHead.length} heads ` +
      `(rows: ${info.queries}, columns: ${info.keys}). Click a head to open it.`;
    const gridEl = el("div", "heads-grid");
    const per = Math.max(queries.length, keys.length);
    const width = host.clientWidth || 900;
    const columns = Math.min(perHead.length, width >= 900 ? 4 : width >= 560 ? 3 : 2);
    const target = Math.min(260, (width - columns * 24) / columns);
    const cell = Math.max(1, Math.floor(target / per));
    perHead.forEach((matrix, h) => {
      const button = el("button", "mini");
      button.type = "button";
      button.dataset.head = h;
      button.setAttribute("aria-label", `Open head ${h}`);
      const caption = el("span", "mini-caption", `head ${h}`);
      const canvas = canvasHeatmap({ matrix, scale, cell, tip });
      button.append(caption, canvas);
      button.addEventListener("click", () => {
        state.head = h;
        $("#head").value = String(h);
        renderAttention();
      });
      gridEl.append(button);
    });
    host.append(gridEl);
    drawLegend($("#legend"), scale, "weight");
    renderSelectionInfo();
    return;
  }

  const matrix = perHead[state.head];
  const scale = attentionScale([matrix]);
  $("#view-caption").textContent =
    `${info.title}, layer ${state.layer}, head ${state.head}: ` +
    `rows are queries (${info.queries}), columns keys (${info.keys}); each row sums to 1.`;
  const fontGuess = 12;
  const labelW = labelWidthFor(queries.map(visibleToken), fontGuess);
  const cell = fitCell(host, queries.length, keys.length, labelW, { min: 8, max: 44 });
  const view = domHeatmap({
    rows: queries,
    cols: keys,
    value: (i, j) => matrix[i][j],
    scale,
    tip,
    cell,
    linked,
    tokens: true,
    rowTitle: "queries",
    colTitle: "keys",
    name: `${info.title}, layer ${state.layer}, head ${state.head}`,
    onFocus: onTokenFocus,
  });
  host.append(view.node);
  state.view = view;
  view.setFocus(state.hover || state.pinned);
  drawLegend($("#legend"), scale, "weight");
  renderSelectionInfo();
}

function onTokenFocus(sel, how) {
  if (how === "pin") {
    const same = state.pinned && sel && state.pinned.axis === sel.axis &&
      state.pinned.index === sel.index;
    state.pinned = same ? null : sel;
    state.hover = null;
  } else if (how === "unpin") {
    state.pinned = null;
    state.hover = null;
  } else {
    state.hover = sel;
  }
  if (state.view) state.view.setFocus(state.hover || state.pinned);
  renderSelectionInfo();
}

function renderSelectionInfo() {
  const infoEl = $("#selection-info");
  const sel = state.hover || state.pinned;
  if (!sel || !state.data || state.head === "all") {
    if (state.head === "all") {
      infoEl.textContent = "Hover a cell for its weight; click a head to open it.";
      return;
    }
    infoEl.replaceChildren(
      "Hover a cell for its weight. Hover or click a token to highlight its row (what it ",
      "attends to) and column (what attends to it); click pins, ",
      el("kbd", "", "Esc"),
      " unpins.",
    );
    return;
  }
  const [queries, keys] = axesFor(state.kind, state.data);
  const layer = state.data[state.kind][state.layer];
  if (!layer || !layer[state.head]) return;
  const matrix = layer[state.head];
  const linked = state.kind !== "cross";
  const parts = [];
  const top = (pairs) =>
    pairs
      .sort((a, b) => b[1] - a[1])
      .slice(0, 3)
      .map(([t, v, n]) => `${quoted(t)}#${n} ${v.toFixed(2)}`)
      .join(", ");
  if (sel.axis === "q" || linked) {
    const i = sel.index;
    if (i < queries.length) {
      const pairs = keys.map((t, j) => [t, matrix[i][j], j]);
      parts.push(`${quoted(queries[i])}#${i} attends most to ${top(pairs)}`);
    }
  }
  if (sel.axis === "k" || linked) {
    const j = sel.index;
    if (j < keys.length) {
      const pairs = queries.map((t, i) => [t, matrix[i][j], i]);
      parts.push(`${quoted(keys[j])}#${j} is attended most by ${top(pairs)}`);
    }
  }
  const prefix = state.pinned && !state.hover ? "Pinned (Esc to unpin): " : "";
  infoEl.textContent = prefix + parts.join("; ") + ".";
}

function renderTokensLine(host, tokens) {
  host.replaceChildren(...tokens.map((t) => tokenSpan(t, "tok chip")));
}

// Confidence: a token's probability under the model, exp(log-probability). Low probabilities
// are warm and saturated, high ones pale, so the doubtful tokens are the ones that stand out.
const CONF = makeLut((t) => oklchToRgb(0.62 + 0.355 * t, 0.19 * (1 - t) ** 1.5 + 0.01, 30 + 110 * t));
const LOW_CONFIDENCE = 0.2;

function confidenceScale() {
  return {
    lut: CONF,
    index: (p) => Math.round(clamp(p, 0, 1) * (LUT_SIZE - 1)),
    ticks: [0, 0.5, 1],
  };
}

function renderScoredTokens(host, tokens, logProbs) {
  const scale = confidenceScale();
  const spans = tokens.map((t, i) => {
    const span = tokenSpan(t, "tok chip scored");
    const lp = logProbs[i];
    if (lp === undefined) return span;
    const p = Math.exp(lp);
    const rgb = CONF.rgb[scale.index(p)];
    span.style.background = CONF.css[scale.index(p)];
    span.style.color = textColourFor(rgb);
    if (p < LOW_CONFIDENCE) span.classList.add("low");
    span.dataset.prob = p.toFixed(4);
    span.title = `${JSON.stringify(t)}: P = ${p.toFixed(3)}, log P = ${lp.toFixed(3)}`;
    return span;
  });
  host.replaceChildren(...spans);
  drawLegend($("#confidence-legend"), scale, "P(token)");
  const low = spans.filter((s) => s.classList.contains("low")).length;
  $("#confidence-summary").textContent =
    `log P = ${logProbs.reduce((a, b) => a + b, 0).toFixed(3)}; ` +
    `${low} token${low === 1 ? "" : "s"} below P = ${LOW_CONFIDENCE} (outlined)`;
}

function guideFields(body) {
  const phrases = $("#constraints").value.split("\n").map((p) => p.trim()).filter((p) => p);
  if (phrases.length) body.constraints = phrases;
  const prefix = $("#prefix").value;
  if (prefix.trim()) body.prefix = prefix;
  return body;
}

async function translate() {
  clearError();
  const text = $("#text").value;
  const target = $("#target").value;
  const body = guideFields({ text, beam_size: Number($("#beam").value) });
  if (target.trim()) body.target = target;
  const button = $("#translate");
  button.disabled = true;
  button.textContent = "Translating…";
  $("#panel-attention").setAttribute("aria-busy", "true");
  try {
    const data = await api("/api/attention", body);
    state.request = body;
    state.data = mergeMaps(
      {
        translation: data.translation,
        source_tokens: data.source_tokens,
        target_tokens: data.target_tokens,
        output_tokens: data.output_tokens,
      },
      data,
    );
    state.pinned = null;
    state.hover = null;
    $("#result").hidden = false;
    $("#translation").textContent = data.translation;
    $("#translation-caption").textContent = body.target
      ? "Model's translation (attention shown for the teacher-forced target)"
      : "Translation";
    const notice = $("#truncated-notice");
    if (data.truncated) {
      notice.textContent =
        `The source was cut to ${data.max_len} tokens, the model's maximum length ` +
        `(it had ${data.source_length}).`;
      notice.hidden = false;
    } else {
      notice.hidden = true;
      notice.textContent = "";
    }
    renderTokensLine($("#source-tokens"), data.source_tokens);
    renderScoredTokens($("#output-tokens"), data.output_tokens, data.token_log_probs);
    $("#attention-view").hidden = false;
    syncSelectors();
    renderAttention();
  } catch (err) {
    showError(err.message);
  } finally {
    button.disabled = false;
    button.textContent = "Translate";
    $("#panel-attention").removeAttribute("aria-busy");
  }
}

function setKind(kind) {
  if (!state.data || kind === state.kind) return;
  state.kind = kind;
  state.pinned = null;
  state.hover = null;
  syncSelectors();
  renderAttention();
}

// ---------------------------------------------------------------- positional tab

const POSITIONAL_AXES = {
  sinusoidal: ["position", "dimension"],
  learned: ["position", "dimension"],
  rotary: ["position", "frequency"],
  alibi: ["query position", "key position"],
};

function numericHeatmap(host, matrix, rowTitle, colTitle, scale, name) {
  host.replaceChildren();
  const Q = matrix.length;
  const K = matrix[0] ? matrix[0].length : 0;
  const rows = Array.from({ length: Q }, (_, i) => i);
  const cols = Array.from({ length: K }, (_, j) => j);
  const tip = (i, j, v) => `${rowTitle} ${i}, ${colTitle} ${j}: ${formatValue(v)}`;
  const labelW = labelWidthFor([String(Q)], 11);
  const cell = fitCell(host, Q, K, labelW, { min: 2, max: 28, maxHeight: 520 });
  if (Q * K > DOM_CELL_LIMIT || cell < 5) {
    // Too many cells for the DOM: a canvas that fills the width, cells not square.
    const width = Math.max(200, (host.clientWidth || 600) - 8);
    const cellW = Math.max(1, width / K);
    const cellH = clamp(420 / Q, 1, 28);
    const wrap = el("div", "hm-canvas-wrap");
    wrap.append(
      el("div", "canvas-axes", `↓ ${rowTitle} 0…${Q - 1}    → ${colTitle} 0…${K - 1}`),
      canvasHeatmap({ matrix, scale, cellW, cellH, tip }),
    );
    host.append(wrap);
    return;
  }
  const view = domHeatmap({
    rows,
    cols,
    value: (i, j) => matrix[i][j],
    scale,
    tip,
    cell,
    labelStep: Math.max(1, Math.ceil(14 / cell)),
    rowTitle,
    colTitle,
    name,
  });
  host.append(view.node);
}

async function loadPositional() {
  const length = Number($("#pos-length").value);
  try {
    const data = await api(`/api/positional?length=${length}`);
    if (Number($("#pos-length").value) !== length) return; // a newer request is on its way
    clearError();
    state.positionalLoaded = true;
    renderPositional(data);
  } catch (err) {
    showError(err.message);
  }
}

function renderPositional(data) {
  $("#pos-note").textContent = data.note || "";
  const [rowTitle, colTitle] = POSITIONAL_AXES[data.kind] || ["row", "column"];
  const matrixFig = $("#pos-matrix").closest("figure");
  const simFig = $("#pos-similarity-figure");
  matrixFig.hidden = !data.matrix;
  simFig.hidden = !data.similarity;
  const captions = {
    sinusoidal: `Encoding added to the embeddings (${data.length} positions × ${data.d_model} dimensions)`,
    learned: `Learned position table (${data.length} positions × ${data.d_model} dimensions)`,
    rotary: `Rotation angle position·θᵢ (${data.length} positions × frequencies)`,
    alibi: `Bias added to head 0's scores (${data.length} query × ${data.length} key positions)`,
  };
  $("#pos-matrix-caption").textContent = captions[data.kind] || "Positional matrix";
  if (data.matrix) {
    const scale = autoScale(data.matrix);
    numericHeatmap($("#pos-matrix"), data.matrix, rowTitle, colTitle, scale, "positional matrix");
    drawLegend($("#pos-matrix-legend"), scale, "value");
  } else {
    $("#pos-matrix").replaceChildren();
  }
  if (data.similarity) {
    const scale = divergingScale(1);
    numericHeatmap($("#pos-similarity"), data.similarity, "position", "position", scale,
      "cosine similarity of positions");
    drawLegend($("#pos-similarity-legend"), scale, "cosine");
  } else {
    $("#pos-similarity").replaceChildren();
  }
}

const loadPositionalSoon = debounce(loadPositional, 180);

function setPositionalLength(value, fromNumber) {
  const max = Number($("#pos-length").max);
  const n = clamp(Math.round(Number(value) || 1), 1, max);
  $("#pos-length").value = String(n);
  if (!fromNumber) $("#pos-length-number").value = String(n);
  $("#pos-length-value").textContent = String(n);
  loadPositionalSoon();
}

// ---------------------------------------------------------------- masks tab

const MASK_ON = [58, 157, 93];
const MASK_OFF = [236, 238, 242];
const maskColour = (v) => (v ? MASK_ON : MASK_OFF);

function maskFigure(title, grid, note) {
  const fig = el("figure", "card mask-fig");
  const cap = el("figcaption", "", title);
  if (note) cap.append(el("span", "fig-note", ` ${note}`));
  fig.append(cap, grid);
  return fig;
}

function maskGrid({ rows, cols, matrix, tokens, rowTitle, colTitle, tip, maxCell = 30 }) {
  const host = el("div", "heatmap-host");
  const labelW = labelWidthFor(rows.map((r) => (tokens ? visibleToken(r) : String(r))), 12);
  const width = Math.min($("#masks").clientWidth || 900, 640);
  const cell = Math.floor(clamp((width - labelW) / cols.length, 8, maxCell));
  const view = domHeatmap({
    rows,
    cols,
    value: (i, j) => matrix[i][j],
    colour: maskColour,
    tip,
    cell,
    tokens,
    rowTitle,
    colTitle,
    name: rowTitle ? `${rowTitle} by ${colTitle}` : undefined,
  });
  host.append(view.node);
  return host;
}

async function loadMasks() {
  const texts = $("#mask-texts")
    .value.split("\n")
    .map((t) => t.trim())
    .filter((t) => t.length > 0);
  const button = $("#show-masks");
  button.disabled = true;
  try {
    const data = await api("/api/masks", { texts: texts.length ? texts : [""] });
    clearError();
    state.masksLoaded = true;
    renderMasks(data);
  } catch (err) {
    showError(err.message);
  } finally {
    button.disabled = false;
  }
}

function renderMasks(data) {
  const host = $("#masks");
  host.replaceChildren();
  const B = data.tokens.length;
  const S = data.look_ahead.length;
  const positions = Array.from({ length: S }, (_, j) => j);
  const sentenceLabels = data.tokens.map((_, b) => `sentence ${b + 1}`);
  const allow = (v) => (v ? "allowed (may attend)" : "blocked");

  const padding = maskGrid({
    rows: sentenceLabels,
    cols: positions,
    matrix: data.padding,
    tokens: false,
    rowTitle: "sentence",
    colTitle: "position",
    tip: (b, j, v) => `sentence ${b + 1}, position ${j} ${quoted(data.tokens[b][j])}: ` +
      (v ? "real token (may be attended)" : "padding (blocked)"),
  });
  const paddingTokens = el("div", "mask-tokens");
  data.tokens.forEach((toks, b) => {
    const line = el("p", "tokens-line");
    line.append(el("span", "caption", `sentence ${b + 1}`), " ");
    line.append(...toks.map((t) => tokenSpan(t, "tok chip")));
    if (data.truncated && data.truncated[b]) {
      line.append(el("span", "notice inline", `cut to ${S} tokens, the model's maximum length`));
    }
    paddingTokens.append(line);
  });
  const padFig = maskFigure(`Padding mask (${B} × ${S})`, padding,
    "true on real tokens, false on <pad>");
  padFig.append(paddingTokens);

  const look = maskGrid({
    rows: positions,
    cols: positions,
    matrix: data.look_ahead,
    tokens: false,
    rowTitle: "query",
    colTitle: "key",
    tip: (i, j, v) => `query ${i} → key ${j}: ${allow(v)}`,
    maxCell: 24,
  });
  const row = el("div", "mask-row");
  row.append(padFig, maskFigure(`Look-ahead mask (${S} × ${S})`, look, "key j visible to query i when j ≤ i"));
  host.append(row);

  const combined = el("div", "mask-row");
  data.combined.forEach((m, b) => {
    const toks = data.tokens[b];
    const grid = maskGrid({
      rows: toks,
      cols: toks,
      matrix: m,
      tokens: true,
      rowTitle: "queries",
      colTitle: "keys",
      tip: (i, j, v) => `${quoted(toks[i])} → ${quoted(toks[j])}: ${allow(v)}`,
      maxCell: 28,
    });
    combined.append(maskFigure(`Combined mask, sentence ${b + 1} (${S} × ${S})`, grid,
      "look-ahead and key padding"));
  });
  host.append(combined);
}

// ---------------------------------------------------------------- tabs

function selectTab(name, focus = false) {
  state.tab = name;
  for (const tab of $$("[data-tab]")) {
    const on = tab.dataset.tab === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    if (on && focus) tab.focus();
    $(`#${tab.getAttribute("aria-controls")}`).hidden = !on;
  }
  tooltip.hide();
  if (name === "positional" && !state.positionalLoaded) loadPositional();
  if (name === "masks" && !state.masksLoaded) loadMasks();
  if (name === "attention" && state.data) renderAttention();
}

// Arrow keys move along a row of buttons (tabs, the attention-kind radio group).
function rovingKeys(container, selector, activate) {
  container.addEventListener("keydown", (ev) => {
    const items = $$(selector, container);
    const idx = items.indexOf(document.activeElement);
    if (idx < 0) return;
    let next = null;
    if (ev.key === "ArrowRight" || ev.key === "ArrowDown") next = (idx + 1) % items.length;
    if (ev.key === "ArrowLeft" || ev.key === "ArrowUp") next = (idx - 1 + items.length) % items.length;
    if (ev.key === "Home") next = 0;
    if (ev.key === "End") next = items.length - 1;
    if (next === null) return;
    ev.preventDefault();
    items[next].focus();
    activate(items[next]);
  });
}

// ---------------------------------------------------------------- start-up

async function init() {
  tooltip.node = $("#tooltip");

  $("#translate-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    translate();
  });
  for (const b of $$("#kind [data-kind]")) {
    b.addEventListener("click", () => setKind(b.dataset.kind));
  }
  rovingKeys($("#kind"), "[data-kind]", (b) => setKind(b.dataset.kind));
  $("#layer").addEventListener("change", () => {
    state.layer = Number($("#layer").value);
    syncSelectors();
    renderAttention();
  });
  $("#head").addEventListener("change", () => {
    const v = $("#head").value;
    state.head = v === "all" ? "all" : Number(v);
    renderAttention();
  });
  $("#scale-max").addEventListener("change", renderAttention);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && state.pinned) onTokenFocus(null, "unpin");
  });

  for (const tab of $$("[data-tab]")) tab.addEventListener("click", () => selectTab(tab.dataset.tab));
  rovingKeys($(".tabs"), "[data-tab]", (t) => selectTab(t.dataset.tab));

  $("#pos-length").addEventListener("input", (ev) => setPositionalLength(ev.target.value, false));
  $("#pos-length-number").addEventListener("change", (ev) => {
    setPositionalLength(ev.target.value, false);
  });
  $("#masks-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    loadMasks();
  });
  $("#mask-texts").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      loadMasks();
    }
  });

  window.addEventListener(
    "resize",
    debounce(() => {
      if (state.tab === "attention") renderAttention();
    }, 150),
  );

  const beam = $("#beam");
  fillSelect(beam, Array.from({ length: 8 }, (_, i) => [i + 1, i === 0 ? "1 (greedy)" : String(i + 1)]), 4);

  try {
    const m = await api("/api/model");
    state.model = m;
    renderSummary(m);
    const beams = new Set([1, 2, 3, 4, 5, 6, 8, 12, 16, m.beam_size]);
    const sorted = Array.from(beams).filter((b) => b >= 1 && b <= 16).sort((a, b) => a - b);
    fillSelect(beam, sorted.map((b) => [b, b === 1 ? "1 (greedy)" : String(b)]), m.beam_size);
    const range = $("#pos-length");
    const number = $("#pos-length-number");
    const longest = m.positional_max_length || m.max_len;
    range.max = number.max = String(longest);
    const dflt = Math.min(longest, 64);
    range.value = number.value = String(dflt);
    $("#pos-length-value").textContent = String(dflt);
    document.body.dataset.ready = "true";
  } catch (err) {
    showError(`could not load the model summary: ${err.message}`);
  }
  $("#text").focus();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();
