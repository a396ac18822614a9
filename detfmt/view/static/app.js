// detfmt view: the front end. Every string that comes from the dataset (class names, file
// names, card text, split names) reaches the page through textContent or an attribute value,
// never through innerHTML, so a hostile dataset cannot inject markup or script.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PAGE = 48;
const THUMB = 256;
const state = { info: null, split: "", offset: 0, matches: 0, total: 0, indices: null,
                params: null, zoom: 1, sample: null, query: "" };

function $(id) { return document.getElementById(id); }

// Attributes as values; "style" through the CSSOM (the Content-Security-Policy refuses style
// attributes, not element.style).
function setAttributes(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") node.style.cssText = String(v);
    else node.setAttribute(k, String(v));
  }
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  setAttributes(node, attrs);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

function color(cls) { const p = state.info.palette; return p[((cls % p.length) + p.length) % p.length]; }

function className(cls) { const n = state.info.classes; return cls >= 0 && cls < n.length ? n[cls] : String(cls); }

async function api(route, params) {
  const q = new URLSearchParams(params || {});
  if (state.split) q.set("split", state.split);
  const response = await fetch(`/api/${route}?${q}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function showError(error) {
  const box = $("error");
  box.hidden = !error;
  box.textContent = error ? `error: ${error.message || error}` : "";
}

function imageUrl(i, size) {
  const q = new URLSearchParams({ i, size });
  if (state.split) q.set("split", state.split);
  return `/api/image?${q}`;
}

// Boxes over an image shown at `scale` px per stored pixel: one <rect> per box, in stored
// coordinates (the viewBox), stroked in the class colour.
function drawBoxes(svg, w, h, scale, boxes, classes, labels, preds) {
  clear(svg);
  svg.setAttribute("width", w * scale);
  svg.setAttribute("height", h * scale);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  boxes.forEach((b, k) => {
    const c = color(classes[k]);
    const rect = svgEl("rect", { class: "box", x: b[0], y: b[1], width: Math.max(0, b[2] - b[0]),
                                 height: Math.max(0, b[3] - b[1]), stroke: c, "stroke-width": 2 });
    rect.dataset.index = k;
    rect.appendChild(svgEl("title", {}, className(classes[k])));
    svg.appendChild(rect);
    if (labels) {
      const size = 12 / scale;
      const y = b[1] - 3 / scale >= size ? b[1] - 3 / scale : b[1] + size;
      const text = svgEl("text", { class: "label", x: b[0] + 2 / scale, y, fill: c,
                                   style: `font-size:${size}px;stroke-width:${3 / scale}px` },
                         className(classes[k]));
      svg.appendChild(text);
    }
  });
  // predictions: dashed, in their class colour; false positives thinner
  if (preds) preds.boxes.forEach((b, k) => {
    const c = color(preds.classes[k]);
    const rect = svgEl("rect", { class: `box pred ${preds.tp[k] ? "tp" : "fp"}`, x: b[0], y: b[1],
                                 width: Math.max(0, b[2] - b[0]), height: Math.max(0, b[3] - b[1]),
                                 stroke: c, "stroke-width": preds.tp[k] ? 2 : 1.5, "stroke-dasharray": "5 3" });
    rect.appendChild(svgEl("title", {}, `${className(preds.classes[k])} ${preds.scores[k].toFixed(2)} ${preds.tp[k] ? "TP" : "FP"}`));
    svg.appendChild(rect);
  });
}

function tally(preds) {
  return preds ? ` · TP ${preds.counts.tp} FP ${preds.counts.fp} FN ${preds.counts.fn}` : "";
}

// ---- grid ----

function queryParams() {
  const p = {};
  const ids = Array.from($("f-classes").selectedOptions).map((o) => o.value);
  if (ids.length) p[$("f-mode").value] = ids.join(",");
  if ($("f-min").value !== "") p.min = $("f-min").value;
  if ($("f-max").value !== "") p.max = $("f-max").value;
  if ($("f-size").value) p.size = $("f-size").value;
  if ($("f-name").value) p.name = $("f-name").value;
  p.sort = $("f-sort").value;
  return p;
}

function tile(item) {
  const node = el("div", { class: "tile", tabindex: 0, "data-index": item.index });
  const thumb = el("div", { class: "thumb" });
  const frame = el("div", { class: "frame" });
  const scale = Math.min(THUMB / item.width, THUMB / item.height, 4);
  const img = el("img", { src: imageUrl(item.index, THUMB), alt: "", width: Math.round(item.width * scale),
                          height: Math.round(item.height * scale) });
  if (scale > 1) img.classList.add("pixels");
  const svg = svgEl("svg", {});
  drawBoxes(svg, item.width, item.height, scale, item.boxes, item.classes, false, item.predictions);
  frame.append(img, svg);
  thumb.appendChild(frame);
  const name = item.file_name ? ` ${item.file_name}` : "";
  const caption = el("div", { class: "caption", title: item.file_name });
  caption.append(el("div", {}, `#${item.index}${name}`),
                 el("div", {}, `${item.boxes.length} boxes${tally(item.predictions)}`));
  node.append(thumb, caption);
  node.addEventListener("click", () => { location.hash = `#/sample/${item.index}`; });
  node.addEventListener("keydown", (e) => { if (e.key === "Enter") location.hash = `#/sample/${item.index}`; });
  return node;
}

