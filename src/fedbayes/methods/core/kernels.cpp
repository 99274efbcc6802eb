// torch.randn for float32 CPU tensors, the same bits from the same generator state, about 3x faster.
//
// torch's CPU normal_ (ATen/native/cpu/DistributionTemplates.h, normal_fill; dispatched to its AVX2
// kernel on AVX2 and AVX-512 machines) draws one uniform (r & 0xFFFFFF) * 2^-24 per element from the
// generator's mt19937, calling the generator once per number, then turns each block of 16 into normals
// (Box-Muller with avx_mathfun's log256_ps / sincos256_ps), and redraws the last 16 when the size is not
// a multiple of 16. Here the same mt19937 runs on a copy of the generator's state in a loop the compiler
// vectorises (twist and tempering), the Box-Muller block is the same intrinsics from the same header,
// and the state is written back, so the generator ends where torch.randn would leave it. Loaded and
// checked against torch.randn by fedbayes/methods/noise.py, which uses torch.randn wherever it differs.
#include <torch/extension.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <c10/util/MathConstants.h>
#include <algorithm>
#include <mutex>
#define CPU_CAPABILITY_AVX2
#include <ATen/native/cpu/avx_mathfun.h>

namespace {

constexpr int N = at::MERSENNE_STATE_N, M = at::MERSENNE_STATE_M;

inline uint32_t twist(uint32_t u, uint32_t v) {
  return (((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

inline uint32_t temper(uint32_t y) {
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

// at::mt19937_engine::next_state
void next_state(uint32_t* s) {
  int i = 0;
  for (; i < N - M; ++i) s[i] = s[i + M] ^ twist(s[i], s[i + 1]);
  for (; i < N - 1; ++i) s[i] = s[i + M - N] ^ twist(s[i], s[i + 1]);
  s[N - 1] = s[M - 1] ^ twist(s[N - 1], s[0]);
}

// n draws of at::uniform_real_distribution<float>(0, 1), as at::mt19937_engine::operator() makes them
void uniforms(at::mt19937_data_pod& d, float* out, int64_t n) {
  const float scale = 1.0f / (1u << 24);
  for (int64_t k = 0; k < n;) {
    if (d.left_ == 1) {
      next_state(d.state_.data());
      d.left_ = N + 1;
      d.next_ = 0;
    }
    const int64_t take = std::min<int64_t>(d.left_ - 1, n - k);
    const uint32_t* s = d.state_.data() + d.next_;
    for (int64_t j = 0; j < take; ++j) out[k + j] = static_cast<float>(temper(s[j]) & 0xFFFFFFu) * scale;
    k += take;
    d.next_ += static_cast<uint32_t>(take);
    d.left_ -= static_cast<int>(take);
  }
}

// NormalFill16<float> of DistributionTemplates.h (AVX2), mean 0 and std 1
inline void box_muller16(float* data) {
  const __m256 two_pi = _mm256_set1_ps(2.0f * c10::pi<double>);
  const __m256 one = _mm256_set1_ps(1.0f), minus_two = _mm256_set1_ps(-2.0f);
  const __m256 std1 = _mm256_set1_ps(1.0f), mean0 = _mm256_set1_ps(0.0f);
  const __m256 u1 = _mm256_sub_ps(one, _mm256_loadu_ps(data));
  const __m256 u2 = _mm256_loadu_ps(data + 8);
  const __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(minus_two, log256_ps(u1)));
  const __m256 theta = _mm256_mul_ps(two_pi, u2);
  __m256 sintheta, costheta;
  sincos256_ps(theta, &sintheta, &costheta);
  _mm256_storeu_ps(data, _mm256_fmadd_ps(_mm256_mul_ps(radius, costheta), std1, mean0));
  _mm256_storeu_ps(data + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, sintheta), std1, mean0));
}


// n standard normals into data: normal_fill's uniforms, in order, then its Box-Muller blocks; `each`
// is called on consecutive ranges [lo, hi) whose values are final (the last 16 come last), so a caller
// can use each range while it is still in cache
template <typename F>
void normals(at::CPUGeneratorImpl* gen, float* data, int64_t size, F each) {
  std::lock_guard<std::mutex> lock(gen->mutex_);
  at::mt19937 engine = gen->engine();
  at::mt19937_data_pod d = engine.data();
  const int64_t blocks = size / 16, body = size % 16 ? size - 16 : size;  // values < body are final after their block
  constexpr int64_t CHUNK = 2048;                                       // 8 KiB: stays in L1 between the passes
  int64_t done = 0;
  for (int64_t lo = 0; lo < size; lo += CHUNK) {
    const int64_t hi = std::min(size, lo + CHUNK);
    uniforms(d, data + lo, hi - lo);
    for (int64_t i = lo; i < hi && i + 16 <= blocks * 16; i += 16) box_muller16(data + i);
    const int64_t ready = std::min(hi, body);
    if (ready > done) { each(done, ready); done = ready; }
  }
  if (size % 16 != 0) {  // normal_fill redraws the last 16
    float* tail = data + size - 16;
    uniforms(d, tail, 16);
    box_muller16(tail);
    each(size - 16, size);
  }
  engine.set_data(d);
  gen->set_engine(engine);
}

at::CPUGeneratorImpl* cpu_generator(const std::optional<at::Generator>& generator) {
  return at::get_generator_or_default<at::CPUGeneratorImpl>(generator, at::detail::getDefaultCPUGenerator());
}

void check(const torch::Tensor& t, const char* name, int64_t numel) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == numel,
              name, ": a contiguous float32 CPU tensor of ", numel, " elements");
}

// The perturbation of IVON's sampling step, IEEE-rounded one operation at a time as torch's eager kernels
// round it (fp-contract off: m + noise * std is never one fused multiply-add): std = 1/sqrt(hd * ess),
// noise *= std, theta = m + noise.
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")
void perturb(float* noise, float* theta, const float* m, const float* hd, float ess, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float std = 1.0f / std::sqrt(hd[i] * ess);
    const float e = noise[i] * std;
    noise[i] = e;
    theta[i] = m[i] + e;
  }
}
#pragma GCC pop_options

}  // namespace

