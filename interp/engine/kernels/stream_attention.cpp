// Fused, exact block attention of one layer for the scan (CPU, float32).
//
// Same arithmetic as interp/attention.py (the reference path): per query block and kv head, the
// logits of the block's queries (all query heads of that kv head) against the visible keys are
// computed, soft-capped, masked (causal + sliding window) and normalised over the whole visible row;
// the probabilities then give the layer output P @ V and are reduced, while the tile is still in
// cache, into per-lag sums (slash scores), the weight on key 0 (sinks) and the map of the first
// positions. Optionally the pre-RoPE counterfactual weight on key 0 is computed from q_pre / k_pre, the per-plane
// InP sums, and, given the prompt's token ids, the token-match sums of TransformerLens' head detector; on request the
// row log-sum-exp, the row entropy sums and the per-key column sums (the measures' products lse, entropy, key_mass).
// Without v the pass computes only the reductions (the scan's counterfactual RoPE variants).
//
// Why a kernel: in Python each block is a chain of separate ATen calls whose [head, block, pos]
// tile does not fit in cache and whose threads synchronise per call. Here the tile of one kv head
// stays in L2, and the two cores work on different (block, kv head) items with no synchronisation.
//
// Keys are laid out reversed within a tile (column m holds key i1 - 1 - m), so lag
// delta = m + r - (B - 1) for block row r, and one lag is one contiguous run of a row.
// at::vec picks its instruction set from these macros (torch sets them per build of its own kernels)
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#else
#define CPU_CAPABILITY DEFAULT
#endif
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <omp.h>
#include <vector>

namespace {

using at::Tensor;

using Vec = at::vec::Vectorized<float>;
constexpr int64_t W = Vec::size();

// Row reductions over the visible columns [lo, hi) of a logit row (vectorised; exp_u20 is the
// exponential of torch's CPU flash attention, relative error ~1e-6).
inline float row_max(const float* x, int64_t lo, int64_t hi) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t m = lo;
  if (hi - lo >= W) {
    Vec acc = Vec::loadu(x + m);
    for (m += W; m + W <= hi; m += W) acc = at::vec::maximum(acc, Vec::loadu(x + m));
    float tmp[W];
    acc.store(tmp);
    for (int64_t i = 0; i < W; ++i) mx = std::max(mx, tmp[i]);
  }
  for (; m < hi; ++m) mx = std::max(mx, x[m]);
  return mx;
}

// x[m] = exp(x[m] - mx) on [lo, hi) (store) or only the sum of those values (no store).
template <bool kStore>
inline float row_exp(float* x, int64_t lo, int64_t hi, float mx) {
  const Vec vmx(mx);
  Vec acc(0.f);
  int64_t m = lo;
  for (; m + W <= hi; m += W) {
    Vec e = (Vec::loadu(x + m) - vmx).exp_u20();
    if (kStore) e.store(x + m);
    acc = acc + e;
  }
  float tmp[W];
  acc.store(tmp);
  float sum = 0.f;
  for (int64_t i = 0; i < W; ++i) sum += tmp[i];
  for (; m < hi; ++m) {
    const float e = std::exp(x[m] - mx);
    if (kStore) x[m] = e;
    sum += e;
  }
  return sum;
}

// As row_exp<true>, and also returns in *sxe the sum of e * (x - mx) (for the row entropy log S - sxe / S).
inline float row_exp_ent(float* x, int64_t lo, int64_t hi, float mx, float* sxe) {
  const Vec vmx(mx);
  Vec acc(0.f), acc_xe(0.f);
  int64_t m = lo;
  for (; m + W <= hi; m += W) {
    const Vec d = Vec::loadu(x + m) - vmx;
    const Vec e = d.exp_u20();
    e.store(x + m);
    acc = acc + e;
    acc_xe = at::vec::fmadd(e, d, acc_xe);
  }
  float tmp[W], txe[W];
  acc.store(tmp);
  acc_xe.store(txe);
  float sum = 0.f, xe = 0.f;
  for (int64_t i = 0; i < W; ++i) {
    sum += tmp[i];
    xe += txe[i];
  }
  for (; m < hi; ++m) {
    const float d = x[m] - mx, e = std::exp(d);
    x[m] = e;
    sum += e;
    xe += e * d;
  }
  *sxe = xe;
  return sum;
}