async function loadGrid() {
  const params = queryParams();
  const key = JSON.stringify([state.split, params]);
  if (key !== state.query) { state.offset = 0; state.query = key; }
  const data = await api("query", { ...params, offset: state.offset, limit: PAGE });
  state.matches = data.matches;
  state.total = data.total;
  state.params = params;
  state.indices = data.indices;
  $("count").textContent = `${data.matches} of ${data.total} samples match`;
  const pages = Math.max(1, Math.ceil(data.matches / PAGE));
  $("page").textContent = `page ${Math.floor(state.offset / PAGE) + 1} of ${pages}`;
  $("prev").disabled = state.offset === 0;
  $("next").disabled = state.offset + PAGE >= data.matches;
  const tiles = $("tiles");
  clear(tiles);
  for (const item of data.items) tiles.appendChild(tile(item));
  document.body.dataset.ready = "grid";
}

// ---- sample ----

// The sample before / after i in the grid's filter and order: known here when the page holds
// the matches (or there is no filter), else undefined (the server is asked, see step).
function neighbour(i, step) {
  if (state.indices) {
    const at = state.indices.indexOf(i);
    if (at >= 0) {
      const next = at + step;
      return next >= 0 && next < state.indices.length ? state.indices[next] : null;
    }
  }
  const unfiltered = !state.params || (state.matches === state.total && state.params.sort === "index");
  if (!unfiltered) return undefined;
  const next = i + step;
  return state.sample && next >= 0 && next < state.sample.count ? next : null;
}

function row(table, cells, header) {
  const tr = el("tr");
  for (const cell of cells) {
    if (cell instanceof Node) { const td = el(header ? "th" : "td"); td.appendChild(cell); tr.appendChild(td); }
    else tr.appendChild(el(header ? "th" : "td", {}, cell));
  }
  table.appendChild(tr);
}

function fmt(v) { return typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v); }

function renderSample() {
  const s = state.sample;
  const z = state.zoom;
  $("zoom").textContent = `${Math.round(z * 100)}%`;
  const img = $("s-img");
  img.width = Math.round(s.width * z);
  img.height = Math.round(s.height * z);
  img.classList.toggle("pixels", z > 1);
  drawBoxes($("s-svg"), s.width, s.height, z, s.boxes, s.classes, true, s.predictions);
  const boxes = $("s-boxes");
  clear(boxes);
  const original = $("orig").checked && s.image_fields.scale_offset;
  const names = Object.keys(s.box_fields);
  row(boxes, ["#", "class", original ? "x0 y0 x1 y1 (original px)" : "x0 y0 x1 y1 (stored px)", ...names], true);
  s.boxes.forEach((b, k) => {
    let xyxy = b;
    if (original) {
      const [sx, sy, tx, ty] = s.image_fields.scale_offset;
      xyxy = [(b[0] - tx) / sx, (b[1] - ty) / sy, (b[2] - tx) / sx, (b[3] - ty) / sy];
    }
    const swatch = el("span", {}, "");
    const name = el("span");
    const chip = el("span", { class: "swatch", style: `background:${color(s.classes[k])}` });
    swatch.append(chip, document.createTextNode(className(s.classes[k])));
    name.appendChild(swatch);
    row(boxes, [String(k), name, xyxy.map(fmt).join(" "), ...names.map((f) => fmt(s.box_fields[f][k]))]);
  });
  const preds = $("s-preds");
  clear(preds);
  $("s-preds-box").hidden = !s.predictions;
  if (s.predictions) {
    const p = s.predictions;
    row(preds, ["#", "class", "score", "match", "x0 y0 x1 y1 (stored px)"], true);
    p.boxes.forEach((b, k) => row(preds, [String(k), className(p.classes[k]), p.scores[k].toFixed(3),
                                          p.tp[k] ? "TP" : "FP", b.map(fmt).join(" ")]));
  }
  const fields = $("s-fields");
  clear(fields);
  row(fields, ["index", String(s.index)]);
  row(fields, ["stored size (h × w)", `${s.height} × ${s.width}`]);
  row(fields, ["codec", s.codec]);
  for (const [k, v] of Object.entries(s.image_fields)) row(fields, [k, Array.isArray(v) ? v.map(fmt).join(" ") : fmt(v)]);
  const name = s.image_fields.file_name ? ` ${s.image_fields.file_name}` : "";
  $("s-title").textContent = `#${s.index}${name} (${s.boxes.length} boxes)${tally(s.predictions)}`;
  $("s-prev").disabled = neighbour(s.index, -1) === null;  // undefined: ask on a click
  $("s-next").disabled = neighbour(s.index, 1) === null;
}