// out <- standard normals from `generator` (torch's default CPU generator when None)
void randn_(torch::Tensor out, std::optional<at::Generator> generator) {
  TORCH_CHECK(out.numel() >= 16, "randn_: at least 16 elements");
  check(out, "randn_ out", out.numel());
  normals(cpu_generator(generator), out.data_ptr<float>(), out.numel(), [](int64_t, int64_t) {});
}

// IVON's posterior sample, fused: noise <- N(0, 1) as randn_ draws it, then noise <- noise / sqrt(ess (h + δ))
// and theta <- m + noise (hd = h + δ), each range while it is in cache. The same bits as
//   torch.randn(out=noise); std = (hd * ess).rsqrt(); noise.mul_(std); torch.add(m, noise, out=theta)
void sample_(torch::Tensor noise, torch::Tensor theta, torch::Tensor m, torch::Tensor hd, double ess,
             std::optional<at::Generator> generator) {
  const int64_t n = noise.numel();
  TORCH_CHECK(n >= 16, "sample_: at least 16 elements");
  for (auto* t : {&noise, &theta, &m, &hd}) check(*t, "sample_", n);
  float* e = noise.data_ptr<float>();
  float* th = theta.data_ptr<float>();
  const float* mp = m.data_ptr<float>();
  const float* hp = hd.data_ptr<float>();
  const float ess_f = static_cast<float>(ess);
  normals(cpu_generator(generator), e, n, [&](int64_t lo, int64_t hi) { perturb(e, th, mp, hp, ess_f, lo, hi); });
}

// IVON's update in place (methods/ivon.py, _ivon_step_): the same operations on the same operands in the
// same order, each rounded to float32 on its own (fp-contract off: no fused multiply-add), one pass over
// the vectors instead of ~25. delta, prior_mean: a vector, or (empty tensor) the scalar *_s; v, u:
// optional vectors. The scalars (1 − β1, ½(1 − β2)², …) are computed by the caller in Python exactly as the
// eager step computes them, and rounded to float32 here as torch rounds a Python number for a float32 tensor.
namespace {
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")
// one instance per combination of vector/scalar δ and prior mean, duals v and u, clipping, and nxg given
// or formed from the noise (θ − m) and the gradient: branch-free loops the compiler vectorises
template <bool DV, bool PV, bool V, bool U, bool CLIP, bool MUL>
void ivon_loop(float* __restrict m, float* __restrict h, float* __restrict g, float* __restrict hd,
               const float* __restrict grad, const float* __restrict nxg, const float* __restrict noise, int64_t n,
               const float* __restrict delta, float delta_s, const float* __restrict pm, float pm_s,
               const float* __restrict v, const float* __restrict u,
               float b1, float one_b1, float ess, float c2, float b2, float one_b2, float bias, float lr, float radius) {
  for (int64_t i = 0; i < n; ++i) {
    const float dl = DV ? delta[i] : delta_s;
    float gi = g[i] * b1;
    gi = gi + grad[i] * one_b1;                           // g = β1 g + (1 − β1) ĝ
    const float nx = MUL ? noise[i] * grad[i] : nxg[i];  // MUL: ∇ℓ̄(θ)∘(θ − m) formed here
    float a = nx * hd[i];
    a = a * ess;
    if (U) a = a - u[i];                                  // ĥ
    float b = h[i] - a;
    b = b * b;
    b = b * c2;
    b = b / hd[i];
    float hi = h[i] * b2;
    a = a * one_b2;
    hi = hi + a;
    hi = hi + b;                                          // new h
    a = gi / bias;
    b = m[i] - (PV ? pm[i] : pm_s);
    b = b * dl;
    a = a + b;
    if (V) a = a + v[i];
    if (U) a = a - u[i] * m[i];
    const float hdi = hi + dl;                            // new h + δ
    a = a / hdi;
    if (CLIP) a = a < -radius ? -radius : (a > radius ? radius : a);
    a = a * lr;
    m[i] = m[i] - a;
    h[i] = hi;
    g[i] = gi;
    hd[i] = hdi;
  }
}
#pragma GCC pop_options

const float* optional_vector(const torch::Tensor& t, int64_t n, const char* name) {
  if (t.numel() == 0) return nullptr;
  check(t, name, n);
  return t.data_ptr<float>();
}
}  // namespace