// Visible reversed columns [lo, hi) of block row r: future keys come first, keys beyond the window last.
inline void row_range(int64_t r, int64_t B, int64_t C, int64_t window, int64_t& lo, int64_t& hi) {
  lo = B - 1 - r;
  hi = window > 0 ? std::min(C, window + lo) : C;
}

// Logits of one (query block, kv head) tile into s: rows = the group's query heads x block rows,
// columns = keys i1-1 .. i1-C (reversed). Scale on q (B*D multiplies, not B*C), then soft-cap.
void tile_logits(const float* q, const float* k_rev, float* qbuf, float* s, int64_t N, int64_t D, int64_t g,
                 int64_t G, int64_t i0, int64_t i1, int64_t C, double scale, double softcap) {
  const int64_t B = i1 - i0, R = G * B;
  const float sc = static_cast<float>(scale);
  for (int64_t t = 0; t < G; ++t) {
    const float* src = q + ((g * G + t) * N + i0) * D;
    float* dst = qbuf + t * B * D;
    for (int64_t x = 0; x < B * D; ++x) dst[x] = src[x] * sc;
  }
  auto opts = at::TensorOptions().dtype(at::kFloat);
  Tensor qt = at::from_blob(qbuf, {R, D}, opts);
  Tensor kt = at::from_blob(const_cast<float*>(k_rev) + (g * N + N - i1) * D, {C, D}, opts);
  Tensor st = at::from_blob(s, {R, C}, opts);
  at::mm_out(st, qt, kt.t());
  if (softcap > 0) st.div_(softcap).tanh_().mul_(softcap);
}

// Per-plane products of one query row with keys k_rev rows [m0, m1): plane l = channels (l, l + D/2).
// Adds sum_m q^(l).k^(l) and sum_m |q^(l).k^(l)| into out_s[l], out_a[l] (float within the row, double across).
void inp_row(const float* q, const float* k_rev, int64_t D, int64_t m0, int64_t m1, double* out_s, double* out_a) {
  const int64_t F = D / 2;
  int64_t l = 0;
  for (; l + W <= F; l += W) {
    const Vec q1 = Vec::loadu(q + l), q2 = Vec::loadu(q + F + l);
    Vec s(0.f), a(0.f);
    for (int64_t m = m0; m < m1; ++m) {
      const float* kr = k_rev + m * D;
      const Vec p = at::vec::fmadd(q1, Vec::loadu(kr + l), q2 * Vec::loadu(kr + F + l));
      s = s + p;
      a = a + p.abs();
    }
    float ts[W], ta[W];
    s.store(ts);
    a.store(ta);
    for (int64_t i = 0; i < W; ++i) {
      out_s[l + i] += ts[i];
      out_a[l + i] += ta[i];
    }
  }
  for (; l < F; ++l) {
    float ts = 0.f, ta = 0.f;
    for (int64_t m = m0; m < m1; ++m) {
      const float p = q[l] * k_rev[m * D + l] + q[F + l] * k_rev[m * D + F + l];
      ts += p;
      ta += std::fabs(p);
    }
    out_s[l] += ts;
    out_a[l] += ta;
  }
}

// Visible reversed columns of a block: with a window only the last `window + B - 1` keys can be seen.
inline int64_t visible_columns(int64_t i0, int64_t i1, int64_t window) {
  const int64_t B = i1 - i0;
  return window > 0 ? std::min(i1, window + B - 1) : i1;
}