async function loadSample(i) {
  const s = await api("sample", { i });
  state.sample = s;
  const img = $("s-img");
  img.src = imageUrl(i, 0);
  renderSample();
  await img.decode().catch(async () => {  // say why the image is missing
    const answer = await fetch(img.src).then((r) => r.json()).catch(() => null);
    if (answer && answer.error) showError(new Error(answer.error));
  });
  document.body.dataset.ready = `sample-${i}`;
}

async function step(direction) {
  if (!state.sample) return;
  let next = neighbour(state.sample.index, direction);
  if (next === undefined) {
    try {
      next = (await api("neighbour", { ...state.params, i: state.sample.index, step: direction })).index;
    } catch (error) { showError(error); return; }
  }
  if (next !== null) location.hash = `#/sample/${next}`;
}

function zoom(factor) {
  if (!state.sample) return;
  state.zoom = factor === 0 ? 1 : Math.min(16, Math.max(1 / 16, state.zoom * factor));
  renderSample();
}

// ---- dataset page ----

function barChart(svg, bars, opts) {
  // one row per bar, one thin sub-bar per series; values written after the bars
  clear(svg);
  const rowH = 16, labelW = 140, width = 640, n = opts.names.length;
  const max = Math.max(1, ...bars.map((b) => Math.max(...b.values)));
  svg.setAttribute("width", width);
  svg.setAttribute("height", bars.length * rowH + 4);
  bars.forEach((bar, r) => {
    const y = r * rowH;
    svg.appendChild(svgEl("text", { x: 0, y: y + 12, fill: "#ddd", "font-size": 11 }, bar.label));
    let end = labelW;
    bar.values.forEach((v, s) => {
      const w = Math.max(v > 0 ? 1 : 0, (width - labelW - 170) * v / max);
      const h = (rowH - 3) / n;
      svg.appendChild(svgEl("rect", { x: labelW, y: y + 1 + s * h, width: w, height: h, fill: bar.colors[s] }));
      end = Math.max(end, labelW + w);
    });
    const text = bar.values.map((v, s) => `${v} ${opts.names[s]}`).join(", ");
    svg.appendChild(svgEl("text", { x: end + 4, y: y + 12, fill: "#aaa", "font-size": 10 }, text));
  });
}

function heatmap(canvas, grid) {
  const ctx = canvas.getContext("2d");
  const bins = grid.length, cell = canvas.width / bins;
  const max = Math.max(1, ...grid.flat());
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  grid.forEach((line, r) => line.forEach((v, c) => {
    if (!v) return;
    const t = Math.log1p(v) / Math.log1p(max);
    ctx.fillStyle = `rgb(${Math.round(255 * t)}, ${Math.round(200 * t * t)}, ${Math.round(80 * (1 - t)) + 40})`;
    ctx.fillRect(c * cell, r * cell, cell, cell);
  }));
}

async function loadDataset() {
  const d = await api("stats");
  const card = $("d-card");
  clear(card);
  const keys = Object.keys(d.metadata).sort();
  if (!keys.length) row(card, ["(no card or metadata)"]);
  for (const k of keys) row(card, [k, d.metadata[k].length > 400 ? `${d.metadata[k].slice(0, 400)}…` : d.metadata[k]]);
  $("d-card-lines").textContent = d.card_lines.slice(1).join("\n") || "(no card)";
  const summary = $("d-summary");
  clear(summary);
  row(summary, ["location", d.location]);
  row(summary, ["format version", d.version]);
  row(summary, ["samples", d.num_samples]);
  row(summary, ["boxes", d.num_boxes]);
  row(summary, ["images without boxes", d.images_without_boxes]);
  row(summary, ["degenerate boxes", d.degenerate_boxes]);
  const coco = d.box_size.original.coco_area;
  row(summary, ["COCO sizes (original px)", `small ${coco.small}, medium ${coco.medium}, large ${coco.large}`]);
  const byBoxes = [...d.classes].sort((a, b) => b.boxes - a.boxes || a.id - b.id);
  barChart($("d-classes"), byBoxes.map((c) => ({ label: c.name, values: [c.boxes, c.images],
                                                  colors: [color(c.id), "#888"] })),
           { names: ["boxes", "images"] });
  const hist = Object.entries(d.boxes_per_image.histogram).map(([k, v]) => ({ label: `${k} boxes`, values: [v], colors: ["#3b75af"] }));
  barChart($("d-counts"), hist, { names: ["images"] });
  heatmap($("d-centre"), d.heatmaps.centre);
  heatmap($("d-size"), d.heatmaps.size);
  const codecs = $("d-codecs");
  clear(codecs);
  row(codecs, ["codec", "samples"], true);
  for (const [k, v] of Object.entries(d.codecs)) row(codecs, [k, v]);
  const st = d.image_size.stored;
  row(codecs, ["stored height p0 / p50 / p100", st.height ? `${st.height.p0} / ${st.height.p50} / ${st.height.p100}` : "-"]);
  row(codecs, ["stored width p0 / p50 / p100", st.width ? `${st.width.p0} / ${st.width.p50} / ${st.width.p100}` : "-"]);
  row(codecs, ["bytes on disk", d.bytes.total]);
  document.body.dataset.ready = "dataset";
}