void ivon_step_(torch::Tensor m, torch::Tensor h, torch::Tensor g, torch::Tensor hd, torch::Tensor grad,
                torch::Tensor nxg, torch::Tensor noise, torch::Tensor delta, double delta_s, torch::Tensor prior_mean, double prior_mean_s,
                torch::Tensor v, torch::Tensor u, double beta1, double one_beta1, double beta2, double one_beta2,
                double c2, double ess, double bias, double lr, double clip_radius) {
  const int64_t n = m.numel();
  for (auto* t : {&m, &h, &g, &hd, &grad}) check(*t, "ivon_step_ state", n);
  const float* nxv = optional_vector(nxg, n, "nxg");
  const float* nov = optional_vector(noise, n, "noise");
  TORCH_CHECK((nxv == nullptr) != (nov == nullptr), "ivon_step_: nxg, or the noise to form it from");
  const bool clip = std::isfinite(clip_radius);
  const float* dv = optional_vector(delta, n, "delta");
  const float* pv = optional_vector(prior_mean, n, "prior_mean");
  const float* vv = optional_vector(v, n, "v");
  const float* uv = optional_vector(u, n, "u");
  using Loop = decltype(&ivon_loop<false, false, false, false, false, false>);
  static const Loop loops[64] = {
#define L(k) &ivon_loop<bool((k) & 1), bool((k) & 2), bool((k) & 4), bool((k) & 8), bool((k) & 16), bool((k) & 32)>
#define L8(k) L(k), L(k + 1), L(k + 2), L(k + 3), L(k + 4), L(k + 5), L(k + 6), L(k + 7)
      L8(0), L8(8), L8(16), L8(24), L8(32), L8(40), L8(48), L8(56)};
#undef L8
#undef L
  const int which = (dv != nullptr) | (pv != nullptr) << 1 | (vv != nullptr) << 2 | (uv != nullptr) << 3 |
                    clip << 4 | (nov != nullptr) << 5;
  loops[which](m.data_ptr<float>(), h.data_ptr<float>(), g.data_ptr<float>(), hd.data_ptr<float>(),
            grad.data_ptr<float>(), nxv, nov, n,
            dv, static_cast<float>(delta_s), pv, static_cast<float>(prior_mean_s), vv, uv,
            static_cast<float>(beta1), static_cast<float>(one_beta1), static_cast<float>(ess),
            static_cast<float>(c2), static_cast<float>(beta2), static_cast<float>(one_beta2),
            static_cast<float>(bias), static_cast<float>(lr), clip ? static_cast<float>(clip_radius) : 0.0f);
}

// Two elementwise updates of FOLA's local step, each one pass where the eager code makes three or two,
// rounded operation by operation as the eager code rounds them:
//   acc += (g * g) * c         (torch.mul(g, g, out=sq); sq.mul_(c); acc.add_(sq))
//   out  = (w - mu) * factor   (torch.sub(w, mu, out=out); out.mul_(factor))
namespace {
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")
void add_scaled_square_loop(float* __restrict acc, const float* __restrict g, float c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float sq = g[i] * g[i];
    sq = sq * c;
    acc[i] = acc[i] + sq;
  }
}

void scaled_difference_loop(float* __restrict out, const float* __restrict w, const float* __restrict mu,
                            const float* __restrict factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = w[i] - mu[i];
    out[i] = d * factor[i];
  }
}
#pragma GCC pop_options
}  // namespace

void add_scaled_square_(torch::Tensor acc, torch::Tensor g, double c) {
  const int64_t n = acc.numel();
  for (auto* t : {&acc, &g}) check(*t, "add_scaled_square_", n);
  add_scaled_square_loop(acc.data_ptr<float>(), g.data_ptr<float>(), static_cast<float>(c), n);
}

void scaled_difference_(torch::Tensor out, torch::Tensor w, torch::Tensor mu, torch::Tensor factor) {
  const int64_t n = out.numel();
  for (auto* t : {&out, &w, &mu, &factor}) check(*t, "scaled_difference_", n);
  scaled_difference_loop(out.data_ptr<float>(), w.data_ptr<float>(), mu.data_ptr<float>(), factor.data_ptr<float>(), n);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("randn_", &randn_, "torch.randn's bits, faster", pybind11::arg("out"), pybind11::arg("generator") = pybind11::none());
  m.def("sample_", &sample_, "IVON's sample: randn, scaled by 1/sqrt(ess hd), added to m", pybind11::arg("noise"),
        pybind11::arg("theta"), pybind11::arg("m"), pybind11::arg("hd"), pybind11::arg("ess"),
        pybind11::arg("generator") = pybind11::none());
  m.def("ivon_step_", &ivon_step_, "IVON's update in place, one pass");
  m.def("add_scaled_square_", &add_scaled_square_, "acc += (g * g) * c");
  m.def("scaled_difference_", &scaled_difference_, "out = (w - mu) * factor");
}