std::vector<Tensor> stream_layer(const Tensor& q_in, const Tensor& k_in, const c10::optional<Tensor>& v_in, double scale,
                                 int64_t window, double softcap, int64_t block, int64_t skip, int64_t map_size,
                                 const c10::optional<Tensor>& q_pre_in, const c10::optional<Tensor>& k_pre_in, bool inp,
                                 const c10::optional<Tensor>& tokens_in, bool want_lse, bool want_entropy, bool want_key_mass) {
  // every check happens here: nothing may throw inside the OpenMP region
  // without v the call is statistics-only (counterfactual passes): no P @ V, an empty output
  const bool has_v = v_in.has_value();
  TORCH_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && (!has_v || v_in->dim() == 3), "q [head,pos,d], k/v [kv_head,pos,d] expected");
  const int64_t H = q_in.size(0), N = q_in.size(1), D = q_in.size(2), KV = k_in.size(0);
  TORCH_CHECK(KV > 0 && H % KV == 0 && k_in.size(1) == N && k_in.size(2) == D && (!has_v || v_in->sizes() == k_in.sizes()),
              "shape mismatch: q [head,pos,d], k and v [kv_head,pos,d] with head % kv_head == 0");
  TORCH_CHECK(q_pre_in.has_value() == k_pre_in.has_value(), "q_pre and k_pre go together");
  std::vector<Tensor> all = {q_in, k_in};
  if (has_v) all.push_back(*v_in);
  if (q_pre_in.has_value()) {
    TORCH_CHECK(q_pre_in->sizes() == q_in.sizes() && k_pre_in->sizes() == k_in.sizes(), "q_pre/k_pre shapes differ from q/k");
    all.push_back(*q_pre_in);
    all.push_back(*k_pre_in);
  }
  for (const auto& t : all) TORCH_CHECK(t.scalar_type() == at::kFloat && t.device().is_cpu(), "float32 CPU tensors expected");
  // token-match sums (TransformerLens head_detector patterns): previous token, duplicate token, induction
  const bool tm = tokens_in.has_value();
  TORCH_CHECK(!tm || (tokens_in->dim() == 1 && tokens_in->size(0) == q_in.size(1) && tokens_in->device().is_cpu()),
              "tokens must be [pos] on the CPU");
  const Tensor tokens = tm ? tokens_in->to(at::kLong).contiguous() : Tensor();
  TORCH_CHECK(block > 0 && map_size >= 0 && skip >= 0, "block must be > 0, map_size and skip >= 0");
  const int64_t G = H / KV;
  const Tensor q = q_in.contiguous();
  const Tensor k_rev = k_in.flip(1).contiguous();  // [kv, pos, d], row m = key N-1-m
  const Tensor v_rev = has_v ? v_in->flip(1).contiguous() : Tensor();
  const bool cf = q_pre_in.has_value();  // k_pre is present too (checked above)
  Tensor q_pre, k_pre_rev;
  if (cf) {
    q_pre = q_pre_in->contiguous();
    k_pre_rev = k_pre_in->flip(1).contiguous();
  }
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  Tensor out = at::empty({has_v ? N : 0, H, D}, f32);
  Tensor sink = at::zeros({H, N}, f32);
  Tensor sink_pre = at::zeros({cf ? H : 0, N}, f32);
  const int64_t M = std::min(map_size, N);
  Tensor map = at::zeros({H, map_size, map_size}, f64);

  const int64_t n_blocks = (N + block - 1) / block;
  const int n_threads = std::max(1, at::get_num_threads());
  const int64_t R = G * std::min(block, N);
  // per-plane inner products (InP, paper 004 eq. 8-9) of visible pairs with keys >= skip; planes are (l, l + D/2)
  const int64_t F = D / 2;
  TORCH_CHECK(!inp || D % 2 == 0, "InP sums need an even d_head");
  std::vector<Tensor> qbufs, sbufs, obufs, lags, invs, inp_s, inp_a, tms, ents, kms;
  for (int i = 0; i < n_threads; ++i) {
    qbufs.push_back(at::empty({R * D}, f32));
    sbufs.push_back(at::empty({R * N}, f32));
    obufs.push_back(at::empty({R * D}, f32));
    lags.push_back(at::zeros({H, N}, f32));
    invs.push_back(at::empty({R}, f32));
    inp_s.push_back(at::zeros({inp ? H : 0, F}, f64));
    inp_a.push_back(at::zeros({inp ? H : 0, F}, f64));
    tms.push_back(at::zeros({tm ? H : 0, 3}, f64));
    ents.push_back(at::zeros({want_entropy ? H : 0, 2}, f64));
    kms.push_back(at::zeros({want_key_mass ? H : 0, N}, f64));
  }
  // row log-sum-exp: each row is written by exactly one item, so one shared tensor
  Tensor lse = at::zeros({want_lse ? H : 0, N}, f32);
  float* lsep = want_lse ? lse.data_ptr<float>() : nullptr;
  const int64_t* tok = tm ? tokens.data_ptr<int64_t>() : nullptr;
  // items ordered by decreasing cost (late blocks see more keys) so dynamic scheduling balances
  const int64_t n_items = n_blocks * KV;
  const float* qp = q.data_ptr<float>();
  const float* kp = k_rev.data_ptr<float>();
  const float* vp = has_v ? v_rev.data_ptr<float>() : nullptr;
  float* outp = out.data_ptr<float>();
  float* sinkp = sink.data_ptr<float>();
  float* sinkpre_p = cf ? sink_pre.data_ptr<float>() : nullptr;
  double* mapp = map.data_ptr<double>();

