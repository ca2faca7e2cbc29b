// Small-M matrix product over panel-packed weights, an XLA CPU custom call (jax.ffi).
//
// y[M, N] = x[M, K] @ W[K, N] with W stored as panels wp[N / C, K, C]: the C columns of a
// panel lie next to each other for every k, so a panel streams from memory in one
// contiguous pass. XLA's CPU dot repacks the weight operand of every product with M > 1
// (a second pass over the bytes); at the M of decoding and verification (1 to a few dozen
// rows) that repacking, not the arithmetic, sets the time. Here each panel is read once
// from memory for up to ROWS_PER_PASS rows, and again from L2 for each further block.
//
// Every output row is the same sequence of fused multiply-adds over k = 0..K-1, whatever M
// is and whichever block or thread computes it: a row's result does not depend on the
// other rows in the call.
//
// A row block's accumulators stay in vector registers: each panel is walked in column strips
// whose accumulators for kRowsPerPass rows fit the register file (AVX-512: 32 registers,
// one strip of 64 columns, 24 accumulators; otherwise 16 registers, strips of 16 columns,
// 12 accumulators: the 6 x 16 tile of AVX2 sgemm kernels). A tile wider than the register
// file spills its accumulators to the stack at every k, and the product then costs time in
// proportion to its rows instead of to its weight bytes. Strips change which columns are
// computed together, not any output's chain of multiply-adds.
//
// Panels are shared over XLA's intra-op thread pool: the calling thread and the scheduled
// helpers claim panels from one atomic counter, so the call finishes even when no helper
// ever runs (the caller then does every panel).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;        // floats per vector register
constexpr int kStrip = 64;        // columns per strip
#else
constexpr int kLanes = 8;
constexpr int kStrip = 16;
#endif
constexpr int kRowsPerPass = 6;   // rows sharing one read of a panel

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}

// Rows [0, MB) of x (row stride K) times one panel w [K, C] into y (row stride N), one
// strip of W columns at a time.
template <int MB, int C>
inline void Block(const float* x, int64_t K, const float* w, float* y, int64_t N) {
  constexpr int W = C < kStrip ? C : kStrip;
  constexpr int V = W / kLanes;
  for (int strip = 0; strip < C; strip += W) {
    Vec acc[MB][V];
    for (int m = 0; m < MB; ++m)
      for (int j = 0; j < V; ++j) acc[m][j] = Vec{};
    for (int64_t k = 0; k < K; ++k) {
      Vec wv[V];
      for (int j = 0; j < V; ++j) wv[j] = Load(w + k * C + strip + j * kLanes);
      for (int m = 0; m < MB; ++m) {
        const float xv = x[m * K + k];
        for (int j = 0; j < V; ++j) acc[m][j] += xv * wv[j];
      }
    }
    for (int m = 0; m < MB; ++m)
      for (int j = 0; j < V; ++j)
        std::memcpy(y + m * N + strip + j * kLanes, &acc[m][j], sizeof(Vec));
  }
}

template <int C>
void Panel(const float* x, const float* wp, float* y, int64_t M, int64_t K, int64_t N,
           int64_t panel) {
  const float* w = wp + panel * K * C;
  float* yp = y + panel * C;
  int64_t m = 0;
  for (; m + kRowsPerPass <= M; m += kRowsPerPass)
    Block<kRowsPerPass, C>(x + m * K, K, w, yp + m * N, N);
  switch (M - m) {
    case 5: Block<5, C>(x + m * K, K, w, yp + m * N, N); break;
    case 4: Block<4, C>(x + m * K, K, w, yp + m * N, N); break;
    case 3: Block<3, C>(x + m * K, K, w, yp + m * N, N); break;
    case 2: Block<2, C>(x + m * K, K, w, yp + m * N, N); break;
    case 1: Block<1, C>(x + m * K, K, w, yp + m * N, N); break;
    default: break;
  }
}

using PanelFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);

struct Work {
  PanelFn panel;
  const float* x;
  const float* wp;
  float* y;
  int64_t m, k, n, panels;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void Run() {
    int64_t mine = 0;
    for (int64_t p; (p = next.fetch_add(1)) < panels; ++mine) panel(x, wp, y, m, k, n, p);
    done.fetch_add(mine);
  }
};

ffi::Error PackedGemm(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                      ffi::Buffer<ffi::F32> wp, ffi::ResultBuffer<ffi::F32> y) {
  auto wd = wp.dimensions();
  if (wd.size() != 3) return ffi::Error::InvalidArgument("packed weights must be [N/C, K, C]");
  const int64_t panels = wd[0], k = wd[1], c = wd[2];
  if (k <= 0 || x.element_count() % k != 0)
    return ffi::Error::InvalidArgument("x's last axis must be the weights' K");
  PanelFn panel = c == 64 ? Panel<64> : c == 32 ? Panel<32> : c == 16 ? Panel<16> : nullptr;
  if (panel == nullptr) return ffi::Error::InvalidArgument("panel width must be 16, 32 or 64");
  auto work = std::make_shared<Work>();
  work->panel = panel;
  work->x = x.typed_data();
  work->wp = wp.typed_data();
  work->y = y->typed_data();
  work->m = x.element_count() / k;
  work->k = k;
  work->n = panels * c;
  work->panels = panels;
  if (work->m == 0) return ffi::Error::Success();
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), panels) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([work]() { work->Run(); });
  work->Run();
  while (work->done.load(std::memory_order_acquire) < panels) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(InfernixPackedGemm, PackedGemm,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // x [..., K]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // wp [N / C, K, C]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // y [..., N]
