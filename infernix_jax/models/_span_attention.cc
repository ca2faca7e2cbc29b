// Grouped-query attention of a few new rows over a cache span, an XLA CPU custom call
// (jax.ffi); the same function as `layers.attention`.
//
// o[B, T, N, H] from q [B, T, N, H], the first S' slots of layer `layer` of caches k, v
// [L, B, S, G, H] (read in place, never copied) and mask [B, T, S'] (True: query t may read
// slot s): scores = q . k / sqrt(H) where the mask allows, -1e30 elsewhere, an f32
// softmax over s, then the probabilities times v. XLA's CPU batched dots over (lane, kv head)
// copy the span into head-major order and run one small product per pair, several times the
// cost of reading the span; here each (lane, kv head) pair reads its K and V rows once, in
// place, for all T x N/G query rows that share them.
//
// Every query row is computed alone, in a fixed order over s, whatever T, S or the other
// rows are: a verify's rows equal the decodes of the same inputs bit for bit, and slots a
// row may not read (masked) contribute exact zeros, so the span length does not change it.
//
// (lane, kv head) pairs are shared over XLA's intra-op thread pool as in _packed_gemm.cc.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kLanes = 16;           // floats per vector
constexpr float kNegInf = -1e30f;    // layers.NEG_INF
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}

inline void Store(float* p, Vec v) { std::memcpy(p, &v, sizeof(Vec)); }

inline float Sum(Vec v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

struct Work {
  const float* q;
  const float* k;
  const float* v;
  const bool* mask;
  float* o;
  int64_t b, t, n, g, s, h;  // s: the span S' read
  int64_t capacity, layer;   // the caches' S and the layer read
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  // Lane `lane`, kv head `head`: every query row t, qi of the heads head * Q + qi.
  void Pair(int64_t lane, int64_t head) const {
    const int64_t group = n / g, rows = t * group, hv = h / kLanes;
    const float scale = 1.0f / std::sqrt(static_cast<float>(h));
    std::vector<float> probs(rows * s);
    std::vector<float> acc(rows * h, 0.0f);
    const bool* m = mask + lane * t * s;
    auto row = [&](int64_t r) {  // row r = (t, qi) -> its offset in q and o
      return ((lane * t + r / group) * n + head * group + r % group) * h;
    };
    // Scores, row by row over s (slot s of this pair at k + key(s)).
    auto key = [&](int64_t j) { return (((layer * b + lane) * capacity + j) * g + head) * h; };
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + row(r);
      const bool* mr = m + (r / group) * s;
      float* pr = probs.data() + r * s;
      float top = kNegInf;
      for (int64_t j = 0; j < s; ++j) {
        if (!mr[j]) {
          pr[j] = kNegInf;
          continue;
        }
        const float* kr = k + key(j);
        Vec dot = Vec{};
        for (int64_t c = 0; c < hv; ++c) dot += Load(qr + c * kLanes) * Load(kr + c * kLanes);
        pr[j] = Sum(dot) * scale;
        top = std::max(top, pr[j]);
      }
      float total = 0.0f;
      for (int64_t j = 0; j < s; ++j) {
        // exp(-1e30 - top) is exactly 0 unless no slot is readable (then a uniform row).
        const float e = (mr[j] || top == kNegInf) ? std::exp(pr[j] - top) : 0.0f;
        pr[j] = e;
        total += e;
      }
      for (int64_t j = 0; j < s; ++j) pr[j] /= total;
    }
    // Probabilities times values: each value row read once for all rows of the pair.
    for (int64_t j = 0; j < s; ++j) {
      const float* vr = v + key(j);
      for (int64_t r = 0; r < rows; ++r) {
        const float p = probs[r * s + j];
        if (p == 0.0f) continue;  // adds an exact zero
        float* ar = acc.data() + r * h;
        for (int64_t c = 0; c < hv; ++c)
          Store(ar + c * kLanes, Load(ar + c * kLanes) + p * Load(vr + c * kLanes));
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(o + row(r), acc.data() + r * h, h * sizeof(float));
  }

  void Run() {
    int64_t mine = 0;
    for (int64_t i; (i = next.fetch_add(1)) < b * g; ++mine) Pair(i / g, i % g);
    done.fetch_add(mine);
  }
};

ffi::Error SpanAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::PRED> mask,
                         ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> o) {
  auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions(), md = mask.dimensions();
  if (qd.size() != 4 || kd.size() != 5 || md.size() != 3 || vd.size() != 5 ||
      !std::equal(kd.begin(), kd.end(), vd.begin()))
    return ffi::Error::InvalidArgument("q [B,T,N,H], k/v [L,B,S,G,H], mask [B,T,S'] expected");
  auto work = std::make_shared<Work>();
  work->b = qd[0], work->t = qd[1], work->n = qd[2], work->h = qd[3];
  work->capacity = kd[2], work->g = kd[3], work->s = md[2];
  work->layer = layer.typed_data()[0];
  if (kd[1] != work->b || kd[4] != work->h || work->g <= 0 || work->n % work->g != 0 ||
      work->h % kLanes != 0 || md[0] != work->b || md[1] != work->t ||
      work->s > work->capacity || work->layer < 0 || work->layer >= kd[0])
    return ffi::Error::InvalidArgument("attention shapes disagree (H must be a multiple of 16)");
  work->q = q.typed_data();
  work->k = k.typed_data();
  work->v = v.typed_data();
  work->mask = mask.typed_data();
  work->o = o->typed_data();
  const int64_t pairs = work->b * work->g;
  if (pairs == 0 || work->t == 0) return ffi::Error::Success();
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), pairs) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([work]() { work->Run(); });
  work->Run();
  while (work->done.load(std::memory_order_acquire) < pairs) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(InfernixSpanAttention, SpanAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()    // q [B, T, N, H]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // k [L, B, S, G, H]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // v [L, B, S, G, H]
                                  .Arg<ffi::Buffer<ffi::PRED>>()   // mask [B, T, S']
                                  .Arg<ffi::Buffer<ffi::S32>>()    // layer, a scalar
                                  .Ret<ffi::Buffer<ffi::F32>>());  // o [B, T, N, H]