// ---- routing ----

async function route() {
  const hash = location.hash || "#/grid";
  const sample = hash.match(/^#\/sample\/(\d+)$/);
  const page = sample ? "sample" : hash === "#/dataset" ? "dataset" : "grid";
  $("grid-page").hidden = page !== "grid";
  $("sample-page").hidden = page !== "sample";
  $("dataset-page").hidden = page !== "dataset";
  $("nav-grid").classList.toggle("active", page === "grid");
  $("nav-dataset").classList.toggle("active", page === "dataset");
  document.body.dataset.ready = "";
  try {
    showError(null);
    if (page === "sample") await loadSample(Number(sample[1]));
    else if (page === "dataset") await loadDataset();
    else await loadGrid();
  } catch (error) {
    showError(error);
    document.body.dataset.ready = "error";
  }
}

function onKey(e) {
  if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
  const onSample = !$("sample-page").hidden;
  if (onSample) {
    if (e.key === "ArrowRight" || e.key === "j") step(1);
    else if (e.key === "ArrowLeft" || e.key === "k") step(-1);
    else if (e.key === "Escape") location.hash = "#/grid";
    else if (e.key === "+" || e.key === "=") zoom(1.25);
    else if (e.key === "-") zoom(0.8);
    else if (e.key === "0") zoom(0);
    else return;
    e.preventDefault();
  } else if (!$("grid-page").hidden) {
    if (e.key === "ArrowRight" && !$("next").disabled) $("next").click();
    else if (e.key === "ArrowLeft" && !$("prev").disabled) $("prev").click();
  }
}

async function main() {
  try {
    const response = await fetch("/api/info");
    state.info = await response.json();
  } catch (error) { showError(error); return; }
  const info = state.info;
  $("location").textContent = info.location;
  $("location").title = info.location;
  if (info.splits.length > 1 || info.splits[0] !== "") {
    $("split-box").hidden = false;
    for (const name of info.splits) $("split").appendChild(el("option", { value: name }, name));
    state.split = info.splits.includes("train") ? "train" : info.splits[0];
    $("split").value = state.split;
  }
  info.classes.forEach((name, id) => $("f-classes").appendChild(el("option", { value: id, style: `border-left: .8em solid ${color(id)}; padding-left: .3em` }, name)));
  $("f-classes").size = Math.min(6, Math.max(2, info.classes.length));
  for (const s of info.sorts) $("f-sort").appendChild(el("option", { value: s }, s === "worst" ? "worst (FP + FN)" : s.replace("-", " ")));
  if (info.predictions) {
    const p = info.predictions;
    $("preds-note").hidden = false;
    $("preds-note").textContent = `predictions: ${p.file} (dashed; IoU ${p.iou}, score ≥ ${p.min_score})`;
  }
  $("split").addEventListener("change", () => {
    state.split = $("split").value;
    state.sample = null;
    state.indices = state.params = null;
    route();
  });
  for (const id of ["f-classes", "f-mode", "f-min", "f-max", "f-size", "f-sort"]) $(id).addEventListener("change", loadGrid);
  let timer = null;
  $("f-name").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(loadGrid, 200); });
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); loadGrid(); });
  $("f-clear").addEventListener("click", () => { $("filters").reset(); loadGrid(); });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); loadGrid(); });
  $("next").addEventListener("click", () => { state.offset += PAGE; loadGrid(); });
  $("back").addEventListener("click", () => { location.hash = "#/grid"; });
  $("s-prev").addEventListener("click", () => step(-1));
  $("s-next").addEventListener("click", () => step(1));
  $("zoom-in").addEventListener("click", () => zoom(1.25));
  $("zoom-out").addEventListener("click", () => zoom(0.8));
  $("orig").addEventListener("change", () => state.sample && renderSample());
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", route);
  route();
}

main();