#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
  for (int64_t item = 0; item < n_items; ++item) {
    const int tid = omp_get_thread_num();
    const int64_t b = n_blocks - 1 - item / KV, g = item % KV;
    const int64_t i0 = b * block, i1 = std::min(N, i0 + block), B = i1 - i0;
    const int64_t C = visible_columns(i0, i1, window);
    float* qbuf = qbufs[tid].data_ptr<float>();
    float* s = sbufs[tid].data_ptr<float>();
    float* obuf = obufs[tid].data_ptr<float>();
    float* lag = lags[tid].data_ptr<float>();
    float* inv = invs[tid].data_ptr<float>();
    tile_logits(qp, kp, qbuf, s, N, D, g, G, i0, i1, C, scale, softcap);
    double* ent = want_entropy ? ents[tid].data_ptr<double>() : nullptr;
    const int64_t last_slash = std::min(C, i1 - skip);  // columns >= i1 - skip are keys < skip
    // Row by row: unnormalised probabilities (zero where masked) and 1 / row sum, then every reduction of the
    // normalised row while the row is still in L1 (a second sweep over the tile would read it back from L3 at long N)
    for (int64_t row = 0; row < G * B; ++row) {
      const int64_t t = row / B, r = row % B, h = g * G + t;
      int64_t lo, hi;
      row_range(r, B, C, window, lo, hi);
      float* x = s + row * C;
      const float mx = row_max(x, lo, hi);
      float sum, sxe = 0.f;
      if (want_entropy) {
        sum = row_exp_ent(x, lo, hi, mx, &sxe);
        // H = -sum_m p_m log p_m with p_m = e_m / S, log p_m = (x_m - mx) - log S: H = log S - sum_m e_m (x_m - mx) / S
        const double hrow = std::log(static_cast<double>(sum)) - static_cast<double>(sxe) / sum;
        const int64_t n_vis = hi - lo;
        ent[h * 2] += hrow;
        if (n_vis > 1) ent[h * 2 + 1] += hrow / std::log(static_cast<double>(n_vis));
      } else {
        sum = row_exp<true>(x, lo, hi, mx);
      }
      const float w = 1.f / sum;
      inv[row] = w;
      if (want_lse) lsep[h * N + i0 + r] = mx + std::log(sum);
      std::fill(x, x + lo, 0.f);
      std::fill(x + hi, x + C, 0.f);

      const int64_t first = B - 1 - r;
      float* dst = lag + h * N - first;  // lag of column m is m - first
      for (int64_t m = first; m < last_slash; ++m) dst[m] += x[m] * w;
      sinkp[h * N + i0 + r] = i1 - 1 < C ? x[i1 - 1] * w : 0.f;  // zeroed already if outside the window
      if (want_key_mass) {  // column m is key i1 - 1 - m; masked columns hold 0
        double* km = kms[tid].data_ptr<double>() + h * N + i1 - 1;
        for (int64_t m = first; m < C; ++m) km[-m] += x[m] * w;
      }
      if (inp) {
        inp_row(qp + (h * N + i0 + r) * D, kp + (g * N + N - i1) * D, D, lo, std::min(hi, last_slash),
                inp_s[tid].data_ptr<double>() + h * F, inp_a[tid].data_ptr<double>() + h * F);
      }
      if (tm) {  // column m is key j = i1 - 1 - m; visible keys j <= i are columns >= first (masked ones hold 0)
        const int64_t i = i0 + r, ti = tok[i];
        float dup = 0.f, ind = 0.f;
        for (int64_t m = first; m < C; ++m) {
          const int64_t j = i1 - 1 - m;
          if (j < i && tok[j] == ti) dup += x[m];
          if (j >= 1 && tok[j - 1] == ti) ind += x[m];
        }
        double* acc = tms[tid].data_ptr<double>() + h * 3;
        acc[0] += first + 1 < C ? x[first + 1] * w : 0.f;
        acc[1] += dup * w;
        acc[2] += ind * w;
      }
      if (i0 + r < M)
        for (int64_t j = 0; j < std::min(M, i1); ++j) {
          const int64_t m = i1 - 1 - j;
          mapp[(h * map_size + i0 + r) * map_size + j] = m < C ? x[m] * w : 0.f;
        }
    }
    if (has_v) {  // P @ V of the unnormalised tile, each row scaled by its 1 / sum on the way out
      Tensor ot = at::from_blob(obuf, {G * B, D}, f32);
      Tensor vt = at::from_blob(const_cast<float*>(vp) + (g * N + N - i1) * D, {C, D}, f32);
      at::mm_out(ot, at::from_blob(s, {G * B, C}, f32), vt);
      for (int64_t row = 0; row < G * B; ++row) {
        const int64_t t = row / B, r = row % B;
        float* o = outp + ((i0 + r) * H + g * G + t) * D;
        const float w = inv[row];
        for (int64_t d = 0; d < D; ++d) o[d] = obuf[row * D + d] * w;
      }
    }
    if (cf && (window <= 0 || i0 < window)) {  // key 0 is visible to at least the block's first query
      // Pre-RoPE tile; only A[i, 0] is needed: 1 / sum_m exp(x_m - x_0). No max pass: the sum is >= 1 (the
      // key-0 term), and a term that overflows means A[i, 0] < e^-88, which the resulting 0 represents.
      tile_logits(q_pre.data_ptr<float>(), k_pre_rev.data_ptr<float>(), qbuf, s, N, D, g, G, i0, i1, C, scale, softcap);
      for (int64_t t = 0; t < G; ++t)
        for (int64_t r = 0; r < B; ++r) {
          int64_t lo, hi;
          row_range(r, B, C, window, lo, hi);
          float* x = s + (t * B + r) * C;
          sinkpre_p[(g * G + t) * N + i0 + r] = i1 - 1 < hi ? 1.f / row_exp<false>(x, lo, hi, x[i1 - 1]) : 0.f;
        }
    }
  }
  Tensor lag = at::zeros({H, N}, f64);
  for (auto& l : lags) lag.add_(l.to(at::kDouble));
  Tensor inp_signed = at::zeros({inp ? H : 0, F}, f64), inp_abs = at::zeros({inp ? H : 0, F}, f64);
  for (int i = 0; i < n_threads; ++i) {
    inp_signed.add_(inp_s[i]);
    inp_abs.add_(inp_a[i]);
  }
  Tensor token_match = at::zeros({tm ? H : 0, 3}, f64);
  for (auto& t : tms) token_match.add_(t);
  Tensor entropy = at::zeros({want_entropy ? H : 0, 2}, f64);
  for (auto& e : ents) entropy.add_(e);
  Tensor key_mass = at::zeros({want_key_mass ? H : 0, N}, f64);
  for (auto& km : kms) key_mass.add_(km);
  return {out, lag, sink, map, sink_pre, inp_signed, inp_abs, token_match, lse, entropy, key_mass};
}

