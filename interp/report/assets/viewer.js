(function(){
// Find this view's root: the script's own container (JupyterLab runs output scripts before the output is
// attached to the document), else by id, retried while a notebook front-end is still inserting the output.
var me = document.currentScript;
function start(tries){
  var root = (me && me.closest && me.closest(".interp-av")) || document.getElementById("__UID__");
  if (root && root.id === "__UID__") init(root);
  else if (tries < 50) setTimeout(function(){ start(tries + 1); }, 100);
}
function init(root){
var D = JSON.parse(root.querySelector("script.interp-av-data").textContent);
root.querySelector(".nojs").style.display = "none";
function bytes(b64){ var s = atob(b64), a = new Uint8Array(s.length); for (var i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return a; }
var S = D.dtype === "uint16" ? 65535 : 255;
function arr(b64){ var a = bytes(b64); return D.dtype === "uint16" ? new Uint16Array(a.buffer) : a; }
// attention (V0, B0) and, when embedded, value-weighted attention A[i, j] ||v_j|| / sum_k A[i, k] ||v_k|| (VW, BW)
var V0 = arr(D.values), B0 = arr(D.before), VW = D.value_weighted ? arr(D.values_v) : null, BW = D.value_weighted ? arr(D.before_v) : null;
var V = V0, B = B0, weighted = false;
var W = D.end - D.start, T = W * (W + 1) / 2, NH = D.heads.length;
var li = 0, hi = 0, pinned = -1, cur = -1;
function A(r, c){ return c > r ? 0 : V[(li * NH + hi) * T + r * (r + 1) / 2 + c] / S; }
function Ahead(l, h, r, c){ return c > r ? 0 : V[(l * NH + h) * T + r * (r + 1) / 2 + c] / S; }
function before(r){ return B[(li * NH + hi) * W + r] / S; }
var toks = root.querySelectorAll(".tok"), readout = root.querySelector(".readout");
var selL = root.querySelector(".sel-layer"), selH = root.querySelector(".sel-head"), norm = root.querySelector(".norm");
var vw = root.querySelector(".vw"), shown = root.querySelector(".shown");
var LEGEND = ["attention A[i, j]", "value-weighted attention A[i, j] \u00b7 ||v_j|| / \u03a3_k A[i, k] \u00b7 ||v_k|| (Kobayashi et al. 2020)"];
function Aname(){ return weighted ? "Aw" : "A"; }
D.layers.forEach(function(l, i){ selL.add(new Option("layer " + l + (D.sliding_window[i] ? " (sliding window " + D.sliding_window[i] + ")" : ""), i)); });
D.heads.forEach(function(h, i){ selH.add(new Option("head " + h + " (kv head " + D.kv_heads[i] + ")", i)); });
function fmt(v){ return v.toFixed(3); }
function lab(r){ return "\u201c" + D.labels[r] + "\u201d"; }
function top(pairs){ pairs.sort(function(a, b){ return b[1] - a[1]; });
  return pairs.slice(0, 4).map(function(p){ return (D.start + p[0]) + " " + lab(p[0]) + " " + fmt(p[1]); }).join(", "); }
function paint(r){
  var row = [], col = [], mr = 0, mc = 0, j;
  for (j = 0; j < W; j++){ row.push(A(r, j)); col.push(A(j, r)); }
  for (j = 0; j <= r; j++) mr = Math.max(mr, row[j]);
  for (j = r; j < W; j++) mc = Math.max(mc, col[j]);
  for (j = 0; j < W; j++){
    var t = toks[j], a;
    t.classList.toggle("sel", j === r);
    if (r < 0){ t.style.background = ""; t.title = "position " + (D.start + j); continue; }
    if (j <= r){ a = norm.checked && mr > 0 ? row[j] / mr : row[j]; t.style.background = "rgba(33,102,172," + a.toFixed(3) + ")"; }
    else { a = norm.checked && mc > 0 ? col[j] / mc : col[j]; t.style.background = "rgba(230,97,1," + a.toFixed(3) + ")"; }
    t.title = "position " + (D.start + j) + (j <= r ? ": attention from the selected token " : ": attention to the selected token ") + fmt(j <= r ? row[j] : col[j]);
  }
  if (r < 0){ readout.textContent = "Hover a token or a heatmap cell."; return; }
  var rp = [], cp = [];
  for (j = 0; j <= r; j++) rp.push([j, row[j]]);
  for (j = r; j < W; j++) cp.push([j, col[j]]);
  readout.textContent = "L" + D.layers[li] + "H" + D.heads[hi] + "  query " + (D.start + r) + " " + lab(r) + (pinned >= 0 ? "  (pinned; click again to release)" : "") +
    "  [" + (weighted ? "value-weighted" : "attention") + "]" +
    "\n  looks at: " + top(rp) + (D.start > 0 ? "\n  on keys before position " + D.start + " (not shown): " + fmt(before(r)) : "") +
    "\n  looked at by: " + top(cp);
}
function show(r){ cur = r; paint(r); drawHeat(); }
toks.forEach(function(t){
  var r = +t.getAttribute("data-i");
  t.addEventListener("mouseenter", function(){ if (pinned < 0) show(r); });
  t.addEventListener("click", function(){ pinned = pinned === r ? -1 : r; show(r); });
});
root.querySelector(".tokens").addEventListener("mouseleave", function(){ if (pinned < 0) show(-1); });
var cv = root.querySelector(".hm"), tip = root.querySelector(".tip"), ctx = cv.getContext("2d");
var cell = Math.max(1, Math.min(22, Math.floor(560 / W))), labels = cell >= 10, M = labels ? 110 : 36, dpr = window.devicePixelRatio || 1;
cv.width = (M + W * cell + 4) * dpr; cv.height = (M + W * cell + 4) * dpr;
cv.style.width = (M + W * cell + 4) + "px"; cv.style.height = (M + W * cell + 4) + "px";
function blue(v){ return "rgb(" + Math.round(247 - 239 * v) + "," + Math.round(251 - 203 * v) + "," + Math.round(255 - 148 * v) + ")"; }
function short(s){ return s.length > 12 ? s.slice(0, 11) + "\u2026" : s; }
function drawHeat(){
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, cv.width, cv.height);
  var img = ctx.createImageData(W, W), d = img.data;
  for (var r = 0; r < W; r++) for (var c = 0; c < W; c++){ var v = A(r, c), o = 4 * (r * W + c);
    d[o] = 247 - 239 * v; d[o + 1] = 251 - 203 * v; d[o + 2] = 255 - 148 * v; d[o + 3] = 255; }
  var off = document.createElement("canvas"); off.width = W; off.height = W; off.getContext("2d").putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false; ctx.drawImage(off, M, M, W * cell, W * cell);
  ctx.fillStyle = "#333"; ctx.font = (labels ? 11 : 10) + "px monospace";
  if (labels){
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (var i = 0; i < W; i++) ctx.fillText(short(D.labels[i]), M - 4, M + (i + 0.5) * cell);
    for (i = 0; i < W; i++){ ctx.save(); ctx.translate(M + (i + 0.5) * cell, M - 4); ctx.rotate(-Math.PI / 2); ctx.textAlign = "left"; ctx.fillText(short(D.labels[i]), 0, 0); ctx.restore(); }
  } else {
    ctx.textAlign = "left"; ctx.textBaseline = "bottom";
    ctx.fillText("keys " + D.start + ".." + (D.end - 1) + " \u2192", M, M - 4);
    ctx.save(); ctx.translate(M - 4, M); ctx.rotate(Math.PI / 2); ctx.fillText("queries \u2192", 0, 0); ctx.restore();
  }
  if (cur >= 0){ ctx.strokeStyle = "#e66101"; ctx.lineWidth = 1; ctx.strokeRect(M, M + cur * cell, W * cell, cell); ctx.strokeRect(M + cur * cell, M, cell, W * cell); }
}
cv.addEventListener("mousemove", function(e){
  var b = cv.getBoundingClientRect(), c = Math.floor((e.clientX - b.left - M) / cell), r = Math.floor((e.clientY - b.top - M) / cell);
  if (r < 0 || c < 0 || r >= W || c >= W){ tip.style.display = "none"; return; }
  tip.textContent = "query " + (D.start + r) + " " + lab(r) + "\nkey   " + (D.start + c) + " " + lab(c) + "\n" + Aname() + " = " + (c > r ? "0 (future key)" : fmt(A(r, c)));
  tip.style.left = (e.clientX - b.left + 14) + "px"; tip.style.top = (e.clientY - b.top + 14) + "px"; tip.style.display = "block";
  if (pinned < 0 && r !== cur) show(r);
});
cv.addEventListener("mouseleave", function(){ tip.style.display = "none"; });
var thumbs = root.querySelector(".thumbs");
function drawThumbs(){
  thumbs.textContent = "";
  var n = Math.min(W, 72), k = W / n;
  D.heads.forEach(function(h, j){
    var f = document.createElement("figure"), c = document.createElement("canvas"), cap = document.createElement("figcaption");
    c.width = n; c.height = n; c.style.width = "72px"; c.style.height = "72px";
    var x = c.getContext("2d"), img = x.createImageData(n, n), d = img.data;
    for (var a = 0; a < n; a++) for (var b = 0; b <= a; b++){ var m = 0;
      for (var r = Math.floor(a * k); r < Math.floor((a + 1) * k); r++) for (var cc = Math.floor(b * k); cc < Math.floor((b + 1) * k); cc++) m = Math.max(m, Ahead(li, j, r, cc));
      var o = 4 * (a * n + b); d[o] = 247 - 239 * m; d[o + 1] = 251 - 203 * m; d[o + 2] = 255 - 148 * m; d[o + 3] = 255; }
    x.putImageData(img, 0, 0);
    cap.textContent = "H" + h; f.appendChild(c); f.appendChild(cap); f.className = j === hi ? "on" : "";
    f.addEventListener("click", function(){ selH.value = j; select(); });
    thumbs.appendChild(f);
  });
}
function select(){ var l = +selL.value; hi = +selH.value; if (l !== li){ li = l; drawThumbs(); }
  thumbs.querySelectorAll("figure").forEach(function(f, j){ f.className = j === hi ? "on" : ""; }); show(pinned >= 0 ? pinned : cur); }
selL.onchange = select; selH.onchange = select; norm.onchange = function(){ show(cur); };
function setWeighted(){ weighted = !!(vw && vw.checked && VW); V = weighted ? VW : V0; B = weighted ? BW : B0;
  shown.textContent = LEGEND[weighted ? 1 : 0]; drawThumbs(); select(); }
if (vw) vw.onchange = setWeighted;
shown.textContent = LEGEND[0];
drawThumbs(); show(-1);
}
start(0);
})();