// Attention of the query rows `rows` (sorted) to one key, each row normalised over its whole visible row:
// out[h, r] = A[h, rows[r], key] (0 where the key is masked). The scan's default pre-RoPE counterfactual weight on
// key 0 reads a few hundred stratified rows (interp.attention.key_weight_rows is the reference); here each
// (kv head, chunk of rows) item is one product of the chunk's queries (all query heads of the kv head) with the keys
// up to the chunk's last row, then one exp-sum per row, with no max pass: 1 / sum_m exp(x_m - x_key) (as sink_pre).
// Layouts as the model gives them: q_rows [row, head, d] (the sampled rows' queries), k [pos, kv_head, d].
Tensor key_weight_rows(const Tensor& q_in, const Tensor& k_in, const Tensor& rows_in, double scale, int64_t window,
                       double softcap, int64_t key) {
  TORCH_CHECK(q_in.dim() == 3 && k_in.dim() == 3, "q_rows [row,head,d], k [pos,kv_head,d] expected");
  const int64_t H = q_in.size(1), D = q_in.size(2), N = k_in.size(0), KV = k_in.size(1);
  TORCH_CHECK(KV > 0 && H % KV == 0 && k_in.size(2) == D, "shape mismatch: q_rows [row,head,d], k [pos,kv_head,d]");
  TORCH_CHECK(q_in.scalar_type() == at::kFloat && k_in.scalar_type() == at::kFloat && q_in.device().is_cpu() && k_in.device().is_cpu(),
              "float32 CPU tensors expected");
  TORCH_CHECK(rows_in.dim() == 1 && rows_in.device().is_cpu(), "rows must be [row] on the CPU");
  const Tensor rows = rows_in.to(at::kLong).contiguous();
  const int64_t R = rows.size(0), G = H / KV;
  TORCH_CHECK(q_in.size(0) == R, "q_rows must have one row per entry of rows");
  const int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r)
    TORCH_CHECK(rp[r] >= 0 && rp[r] < N && (r == 0 || rp[r] >= rp[r - 1]), "rows must be sorted positions in [0, pos)");
  Tensor out = at::zeros({H, R}, at::TensorOptions().dtype(at::kFloat));
  if (R == 0 || key < 0 || key >= N) return out;
  const Tensor q = q_in.contiguous(), k = k_in.contiguous();
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  float* op = out.data_ptr<float>();
  constexpr int64_t kChunk = 16;
  const int64_t n_chunks = (R + kChunk - 1) / kChunk, n_items = KV * n_chunks;
  const int n_threads = std::max(1, at::get_num_threads());
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<Tensor> qbufs, sbufs;
  for (int i = 0; i < n_threads; ++i) {
    qbufs.push_back(at::empty({G * kChunk * D}, f32));
    sbufs.push_back(at::empty({G * kChunk * N}, f32));
  }
  const float sc = static_cast<float>(scale);

#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
  for (int64_t item = n_items - 1; item >= 0; --item) {  // late chunks see more keys: start with them
    const int tid = omp_get_thread_num();
    const int64_t g = item / n_chunks, r0 = (item % n_chunks) * kChunk, r1 = std::min(R, r0 + kChunk), B = r1 - r0;
    const int64_t hi = rp[r1 - 1] + 1;                                     // keys [k0, hi) cover every row of the chunk
    const int64_t k0 = window > 0 ? std::max<int64_t>(0, rp[r0] - window + 1) : 0;
    if (key >= hi || key < k0) continue;  // the key is masked for every row of the chunk
    const int64_t C = hi - k0;
    float* qbuf = qbufs[tid].data_ptr<float>();
    float* s = sbufs[tid].data_ptr<float>();
    for (int64_t t = 0; t < G; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const float* src = qp + ((r0 + b) * H + g * G + t) * D;
        float* dst = qbuf + (t * B + b) * D;
        for (int64_t x = 0; x < D; ++x) dst[x] = src[x] * sc;
      }
    Tensor qt = at::from_blob(qbuf, {G * B, D}, f32);
    Tensor kt = at::from_blob(const_cast<float*>(kp) + (k0 * KV + g) * D, {C, D}, {KV * D, 1}, f32);
    Tensor st = at::from_blob(s, {G * B, C}, f32);
    at::mm_out(st, qt, kt.t());
    if (softcap > 0) st.div_(softcap).tanh_().mul_(softcap);
    for (int64_t t = 0; t < G; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const int64_t i = rp[r0 + b];
        const int64_t lo = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;  // visible keys [lo, i]
        if (key < lo || key > i) continue;
        float* x = s + (t * B + b) * C;
        op[(g * G + t) * R + r0 + b] = 1.f / row_exp<false>(x, lo - k0, i + 1 - k0, x[key - k0]);
      }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(interp_kernels, m) {
  m.def(
      "stream_layer(Tensor q, Tensor k, Tensor? v, float scale, int window, float softcap, int block, int skip, "
      "int map_size, Tensor? q_pre, Tensor? k_pre, bool inp=False, Tensor? tokens=None, bool lse=False, bool entropy=False, "
      "bool key_mass=False) -> Tensor[]");
  m.impl("stream_layer", c10::DispatchKey::CPU, &stream_layer);
  m.def("key_weight_rows(Tensor q, Tensor k, Tensor rows, float scale, int window, float softcap, int key) -> Tensor");
  m.impl("key_weight_rows", c10::DispatchKey::CPU, &key_weight_rows);
}
