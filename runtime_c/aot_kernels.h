/*
 * aot runtime: what the generated kernels use besides <math.h>, for <name>.c to include.
 *
 * Header-only, all static inline or macros (as aot_runtime.h): any number of models link into
 * one program. Scalar min/max are always defined; the float vector types of the register tiles
 * only for the widths a model's <name>.c asks for, by defining AOT_WANT_F32X<lanes> before it
 * includes this file, so a model gets exactly the vector types its kernels use (and only a model
 * with 4-float tiles includes <arm_neon.h> on armv7).
 */
#ifndef AOT_KERNELS_H_INCLUDED
#define AOT_KERNELS_H_INCLUDED

/* gcc for aarch64, int8 tiles (AOT_I32X4_PAIR_DOTADD, _SDOTADD: up to 16 accumulators and their
 * operands in the 32 vector registers): its scheduler before register allocation hoists every
 * load of a step and spills accumulators, so it is off for the functions after this line
 * (benchmark: int8 ResNet-8 and VWW on rpi4). */
#if defined(AOT_WANT_I32X4) && defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif

#include <stdint.h>

/* Min and max of two values: aot_min_<dtype>, aot_max_<dtype>. For floats, NaN in either operand
 * propagates, like onnxruntime's Min/Max/Clip. */
static inline float aot_min_float32(float a, float b) { return (a < b || a != a) ? a : b; }
static inline float aot_max_float32(float a, float b) { return (a > b || a != a) ? a : b; }
static inline double aot_min_float64(double a, double b) { return (a < b || a != a) ? a : b; }
static inline double aot_max_float64(double a, double b) { return (a > b || a != a) ? a : b; }
static inline int8_t aot_min_int8(int8_t a, int8_t b) { return a < b ? a : b; }
static inline int8_t aot_max_int8(int8_t a, int8_t b) { return a > b ? a : b; }
static inline int16_t aot_min_int16(int16_t a, int16_t b) { return a < b ? a : b; }
static inline int16_t aot_max_int16(int16_t a, int16_t b) { return a > b ? a : b; }
static inline int32_t aot_min_int32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t aot_max_int32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int64_t aot_min_int64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t aot_max_int64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline uint8_t aot_min_uint8(uint8_t a, uint8_t b) { return a < b ? a : b; }
static inline uint8_t aot_max_uint8(uint8_t a, uint8_t b) { return a > b ? a : b; }
static inline uint16_t aot_min_uint16(uint16_t a, uint16_t b) { return a < b ? a : b; }
static inline uint16_t aot_max_uint16(uint16_t a, uint16_t b) { return a > b ? a : b; }
static inline uint32_t aot_min_uint32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t aot_max_uint32(uint32_t a, uint32_t b) { return a > b ? a : b; }
static inline uint64_t aot_min_uint64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t aot_max_uint64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static inline uint8_t aot_min_bool(uint8_t a, uint8_t b) { return a < b ? a : b; }
static inline uint8_t aot_max_bool(uint8_t a, uint8_t b) { return a > b ? a : b; }
static inline int32_t aot_min_index(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t aot_max_index(int32_t a, int32_t b) { return a > b ? a : b; }

/* The bits of a float as an unsigned integer and back (the kernel IR's Bitcast), for the
 * polynomial exp/tanh/erf/log of aot/kernel/transcendentals.py. A union is C99's type pun; gcc and
 * clang vectorise it as a no-op. */
static inline uint32_t aot_bits_float32(float x) { union { float f; uint32_t u; } v; v.f = x; return v.u; }
static inline float aot_float32_bits(uint32_t u) { union { float f; uint32_t u; } v; v.u = u; return v.f; }
/* The kernel IR's eager select: both values are computed. gcc (with its default -ftrapping-math)
 * does not if-convert a `?:` whose branch holds a floating-point operation, even one it has
 * sunk there from before the `?:`, unless it can mask that operation (AVX-512): on AVX2 and NEON
 * the loop stayed scalar. A select of bits has no branch; gcc and clang emit a vector blend. On
 * 32-bit Arm (no IEEE vector floats, so scalar code) moving floats to core registers would only
 * cost: there it is `?:`. */
#if defined(__arm__) || defined(__thumb__)
static inline float aot_select_float32(int cond, float a, float b) { return cond ? a : b; }
#else
static inline float aot_select_float32(int cond, float a, float b)
{
    uint32_t mask = 0u - (uint32_t)(cond != 0);
    return aot_float32_bits((aot_bits_float32(a) & mask) | (aot_bits_float32(b) & ~mask));
}
#endif

/* The lesser and the greater of two floats neither of which is NaN (kernel IR Select with
 * `numbers`: an int8 requantisation's clamps): on aarch64 fminnm and fmaxnm, which gcc vectorises
 * (int8 DS-CNN's depthwise loop on rpi4: 4 instructions per 4 lanes where the selects took 8),
 * and ARMv8's vminnm / vmaxnm in 32-bit mode (rpi3); elsewhere the selects themselves. */
#if (defined(__aarch64__) || defined(__ARM_FEATURE_NUMERIC_MAXMIN)) && defined(__GNUC__)
static inline float aot_min_numbers_float32(float a, float b) { return __builtin_fminf(a, b); }
static inline float aot_max_numbers_float32(float a, float b) { return __builtin_fmaxf(a, b); }
#else
static inline float aot_min_numbers_float32(float a, float b) { return aot_select_float32(a < b, a, b); }
static inline float aot_max_numbers_float32(float a, float b) { return aot_select_float32(a > b, a, b); }
#endif

/*
 * Float vectors of 4, 8 or 16 lanes for register tiles: aot_f32x<lanes> and the macros
 * AOT_F32X<lanes>_LOAD, _WIDEN (lanes int8_t or int16_t converted to float: weights kept
 * quantised), _STORE, _SPLAT, _SPLAT_LOAD(p) (the float at p in every lane: one vld1 on armv7,
 * where gcc loads the float into a core register and copies it over), _LANE(v, i) and
 * _MULADD_LANE(acc, b, v, i) (4 lanes only: lane i of v in every lane; acc + b times it), _LOAD_STEP(p) (4 lanes
 * only: the vector at the pointer p, which then moves past it; armv7 gcc: a post-increment vld1),
 * _LOAD2_STEP(p, a, b) (two such steps, into a and b: one vld1 on armv7 gcc),
 * _ZIP_LO(a, b) and _ZIP_HI(a, b) (4 lanes only: a0 b0 a1 b1, a2 b2 a3 b3: values for every
 * other element stored as whole vectors),
 * _MULADD, _MAX, _MIN, _ADD, _SUB, _MUL, _DIV and _SELECT_LT/_LE/_GT/_GE(a, b, x, y) (x where
 * a < b ..., else y), and _REDUCE_ADD/_REDUCE_MAX(v)
 * (the lanes of v combined into one float in the kernel IR's VecReduce order, a halving tree;
 * max as aot_max_float32: a NaN wins). With GNU C those are statement expressions (which
 * __extension__ keeps quiet under -pedantic) of whole-vector steps, the upper half moved down
 * by a lane shuffle: combining the lanes as scalars made gcc branch on each NaN test.
 *
 * GNU C (gcc, clang, zig cc) gets real vector types, which each target lowers to its registers
 * (split in two or four where they are narrower); other C99 compilers get a struct and loops.
 * Macros rather than functions, so no vector crosses a call (gcc warns that passing 32-byte
 * vectors without AVX changes the ABI). Loads and stores go through an element-aligned
 * may_alias type: tiles read rows at any offset.
 *
 * 4 floats on armv7 are NEON intrinsics. gcc keeps IEEE semantics for GNU vector arithmetic
 * there, and NEON flushes denormals to zero, so it splits every vector operation into scalar VFP
 * instructions (almost none of the C backend's armv7 instructions SIMD); intrinsics it emits as
 * written. Results then flush denormals to zero, like the LLVM backend's armv7 tiles. Division
 * has no NEON instruction on armv7: gcc divides lane by lane.
 */

#ifdef AOT_WANT_F32X4
#if defined(__arm__) && defined(__ARM_NEON) && defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) \
    && !defined(AOT_NO_NEON_INTRINSICS)
#include <arm_neon.h>
typedef float32x4_t aot_f32x4;
#define AOT_F32X4_LOAD(p) vld1q_f32((const float *)(const void *)(p))
#define AOT_F32X4_WIDEN(p) ((aot_f32x4){ (float)(p)[0], (float)(p)[1], (float)(p)[2], (float)(p)[3] })
#define AOT_F32X4_STORE(p, v) vst1q_f32((float *)(void *)(p), (v))
#define AOT_F32X4_SPLAT(x) vdupq_n_f32(x)
#define AOT_F32X4_SPLAT_LOAD(p) vld1q_dup_f32((const float *)(const void *)(p))
#define AOT_F32X4_LANE(v, i) vdupq_n_f32(vgetq_lane_f32((v), (i)))
/* acc + b * lane i of v: NEON's multiply-accumulate by scalar, `vmla.f32 q, q, d[i]`, which
 * rounds the product before the add (armv7 has no fused form by scalar; the LLVM backend's
 * armv7 code uses vmla too). */
#define AOT_F32X4_MULADD_LANE(acc, b, v, i) AOT_F32X4_MULADD_LANE_##i((acc), (b), (v))
#define AOT_F32X4_MULADD_LANE_0(acc, b, v) vmlaq_lane_f32((acc), (b), vget_low_f32(v), 0)
#define AOT_F32X4_MULADD_LANE_1(acc, b, v) vmlaq_lane_f32((acc), (b), vget_low_f32(v), 1)
#define AOT_F32X4_MULADD_LANE_2(acc, b, v) vmlaq_lane_f32((acc), (b), vget_high_f32(v), 0)
#define AOT_F32X4_MULADD_LANE_3(acc, b, v) vmlaq_lane_f32((acc), (b), vget_high_f32(v), 1)
/* A walk over consecutive vectors (AOT_F32X4_LOAD_STEP(p): the 4 floats at p, then p moves past
 * them; aot/backends/c/load_walks.py). vld1 has no offset form, and gcc computes each address of
 * a tile's operand vectors with an add of its own (a quarter of a conv kernel's instructions);
 * the post-increment form walks them with none, as clang does by itself. The "m" operand tells
 * gcc which bytes the instruction reads. */
#if !defined(__clang__)
typedef struct { float f[4]; } aot_f32x4_bytes;
static inline float32x4_t aot_f32x4_load_step(const float **p)
{ float32x4_t v; __asm__("vld1.32 {%e0-%f0}, [%1]!" : "=w"(v), "+r"(*p) : "m"(*(const aot_f32x4_bytes *)*p)); return v; }
#define AOT_F32X4_LOAD_STEP(p) aot_f32x4_load_step(&(p))
/* Two steps at once, into a and b: one vld1 of four d registers ("%h": the register list of
 * the pair). */
typedef struct { float f[8]; } aot_f32x4x2_bytes;
static inline float32x4x2_t aot_f32x4_load2_step(const float **p)
{ float32x4x2_t v; __asm__("vld1.32 %h0, [%1]!" : "=w"(v), "+r"(*p) : "m"(*(const aot_f32x4x2_bytes *)*p)); return v; }
#define AOT_F32X4_LOAD2_STEP(p, a, b) do { float32x4x2_t aot_pair_ = aot_f32x4_load2_step(&(p)); \
    (a) = aot_pair_.val[0]; (b) = aot_pair_.val[1]; } while (0)
#endif
#if defined(__ARM_FEATURE_FMA)
#define AOT_F32X4_MULADD(acc, a, b) vfmaq_f32((acc), (a), (b))
#else
#define AOT_F32X4_MULADD(acc, a, b) vmlaq_f32((acc), (a), (b))
#endif
/* Ordered comparisons: gcc 12's vcgtq_f32, vcgeq_f32, vcltq_f32 and vcleq_f32 are GNU vector
 * comparisons, which it splits into a vcmpe + vmrs + select per lane for IEEE semantics (a Relu
 * epilogue took 20 scalar instructions per vector); the NEON instruction as inline assembly
 * instead. clang's intrinsics are the instructions already. */
#if defined(__clang__)
#define AOT_F32X4_CGT(a, b) vcgtq_f32((a), (b))
#define AOT_F32X4_CGE(a, b) vcgeq_f32((a), (b))
#else
static inline uint32x4_t aot_f32x4_cgt(float32x4_t a, float32x4_t b)
{ uint32x4_t m; __asm__("vcgt.f32 %q0, %q1, %q2" : "=w"(m) : "w"(a), "w"(b)); return m; }
static inline uint32x4_t aot_f32x4_cge(float32x4_t a, float32x4_t b)
{ uint32x4_t m; __asm__("vcge.f32 %q0, %q1, %q2" : "=w"(m) : "w"(a), "w"(b)); return m; }
#define AOT_F32X4_CGT(a, b) aot_f32x4_cgt((a), (b))
#define AOT_F32X4_CGE(a, b) aot_f32x4_cge((a), (b))
#endif
#define AOT_F32X4_MAX(a, b) vbslq_f32(vorrq_u32(AOT_F32X4_CGT((a), (b)), vmvnq_u32(vceqq_f32((a), (a)))), (a), (b))
#define AOT_F32X4_MIN(a, b) vbslq_f32(vorrq_u32(AOT_F32X4_CGT((b), (a)), vmvnq_u32(vceqq_f32((a), (a)))), (a), (b))
#define AOT_F32X4_ZIP_LO(a, b) (vzipq_f32((a), (b)).val[0])
#define AOT_F32X4_ZIP_HI(a, b) (vzipq_f32((a), (b)).val[1])
#define AOT_F32X4_ADD(a, b) vaddq_f32((a), (b))
#define AOT_F32X4_SUB(a, b) vsubq_f32((a), (b))
#define AOT_F32X4_MUL(a, b) vmulq_f32((a), (b))
#define AOT_F32X4_DIV(a, b) ((a) / (b))
#define AOT_F32X4_SELECT_LT(a, b, x, y) vbslq_f32(AOT_F32X4_CGT((b), (a)), (x), (y))
#define AOT_F32X4_SELECT_LE(a, b, x, y) vbslq_f32(AOT_F32X4_CGE((b), (a)), (x), (y))
#define AOT_F32X4_SELECT_GT(a, b, x, y) vbslq_f32(AOT_F32X4_CGT((a), (b)), (x), (y))
#define AOT_F32X4_SELECT_GE(a, b, x, y) vbslq_f32(AOT_F32X4_CGE((a), (b)), (x), (y))
/* Four lanes as scalars: armv7 has no IEEE vector floats to gain from. */
#define AOT_F32X4_REDUCE_ADD(v) (__extension__ ({ aot_f32x4 aot_r_ = (v); \
    (vgetq_lane_f32(aot_r_, 0) + vgetq_lane_f32(aot_r_, 2)) + (vgetq_lane_f32(aot_r_, 1) + vgetq_lane_f32(aot_r_, 3)); }))
#define AOT_F32X4_REDUCE_MAX(v) (__extension__ ({ aot_f32x4 aot_r_ = (v); \
    aot_max_float32(aot_max_float32(vgetq_lane_f32(aot_r_, 0), vgetq_lane_f32(aot_r_, 2)), aot_max_float32(vgetq_lane_f32(aot_r_, 1), vgetq_lane_f32(aot_r_, 3))); }))
#elif defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef float aot_f32x4 __attribute__((vector_size(16)));
typedef float aot_f32x4_unaligned __attribute__((vector_size(16), aligned(4), may_alias));
#define AOT_F32X4_LOAD(p) (*(const aot_f32x4_unaligned *)(const void *)(p))
#define AOT_F32X4_WIDEN(p) ((aot_f32x4){ (float)(p)[0], (float)(p)[1], (float)(p)[2], (float)(p)[3] })
#define AOT_F32X4_STORE(p, v) (*(aot_f32x4_unaligned *)(void *)(p) = (v))
#define AOT_F32X4_SPLAT(x) ((aot_f32x4){ (x), (x), (x), (x) })
/* aarch64 gcc and clang fold a lane copied over into the by-element fmla */
#define AOT_F32X4_LANE(v, i) ((aot_f32x4){ (v)[i], (v)[i], (v)[i], (v)[i] })
#define AOT_F32X4_MULADD(acc, a, b) ((acc) + (a) * (b))
typedef int32_t aot_f32x4_mask __attribute__((vector_size(16)));
#define AOT_F32X4_PICK(m, a, b) ((aot_f32x4)(((aot_f32x4_mask)(a) & (m)) | ((aot_f32x4_mask)(b) & ~(m))))
#define AOT_F32X4_MAX(a, b) AOT_F32X4_PICK(((a) > (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X4_MIN(a, b) AOT_F32X4_PICK(((a) < (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X4_ZIP_LO(a, b) ((aot_f32x4){ (a)[0], (b)[0], (a)[1], (b)[1] })
#define AOT_F32X4_ZIP_HI(a, b) ((aot_f32x4){ (a)[2], (b)[2], (a)[3], (b)[3] })
#define AOT_F32X4_ADD(a, b) ((a) + (b))
#define AOT_F32X4_SUB(a, b) ((a) - (b))
#define AOT_F32X4_MUL(a, b) ((a) * (b))
#define AOT_F32X4_DIV(a, b) ((a) / (b))
#define AOT_F32X4_SELECT_LT(a, b, x, y) AOT_F32X4_PICK((a) < (b), (x), (y))
#define AOT_F32X4_SELECT_LE(a, b, x, y) AOT_F32X4_PICK((a) <= (b), (x), (y))
#define AOT_F32X4_SELECT_GT(a, b, x, y) AOT_F32X4_PICK((a) > (b), (x), (y))
#define AOT_F32X4_SELECT_GE(a, b, x, y) AOT_F32X4_PICK((a) >= (b), (x), (y))
#define AOT_F32X4_REDUCE_ADD(v) (__extension__ ({ aot_f32x4 aot_r_ = (v); \
    aot_r_ = aot_r_ + (aot_f32x4){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; \
    aot_r_ = aot_r_ + (aot_f32x4){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; \
    aot_r_[0]; }))
#define AOT_F32X4_REDUCE_MAX(v) (__extension__ ({ aot_f32x4 aot_r_ = (v), aot_h_; \
    aot_h_ = (aot_f32x4){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; aot_r_ = AOT_F32X4_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x4){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; aot_r_ = AOT_F32X4_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_r_[0]; }))
#else
typedef struct { float lane[4]; } aot_f32x4;
static inline aot_f32x4 aot_f32x4_load(const float *p)
{ aot_f32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_f32x4_store(float *p, aot_f32x4 v)
{ int i; for (i = 0; i < 4; ++i) p[i] = v.lane[i]; }
static inline aot_f32x4 aot_f32x4_widen_i8(const int8_t *p)
{ aot_f32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x4 aot_f32x4_widen_i16(const int16_t *p)
{ aot_f32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x4 aot_f32x4_splat(float x)
{ aot_f32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = x; return v; }
static inline aot_f32x4 aot_f32x4_muladd(aot_f32x4 acc, aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) acc.lane[i] += a.lane[i] * b.lane[i]; return acc; }
#define AOT_F32X4_LOAD(p) aot_f32x4_load(p)
#define AOT_F32X4_WIDEN(p) (sizeof(*(p)) == 1 ? aot_f32x4_widen_i8((const int8_t *)(const void *)(p)) \
                                       : aot_f32x4_widen_i16((const int16_t *)(const void *)(p)))
#define AOT_F32X4_STORE(p, v) aot_f32x4_store((p), (v))
#define AOT_F32X4_SPLAT(x) aot_f32x4_splat(x)
#define AOT_F32X4_LANE(v, i) aot_f32x4_splat((v).lane[i])
#define AOT_F32X4_MULADD(acc, a, b) aot_f32x4_muladd((acc), (a), (b))
static inline aot_f32x4 aot_f32x4_max(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] > b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X4_MAX(a, b) aot_f32x4_max((a), (b))
static inline aot_f32x4 aot_f32x4_min(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] < b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X4_MIN(a, b) aot_f32x4_min((a), (b))
static inline aot_f32x4 aot_f32x4_add(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = a.lane[i] + b.lane[i]; return a; }
#define AOT_F32X4_ADD(a, b) aot_f32x4_add((a), (b))
static inline aot_f32x4 aot_f32x4_zip(aot_f32x4 a, aot_f32x4 b, int first)
{ aot_f32x4 v; int i; for (i = 0; i < 2; ++i) { v.lane[2 * i] = a.lane[first + i]; v.lane[2 * i + 1] = b.lane[first + i]; }
  return v; }
#define AOT_F32X4_ZIP_LO(a, b) aot_f32x4_zip((a), (b), 0)
#define AOT_F32X4_ZIP_HI(a, b) aot_f32x4_zip((a), (b), 2)
static inline aot_f32x4 aot_f32x4_sub(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = a.lane[i] - b.lane[i]; return a; }
#define AOT_F32X4_SUB(a, b) aot_f32x4_sub((a), (b))
static inline aot_f32x4 aot_f32x4_mul(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = a.lane[i] * b.lane[i]; return a; }
#define AOT_F32X4_MUL(a, b) aot_f32x4_mul((a), (b))
static inline aot_f32x4 aot_f32x4_div(aot_f32x4 a, aot_f32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = a.lane[i] / b.lane[i]; return a; }
#define AOT_F32X4_DIV(a, b) aot_f32x4_div((a), (b))
static inline aot_f32x4 aot_f32x4_select_lt(aot_f32x4 a, aot_f32x4 b, aot_f32x4 x, aot_f32x4 y)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] < b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X4_SELECT_LT(a, b, x, y) aot_f32x4_select_lt((a), (b), (x), (y))
static inline aot_f32x4 aot_f32x4_select_le(aot_f32x4 a, aot_f32x4 b, aot_f32x4 x, aot_f32x4 y)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] <= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X4_SELECT_LE(a, b, x, y) aot_f32x4_select_le((a), (b), (x), (y))
static inline aot_f32x4 aot_f32x4_select_gt(aot_f32x4 a, aot_f32x4 b, aot_f32x4 x, aot_f32x4 y)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] > b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X4_SELECT_GT(a, b, x, y) aot_f32x4_select_gt((a), (b), (x), (y))
static inline aot_f32x4 aot_f32x4_select_ge(aot_f32x4 a, aot_f32x4 b, aot_f32x4 x, aot_f32x4 y)
{ int i; for (i = 0; i < 4; ++i) if (!(a.lane[i] >= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X4_SELECT_GE(a, b, x, y) aot_f32x4_select_ge((a), (b), (x), (y))
static inline float aot_f32x4_reduce_add(aot_f32x4 v)
{ int w, i; for (w = 4 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = v.lane[i] + v.lane[i + w];
  return v.lane[0]; }
#define AOT_F32X4_REDUCE_ADD(v) aot_f32x4_reduce_add(v)
static inline float aot_f32x4_reduce_max(aot_f32x4 v)
{ int w, i; for (w = 4 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = aot_max_float32(v.lane[i], v.lane[i + w]);
  return v.lane[0]; }
#define AOT_F32X4_REDUCE_MAX(v) aot_f32x4_reduce_max(v)
#endif
#ifndef AOT_F32X4_SPLAT_LOAD
#define AOT_F32X4_SPLAT_LOAD(p) AOT_F32X4_SPLAT(*(p))
#endif
#ifndef AOT_F32X4_MULADD_LANE
#define AOT_F32X4_MULADD_LANE(acc, b, v, i) AOT_F32X4_MULADD((acc), AOT_F32X4_LANE((v), i), (b))
#endif
#ifndef AOT_F32X4_LOAD_STEP
#define AOT_F32X4_LOAD_STEP(p) ((p) += 4, AOT_F32X4_LOAD((p) - 4))
#endif
#ifndef AOT_F32X4_LOAD2_STEP
#define AOT_F32X4_LOAD2_STEP(p, a, b) ((a) = AOT_F32X4_LOAD_STEP(p), (b) = AOT_F32X4_LOAD_STEP(p))
#endif
#endif /* AOT_WANT_F32X4 */

#ifdef AOT_WANT_F32X8
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef float aot_f32x8 __attribute__((vector_size(32)));
typedef float aot_f32x8_unaligned __attribute__((vector_size(32), aligned(4), may_alias));
#define AOT_F32X8_LOAD(p) (*(const aot_f32x8_unaligned *)(const void *)(p))
#define AOT_F32X8_WIDEN(p) ((aot_f32x8){ \
    (float)(p)[0], (float)(p)[1], (float)(p)[2], (float)(p)[3], (float)(p)[4], (float)(p)[5], (float)(p)[6], (float)(p)[7] })
#define AOT_F32X8_STORE(p, v) (*(aot_f32x8_unaligned *)(void *)(p) = (v))
#define AOT_F32X8_SPLAT(x) ((aot_f32x8){ (x), (x), (x), (x), (x), (x), (x), (x) })
#define AOT_F32X8_MULADD(acc, a, b) ((acc) + (a) * (b))
typedef int32_t aot_f32x8_mask __attribute__((vector_size(32)));
#define AOT_F32X8_PICK(m, a, b) ((aot_f32x8)(((aot_f32x8_mask)(a) & (m)) | ((aot_f32x8_mask)(b) & ~(m))))
#define AOT_F32X8_MAX(a, b) AOT_F32X8_PICK(((a) > (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X8_MIN(a, b) AOT_F32X8_PICK(((a) < (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X8_ADD(a, b) ((a) + (b))
#define AOT_F32X8_SUB(a, b) ((a) - (b))
#define AOT_F32X8_MUL(a, b) ((a) * (b))
#define AOT_F32X8_DIV(a, b) ((a) / (b))
#define AOT_F32X8_SELECT_LT(a, b, x, y) AOT_F32X8_PICK((a) < (b), (x), (y))
#define AOT_F32X8_SELECT_LE(a, b, x, y) AOT_F32X8_PICK((a) <= (b), (x), (y))
#define AOT_F32X8_SELECT_GT(a, b, x, y) AOT_F32X8_PICK((a) > (b), (x), (y))
#define AOT_F32X8_SELECT_GE(a, b, x, y) AOT_F32X8_PICK((a) >= (b), (x), (y))
#define AOT_F32X8_REDUCE_ADD(v) (__extension__ ({ aot_f32x8 aot_r_ = (v); \
    aot_r_ = aot_r_ + (aot_f32x8){ aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7] }; \
    aot_r_ = aot_r_ + (aot_f32x8){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; \
    aot_r_ = aot_r_ + (aot_f32x8){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; \
    aot_r_[0]; }))
#define AOT_F32X8_REDUCE_MAX(v) (__extension__ ({ aot_f32x8 aot_r_ = (v), aot_h_; \
    aot_h_ = (aot_f32x8){ aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7] }; aot_r_ = AOT_F32X8_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x8){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; aot_r_ = AOT_F32X8_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x8){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; aot_r_ = AOT_F32X8_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_r_[0]; }))
#else
typedef struct { float lane[8]; } aot_f32x8;
static inline aot_f32x8 aot_f32x8_load(const float *p)
{ aot_f32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_f32x8_store(float *p, aot_f32x8 v)
{ int i; for (i = 0; i < 8; ++i) p[i] = v.lane[i]; }
static inline aot_f32x8 aot_f32x8_widen_i8(const int8_t *p)
{ aot_f32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x8 aot_f32x8_widen_i16(const int16_t *p)
{ aot_f32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x8 aot_f32x8_splat(float x)
{ aot_f32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = x; return v; }
static inline aot_f32x8 aot_f32x8_muladd(aot_f32x8 acc, aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) acc.lane[i] += a.lane[i] * b.lane[i]; return acc; }
#define AOT_F32X8_LOAD(p) aot_f32x8_load(p)
#define AOT_F32X8_WIDEN(p) (sizeof(*(p)) == 1 ? aot_f32x8_widen_i8((const int8_t *)(const void *)(p)) \
                                       : aot_f32x8_widen_i16((const int16_t *)(const void *)(p)))
#define AOT_F32X8_STORE(p, v) aot_f32x8_store((p), (v))
#define AOT_F32X8_SPLAT(x) aot_f32x8_splat(x)
#define AOT_F32X8_MULADD(acc, a, b) aot_f32x8_muladd((acc), (a), (b))
static inline aot_f32x8 aot_f32x8_max(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] > b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X8_MAX(a, b) aot_f32x8_max((a), (b))
static inline aot_f32x8 aot_f32x8_min(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] < b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X8_MIN(a, b) aot_f32x8_min((a), (b))
static inline aot_f32x8 aot_f32x8_add(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = a.lane[i] + b.lane[i]; return a; }
#define AOT_F32X8_ADD(a, b) aot_f32x8_add((a), (b))
static inline aot_f32x8 aot_f32x8_sub(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = a.lane[i] - b.lane[i]; return a; }
#define AOT_F32X8_SUB(a, b) aot_f32x8_sub((a), (b))
static inline aot_f32x8 aot_f32x8_mul(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = a.lane[i] * b.lane[i]; return a; }
#define AOT_F32X8_MUL(a, b) aot_f32x8_mul((a), (b))
static inline aot_f32x8 aot_f32x8_div(aot_f32x8 a, aot_f32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = a.lane[i] / b.lane[i]; return a; }
#define AOT_F32X8_DIV(a, b) aot_f32x8_div((a), (b))
static inline aot_f32x8 aot_f32x8_select_lt(aot_f32x8 a, aot_f32x8 b, aot_f32x8 x, aot_f32x8 y)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] < b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X8_SELECT_LT(a, b, x, y) aot_f32x8_select_lt((a), (b), (x), (y))
static inline aot_f32x8 aot_f32x8_select_le(aot_f32x8 a, aot_f32x8 b, aot_f32x8 x, aot_f32x8 y)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] <= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X8_SELECT_LE(a, b, x, y) aot_f32x8_select_le((a), (b), (x), (y))
static inline aot_f32x8 aot_f32x8_select_gt(aot_f32x8 a, aot_f32x8 b, aot_f32x8 x, aot_f32x8 y)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] > b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X8_SELECT_GT(a, b, x, y) aot_f32x8_select_gt((a), (b), (x), (y))
static inline aot_f32x8 aot_f32x8_select_ge(aot_f32x8 a, aot_f32x8 b, aot_f32x8 x, aot_f32x8 y)
{ int i; for (i = 0; i < 8; ++i) if (!(a.lane[i] >= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X8_SELECT_GE(a, b, x, y) aot_f32x8_select_ge((a), (b), (x), (y))
static inline float aot_f32x8_reduce_add(aot_f32x8 v)
{ int w, i; for (w = 8 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = v.lane[i] + v.lane[i + w];
  return v.lane[0]; }
#define AOT_F32X8_REDUCE_ADD(v) aot_f32x8_reduce_add(v)
static inline float aot_f32x8_reduce_max(aot_f32x8 v)
{ int w, i; for (w = 8 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = aot_max_float32(v.lane[i], v.lane[i + w]);
  return v.lane[0]; }
#define AOT_F32X8_REDUCE_MAX(v) aot_f32x8_reduce_max(v)
#endif
#ifndef AOT_F32X8_SPLAT_LOAD
#define AOT_F32X8_SPLAT_LOAD(p) AOT_F32X8_SPLAT(*(p))
#endif
#endif /* AOT_WANT_F32X8 */

#ifdef AOT_WANT_F32X16
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef float aot_f32x16 __attribute__((vector_size(64)));
typedef float aot_f32x16_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
#define AOT_F32X16_LOAD(p) (*(const aot_f32x16_unaligned *)(const void *)(p))
#define AOT_F32X16_WIDEN(p) ((aot_f32x16){ \
    (float)(p)[0], (float)(p)[1], (float)(p)[2], (float)(p)[3], (float)(p)[4], (float)(p)[5], (float)(p)[6], (float)(p)[7], \
    (float)(p)[8], (float)(p)[9], (float)(p)[10], (float)(p)[11], (float)(p)[12], (float)(p)[13], (float)(p)[14], (float)(p)[15] })
#define AOT_F32X16_STORE(p, v) (*(aot_f32x16_unaligned *)(void *)(p) = (v))
#define AOT_F32X16_SPLAT(x) ((aot_f32x16){ (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x) })
#define AOT_F32X16_MULADD(acc, a, b) ((acc) + (a) * (b))
typedef int32_t aot_f32x16_mask __attribute__((vector_size(64)));
#define AOT_F32X16_PICK(m, a, b) ((aot_f32x16)(((aot_f32x16_mask)(a) & (m)) | ((aot_f32x16_mask)(b) & ~(m))))
#define AOT_F32X16_MAX(a, b) AOT_F32X16_PICK(((a) > (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X16_MIN(a, b) AOT_F32X16_PICK(((a) < (b)) | ((a) != (a)), (a), (b))
#define AOT_F32X16_ADD(a, b) ((a) + (b))
#define AOT_F32X16_SUB(a, b) ((a) - (b))
#define AOT_F32X16_MUL(a, b) ((a) * (b))
#define AOT_F32X16_DIV(a, b) ((a) / (b))
#define AOT_F32X16_SELECT_LT(a, b, x, y) AOT_F32X16_PICK((a) < (b), (x), (y))
#define AOT_F32X16_SELECT_LE(a, b, x, y) AOT_F32X16_PICK((a) <= (b), (x), (y))
#define AOT_F32X16_SELECT_GT(a, b, x, y) AOT_F32X16_PICK((a) > (b), (x), (y))
#define AOT_F32X16_SELECT_GE(a, b, x, y) AOT_F32X16_PICK((a) >= (b), (x), (y))
#define AOT_F32X16_REDUCE_ADD(v) (__extension__ ({ aot_f32x16 aot_r_ = (v); \
    aot_r_ = aot_r_ + (aot_f32x16){ aot_r_[8], aot_r_[9], aot_r_[10], aot_r_[11], aot_r_[12], aot_r_[13], aot_r_[14], aot_r_[15], aot_r_[8], aot_r_[9], aot_r_[10], aot_r_[11], aot_r_[12], aot_r_[13], aot_r_[14], aot_r_[15] }; \
    aot_r_ = aot_r_ + (aot_f32x16){ aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7] }; \
    aot_r_ = aot_r_ + (aot_f32x16){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; \
    aot_r_ = aot_r_ + (aot_f32x16){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; \
    aot_r_[0]; }))
#define AOT_F32X16_REDUCE_MAX(v) (__extension__ ({ aot_f32x16 aot_r_ = (v), aot_h_; \
    aot_h_ = (aot_f32x16){ aot_r_[8], aot_r_[9], aot_r_[10], aot_r_[11], aot_r_[12], aot_r_[13], aot_r_[14], aot_r_[15], aot_r_[8], aot_r_[9], aot_r_[10], aot_r_[11], aot_r_[12], aot_r_[13], aot_r_[14], aot_r_[15] }; aot_r_ = AOT_F32X16_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x16){ aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7], aot_r_[4], aot_r_[5], aot_r_[6], aot_r_[7] }; aot_r_ = AOT_F32X16_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x16){ aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3], aot_r_[2], aot_r_[3] }; aot_r_ = AOT_F32X16_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_h_ = (aot_f32x16){ aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1], aot_r_[1] }; aot_r_ = AOT_F32X16_PICK((aot_r_ > aot_h_) | (aot_r_ != aot_r_), aot_r_, aot_h_); \
    aot_r_[0]; }))
#else
typedef struct { float lane[16]; } aot_f32x16;
static inline aot_f32x16 aot_f32x16_load(const float *p)
{ aot_f32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_f32x16_store(float *p, aot_f32x16 v)
{ int i; for (i = 0; i < 16; ++i) p[i] = v.lane[i]; }
static inline aot_f32x16 aot_f32x16_widen_i8(const int8_t *p)
{ aot_f32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x16 aot_f32x16_widen_i16(const int16_t *p)
{ aot_f32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = (float)p[i]; return v; }
static inline aot_f32x16 aot_f32x16_splat(float x)
{ aot_f32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = x; return v; }
static inline aot_f32x16 aot_f32x16_muladd(aot_f32x16 acc, aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) acc.lane[i] += a.lane[i] * b.lane[i]; return acc; }
#define AOT_F32X16_LOAD(p) aot_f32x16_load(p)
#define AOT_F32X16_WIDEN(p) (sizeof(*(p)) == 1 ? aot_f32x16_widen_i8((const int8_t *)(const void *)(p)) \
                                       : aot_f32x16_widen_i16((const int16_t *)(const void *)(p)))
#define AOT_F32X16_STORE(p, v) aot_f32x16_store((p), (v))
#define AOT_F32X16_SPLAT(x) aot_f32x16_splat(x)
#define AOT_F32X16_MULADD(acc, a, b) aot_f32x16_muladd((acc), (a), (b))
static inline aot_f32x16 aot_f32x16_max(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] > b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X16_MAX(a, b) aot_f32x16_max((a), (b))
static inline aot_f32x16 aot_f32x16_min(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] < b.lane[i] || a.lane[i] != a.lane[i])) a.lane[i] = b.lane[i];
  return a; }
#define AOT_F32X16_MIN(a, b) aot_f32x16_min((a), (b))
static inline aot_f32x16 aot_f32x16_add(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = a.lane[i] + b.lane[i]; return a; }
#define AOT_F32X16_ADD(a, b) aot_f32x16_add((a), (b))
static inline aot_f32x16 aot_f32x16_sub(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = a.lane[i] - b.lane[i]; return a; }
#define AOT_F32X16_SUB(a, b) aot_f32x16_sub((a), (b))
static inline aot_f32x16 aot_f32x16_mul(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = a.lane[i] * b.lane[i]; return a; }
#define AOT_F32X16_MUL(a, b) aot_f32x16_mul((a), (b))
static inline aot_f32x16 aot_f32x16_div(aot_f32x16 a, aot_f32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = a.lane[i] / b.lane[i]; return a; }
#define AOT_F32X16_DIV(a, b) aot_f32x16_div((a), (b))
static inline aot_f32x16 aot_f32x16_select_lt(aot_f32x16 a, aot_f32x16 b, aot_f32x16 x, aot_f32x16 y)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] < b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X16_SELECT_LT(a, b, x, y) aot_f32x16_select_lt((a), (b), (x), (y))
static inline aot_f32x16 aot_f32x16_select_le(aot_f32x16 a, aot_f32x16 b, aot_f32x16 x, aot_f32x16 y)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] <= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X16_SELECT_LE(a, b, x, y) aot_f32x16_select_le((a), (b), (x), (y))
static inline aot_f32x16 aot_f32x16_select_gt(aot_f32x16 a, aot_f32x16 b, aot_f32x16 x, aot_f32x16 y)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] > b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X16_SELECT_GT(a, b, x, y) aot_f32x16_select_gt((a), (b), (x), (y))
static inline aot_f32x16 aot_f32x16_select_ge(aot_f32x16 a, aot_f32x16 b, aot_f32x16 x, aot_f32x16 y)
{ int i; for (i = 0; i < 16; ++i) if (!(a.lane[i] >= b.lane[i])) x.lane[i] = y.lane[i];
  return x; }
#define AOT_F32X16_SELECT_GE(a, b, x, y) aot_f32x16_select_ge((a), (b), (x), (y))
static inline float aot_f32x16_reduce_add(aot_f32x16 v)
{ int w, i; for (w = 16 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = v.lane[i] + v.lane[i + w];
  return v.lane[0]; }
#define AOT_F32X16_REDUCE_ADD(v) aot_f32x16_reduce_add(v)
static inline float aot_f32x16_reduce_max(aot_f32x16 v)
{ int w, i; for (w = 16 / 2; w > 0; w /= 2) for (i = 0; i < w; ++i) v.lane[i] = aot_max_float32(v.lane[i], v.lane[i + w]);
  return v.lane[0]; }
#define AOT_F32X16_REDUCE_MAX(v) aot_f32x16_reduce_max(v)
#endif
#ifndef AOT_F32X16_SPLAT_LOAD
#define AOT_F32X16_SPLAT_LOAD(p) AOT_F32X16_SPLAT(*(p))
#endif
#endif /* AOT_WANT_F32X16 */

/*
 * int32 vectors of 4, 8 or 16 lanes for the int8 tiles (aot/ops/quantized/integer_tiles.py):
 * aot_i32x<lanes> and the macros
 *   AOT_I32X<lanes>_QUADS(p)          4 * lanes bytes at p (uint8_t), four to a lane;
 *   AOT_I32X<lanes>_SPLAT_QUAD(p)     the four bytes at p (int8_t) in every lane;
 *   AOT_I32X<lanes>_SPLAT(x), _STORE(p, v);
 *   AOT_I32X<lanes>_DOTADD(acc, a, b) acc + per lane the sum of the four products of a's bytes
 *                                     (unsigned) and b's (signed), exact, wrapping like the
 *                                     integer ops' int32 accumulation;
 *   AOT_I32X4_SDOTADD(acc, a, b)      (4 lanes) the same with a's bytes signed too: Arm's sdot;
 *   AOT_I32X8_SDOTADD(acc, a, b)      (8 lanes) a's bytes signed too, b's never -128 (the AVX2
 *                                     targets' tiles over weights in -127..127): vpabsb of a,
 *                                     vpsignb of b by a, vpmaddubsw (two products summed in 16
 *                                     bits: at most 2 * 128 * 127, no saturation), vpmaddwd by
 *                                     ones; 4 instructions per 32 products where DOTADD's exact
 *                                     sequence takes 7;
 *   AOT_I32X4_PAIRS(p), AOT_I32X4_SPLAT_PAIRS(p), AOT_I32X4_PAIR_DOTADD(acc, a, b) (4 lanes: the
 *                                     NEON targets' tiles; kernel IR PairLoad, PairSplat,
 *                                     PairDotAdd): the same dot product of signed bytes (int8_t
 *                                     at p), b's never -128, with the operands in pair order;
 *   AOT_I16X16_PAIRS(p), AOT_I16X16_SPLAT_PAIRS(p), AOT_I32X4_PAIR_DOTADD_LOW / _HIGH(acc, a, b)
 *                                     (kernel IR PairHalvesLoad, PairHalvesSplat): eight quads'
 *                                     halves, of which LOW multiplies quads 0-3, HIGH 4-7;
 *                                     AOT_I16X32_SPLAT_PAIRS(p), AOT_I16X32_PART(v, part): two
 *                                     splat quads (PairHalvesSplat of 8 bytes) and either one.
 * DOTADD is vpdpbusd where the compiler's flags have AVX-512 VNNI (with AVX-512 VL for 8 lanes)
 * or AVX-VNNI; with AVX2 (AVX-512 BW for 16 lanes) the exact sequence: each byte widened to 16
 * bits (zero- or sign-extended), vpmaddwd of the even and of the odd bytes, two adds. (vpmaddubsw
 * would sum two products in 16 bits, which saturates: 255 * -128 * 2.) On aarch64 NEON (4 lanes;
 * sdot, of the dot-product extension, multiplies signed by signed bytes only) the same idea in
 * 16-bit lanes: a's even bytes (masked) and odd bytes (shifted down), b's sign-extended by
 * shifts, multiplied in 16 bits (exact: |255 * -128| = 32640), each product vector added
 * pairwise into the int32 lanes (sadalp): 4 instructions per pair of vector and weight quad,
 * where widening the bytes (uxtl, sxtl) then summing by saddlp and addp takes 6 (benchmark: int8
 * ResNet-8 on rpi4).
 * Otherwise GNU C vectors, or a struct and loops for other C99 compilers.
 */
#if defined(AOT_WANT_I32X4) && defined(__GNUC__) && defined(__ARM_NEON) && !defined(AOT_NO_VECTOR_EXTENSIONS)
#include <arm_neon.h>
#endif
#if (defined(AOT_WANT_I32X8) || defined(AOT_WANT_I32X16)) && defined(__GNUC__) && defined(__x86_64__) \
    && !defined(AOT_NO_VECTOR_EXTENSIONS) && defined(__AVX2__)
#include <immintrin.h>
#endif

#ifdef AOT_WANT_I32X4
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int32_t aot_i32x4 __attribute__((vector_size(16)));
typedef uint32_t aot_u32x4 __attribute__((vector_size(16)));
typedef int32_t aot_i32x4_unaligned __attribute__((vector_size(16), aligned(1), may_alias));
#ifndef AOT_I32_QUAD_DEFINED
#define AOT_I32_QUAD_DEFINED
typedef int32_t aot_i32_quad __attribute__((aligned(1), may_alias));
#endif
#define AOT_I32X4_QUADS(p) (*(const aot_i32x4_unaligned *)(const void *)(p))
#define AOT_I32X4_STORE(p, v) (*(aot_i32x4_unaligned *)(void *)(p) = (v))
#define AOT_I32X4_LOAD(p) (*(const aot_i32x4_unaligned *)(const void *)(p))
#define AOT_I32X4_SPLAT(x) ((aot_i32x4){ (x), (x), (x), (x) })
#define AOT_I32X4_SPLAT_QUAD(p) (((aot_i32x4){ 0 }) + *(const aot_i32_quad *)(const void *)(p))
#if defined(__ARM_NEON)
static inline aot_i32x4 aot_i32x4_dotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{
    uint16x8_t ua = vreinterpretq_u16_s32((int32x4_t)a);
    int16x8_t sb = vreinterpretq_s16_s32((int32x4_t)b);
    int16x8_t even = vmulq_s16(vreinterpretq_s16_u16(vandq_u16(ua, vdupq_n_u16(0xff))), vshrq_n_s16(vshlq_n_s16(sb, 8), 8));
    int16x8_t odd = vmulq_s16(vreinterpretq_s16_u16(vshrq_n_u16(ua, 8)), vshrq_n_s16(sb, 8));
    return (aot_i32x4)vpadalq_s16(vpadalq_s16((int32x4_t)acc, even), odd);
}
#define AOT_I32X4_DOTADD(acc, a, b) aot_i32x4_dotadd((acc), (a), (b))
#if defined(__ARM_FEATURE_DOTPROD)
/* sdot (the dot-product extension: rpi5's Cortex-A76): 16 signed multiply-adds in one. */
#define AOT_I32X4_SDOTADD(acc, a, b) ((aot_i32x4)vdotq_s32((int32x4_t)(acc), vreinterpretq_s8_s32((int32x4_t)(a)), \
                                                          vreinterpretq_s8_s32((int32x4_t)(b))))
#if defined(__aarch64__)
/* By a lane of b (four channels' weight quads in one load): sdot v.4s, v.16b, v.4b[i]. */
#define AOT_I32X4_SDOTADD_LANE(acc, a, b, i) ((aot_i32x4)vdotq_laneq_s32((int32x4_t)(acc), \
    vreinterpretq_s8_s32((int32x4_t)(a)), vreinterpretq_s8_s32((int32x4_t)(b)), (i)))
#endif
#else
/* Compiled without the extension: the signed bytes' 16-bit products added pairwise twice. */
static inline aot_i32x4 aot_i32x4_sdotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{
    int8x16_t sa = vreinterpretq_s8_s32((int32x4_t)a), sb = vreinterpretq_s8_s32((int32x4_t)b);
    int32x4_t low = vpaddlq_s16(vmull_s8(vget_low_s8(sa), vget_low_s8(sb)));
    int32x4_t high = vpaddlq_s16(vmull_s8(vget_high_s8(sa), vget_high_s8(sb)));
    int32x2_t quads_low = vpadd_s32(vget_low_s32(low), vget_high_s32(low));
    int32x2_t quads_high = vpadd_s32(vget_low_s32(high), vget_high_s32(high));
    return (aot_i32x4)vaddq_s32((int32x4_t)acc, vcombine_s32(quads_low, quads_high));
}
#define AOT_I32X4_SDOTADD(acc, a, b) aot_i32x4_sdotadd((acc), (a), (b))
#endif
#if defined(__aarch64__)
/* aarch64: pair order by one tbl of the loaded quads (ld1, or ld1r for a weight quad); the
 * product of the high halves is then smlal2's. (uzp1/uzp2 of quad-order operands into d
 * registers had gcc spilling and repeating dups, and ld2 then combining its two registers was
 * slower still; benchmark: int8 ResNet-8.) */
static inline aot_i32x4 aot_i32x4_pair_order(int8x16_t v)
{
    const uint8x16_t order = { 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15 };
    return (aot_i32x4)vqtbl1q_s8(v, order);
}
static inline aot_i32x4 aot_i32x4_pair_dotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{
    int8x16_t sa = vreinterpretq_s8_s32((int32x4_t)a), sb = vreinterpretq_s8_s32((int32x4_t)b);
    return (aot_i32x4)vpadalq_s16((int32x4_t)acc, vmlal_high_s8(vmull_s8(vget_low_s8(sa), vget_low_s8(sb)), sa, sb));
}
#define AOT_I32X4_PAIRS(p) aot_i32x4_pair_order(vld1q_s8((const int8_t *)(const void *)(p)))
#define AOT_I32X4_SPLAT_PAIRS(p) aot_i32x4_pair_order(vreinterpretq_s8_s32(vld1q_dup_s32( \
    (const int32_t *)(const void *)(p))))
#define AOT_I32X4_PAIR_DOTADD(acc, a, b) aot_i32x4_pair_dotadd((acc), (a), (b))
#else
/* armv7: pair order. vld2.16 de-interleaves the quads' 16-bit halves into the two d registers of
 * a q register (the first halves of 4 pixels in the low one, the second halves in the high one);
 * vld2.16 with duplication does the same for one weight quad. */
static inline aot_i32x4 aot_i32x4_pairs(const int8_t *p)
{ int16x4x2_t v = vld2_s16((const int16_t *)(const void *)p); return (aot_i32x4)vcombine_s16(v.val[0], v.val[1]); }
static inline aot_i32x4 aot_i32x4_splat_pairs(const int8_t *p)
{ int16x4x2_t v = vld2_dup_s16((const int16_t *)(const void *)p); return (aot_i32x4)vcombine_s16(v.val[0], v.val[1]); }
static inline aot_i32x4 aot_i32x4_pair_dotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{
    int8x16_t sa = vreinterpretq_s8_s32((int32x4_t)a), sb = vreinterpretq_s8_s32((int32x4_t)b);
    int16x8_t sums = vmlal_s8(vmull_s8(vget_low_s8(sa), vget_low_s8(sb)), vget_high_s8(sa), vget_high_s8(sb));
    return (aot_i32x4)vpadalq_s16((int32x4_t)acc, sums);
}
#define AOT_I32X4_PAIRS(p) aot_i32x4_pairs(p)
#define AOT_I32X4_SPLAT_PAIRS(p) aot_i32x4_splat_pairs(p)
#define AOT_I32X4_PAIR_DOTADD(acc, a, b) aot_i32x4_pair_dotadd((acc), (a), (b))
#endif
/* Eight quads in one ld2 .8h / vld2.16 of four d registers (the first 16-bit halves in val[0], the
 * second in val[1]): quads 0-3 multiply by smull and smlal of the low halves, quads 4-7 by those of
 * the high halves (aarch64's smull2 and smlal2; armv7's high d registers), with no tbl (fewer instructions
 * per step of aarch64's 4 x 4 tile) and half the loads (armv7). One weight quad in one ld2r .8h
 * (armv7: vld2.16 to all lanes of two d registers, each then both halves of a q register), two in
 * one ld4r .8h (vld4.16): the registers of each, as one quad's. */
#define AOT_I16X16_DEFINED
typedef int16x8x2_t aot_i16x16;
typedef int16x8x4_t aot_i16x32;
#define AOT_I16X16_PAIRS(p) vld2q_s16((const int16_t *)(const void *)(p))
#if defined(__aarch64__)
#define AOT_I16X16_SPLAT_PAIRS(p) vld2q_dup_s16((const int16_t *)(const void *)(p))
#define AOT_I16X32_SPLAT_PAIRS(p) vld4q_dup_s16((const int16_t *)(const void *)(p))
#define AOT_I16X8_HIGH_PRODUCTS(a0, b0, a1, b1) vmlal_high_s8(vmull_high_s8((a0), (b0)), (a1), (b1))
#else
static inline aot_i16x16 aot_i16x16_splat_pairs(const int8_t *p)
{
    int16x4x2_t w = vld2_dup_s16((const int16_t *)(const void *)p);
    aot_i16x16 v;
    v.val[0] = vcombine_s16(w.val[0], w.val[0]);
    v.val[1] = vcombine_s16(w.val[1], w.val[1]);
    return v;
}
static inline aot_i16x32 aot_i16x32_splat_pairs(const int8_t *p)
{
    int16x4x4_t w = vld4_dup_s16((const int16_t *)(const void *)p);
    aot_i16x32 v;
    int i;
    for (i = 0; i < 4; ++i)
        v.val[i] = vcombine_s16(w.val[i], w.val[i]);
    return v;
}
#define AOT_I16X16_SPLAT_PAIRS(p) aot_i16x16_splat_pairs(p)
#define AOT_I16X32_SPLAT_PAIRS(p) aot_i16x32_splat_pairs(p)
#define AOT_I16X8_HIGH_PRODUCTS(a0, b0, a1, b1) \
    vmlal_s8(vmull_s8(vget_high_s8(a0), vget_high_s8(b0)), vget_high_s8(a1), vget_high_s8(b1))
#endif
static inline aot_i16x16 aot_i16x32_part(aot_i16x32 v, int part)
{ aot_i16x16 quad; quad.val[0] = v.val[2 * part]; quad.val[1] = v.val[2 * part + 1]; return quad; }
#define AOT_I16X32_PART(v, part) aot_i16x32_part((v), (part))
static inline aot_i32x4 aot_i32x4_pair_dotadd_low(aot_i32x4 acc, aot_i16x16 a, aot_i16x16 b)
{
    int16x8_t sums = vmlal_s8(vmull_s8(vget_low_s8(vreinterpretq_s8_s16(a.val[0])), vget_low_s8(vreinterpretq_s8_s16(b.val[0]))),
                              vget_low_s8(vreinterpretq_s8_s16(a.val[1])), vget_low_s8(vreinterpretq_s8_s16(b.val[1])));
    return (aot_i32x4)vpadalq_s16((int32x4_t)acc, sums);
}
static inline aot_i32x4 aot_i32x4_pair_dotadd_high(aot_i32x4 acc, aot_i16x16 a, aot_i16x16 b)
{
    int16x8_t sums = AOT_I16X8_HIGH_PRODUCTS(vreinterpretq_s8_s16(a.val[0]), vreinterpretq_s8_s16(b.val[0]),
                                             vreinterpretq_s8_s16(a.val[1]), vreinterpretq_s8_s16(b.val[1]));
    return (aot_i32x4)vpadalq_s16((int32x4_t)acc, sums);
}
#define AOT_I32X4_PAIR_DOTADD_LOW(acc, a, b) aot_i32x4_pair_dotadd_low((acc), (a), (b))
#define AOT_I32X4_PAIR_DOTADD_HIGH(acc, a, b) aot_i32x4_pair_dotadd_high((acc), (a), (b))
#else
/* Each byte of a lane by shifts: a's unsigned, b's signed (an arithmetic right shift, as gcc and
 * clang define it); the sum in unsigned arithmetic, which wraps. */
#define AOT_I32X4_BYTE(v, i) ((aot_i32x4)((aot_u32x4)(v) << (24 - 8 * (i))) >> 24)
#define AOT_I32X4_DOTADD(acc, a, b) ((aot_i32x4)((aot_u32x4)(acc) + (aot_u32x4)( \
    ((aot_i32x4)((aot_u32x4)(a) & 0xffu)) * AOT_I32X4_BYTE(b, 0) \
    + ((aot_i32x4)(((aot_u32x4)(a) >> 8) & 0xffu)) * AOT_I32X4_BYTE(b, 1) \
    + ((aot_i32x4)(((aot_u32x4)(a) >> 16) & 0xffu)) * AOT_I32X4_BYTE(b, 2) \
    + ((aot_i32x4)((aot_u32x4)(a) >> 24)) * AOT_I32X4_BYTE(b, 3))))
/* Without NEON the pair-order operands stay in quad order, which PAIR_DOTADD reads the same way
 * (the sums are the same): signed bytes of both. */
#define AOT_I32X4_PAIRS(p) AOT_I32X4_QUADS(p)
#define AOT_I32X4_SPLAT_PAIRS(p) AOT_I32X4_SPLAT_QUAD(p)
#define AOT_I32X4_SDOTADD(acc, a, b) ((aot_i32x4)((aot_u32x4)(acc) + (aot_u32x4)( \
    AOT_I32X4_BYTE(a, 0) * AOT_I32X4_BYTE(b, 0) + AOT_I32X4_BYTE(a, 1) * AOT_I32X4_BYTE(b, 1) \
    + AOT_I32X4_BYTE(a, 2) * AOT_I32X4_BYTE(b, 2) + AOT_I32X4_BYTE(a, 3) * AOT_I32X4_BYTE(b, 3))))
#define AOT_I32X4_PAIR_DOTADD(acc, a, b) AOT_I32X4_SDOTADD(acc, a, b)
#endif
#else
typedef struct { int32_t lane[4]; } aot_i32x4;
/* The int32 of two's complement bits u (a conversion of a value over INT32_MAX is
 * implementation-defined). */
static inline int32_t aot_i32x4_wrap(uint32_t u) { return u > 0x7fffffffu ? -(int32_t)(0xffffffffu - u) - 1 : (int32_t)u; }
static inline int32_t aot_i32x4_quad(const void *p)
{ const uint8_t *b = (const uint8_t *)p;
  return aot_i32x4_wrap((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24); }
static inline aot_i32x4 aot_i32x4_quads(const uint8_t *p)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = aot_i32x4_quad(p + 4 * i); return v; }
static inline aot_i32x4 aot_i32x4_splat(int32_t x)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = x; return v; }
static inline aot_i32x4 aot_i32x4_load(const int32_t *p)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_i32x4_store(int32_t *p, aot_i32x4 v)
{ int i; for (i = 0; i < 4; ++i) p[i] = v.lane[i]; }
static inline aot_i32x4 aot_i32x4_dotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{ int i; for (i = 0; i < 4; ++i) { uint32_t ua = (uint32_t)a.lane[i], ub = (uint32_t)b.lane[i], sum = 0; int j;
    for (j = 0; j < 4; ++j) { int32_t x = (int32_t)((ua >> (8 * j)) & 0xffu);
      int32_t w = (int32_t)((ub >> (8 * j)) & 0xffu); sum += (uint32_t)(x * (w > 127 ? w - 256 : w)); }
    acc.lane[i] = aot_i32x4_wrap((uint32_t)acc.lane[i] + sum); }
  return acc; }
#define AOT_I32X4_QUADS(p) aot_i32x4_quads((const uint8_t *)(const void *)(p))
#define AOT_I32X4_STORE(p, v) aot_i32x4_store((p), (v))
#define AOT_I32X4_LOAD(p) aot_i32x4_load(p)
#define AOT_I32X4_SPLAT(x) aot_i32x4_splat(x)
#define AOT_I32X4_SPLAT_QUAD(p) aot_i32x4_splat(aot_i32x4_quad(p))
#define AOT_I32X4_DOTADD(acc, a, b) aot_i32x4_dotadd((acc), (a), (b))
/* Pair order kept as quad order here too (see above). */
static inline int32_t aot_i32x4_signed_byte(uint32_t u, int j)
{ int32_t v = (int32_t)((u >> (8 * j)) & 0xffu); return v > 127 ? v - 256 : v; }
static inline aot_i32x4 aot_i32x4_pair_dotadd(aot_i32x4 acc, aot_i32x4 a, aot_i32x4 b)
{ int i; for (i = 0; i < 4; ++i) { uint32_t sum = 0; int j;
    for (j = 0; j < 4; ++j)
      sum += (uint32_t)(aot_i32x4_signed_byte((uint32_t)a.lane[i], j) * aot_i32x4_signed_byte((uint32_t)b.lane[i], j));
    acc.lane[i] = aot_i32x4_wrap((uint32_t)acc.lane[i] + sum); }
  return acc; }
#define AOT_I32X4_PAIRS(p) aot_i32x4_quads((const uint8_t *)(const void *)(p))
#define AOT_I32X4_SPLAT_PAIRS(p) aot_i32x4_splat(aot_i32x4_quad(p))
#define AOT_I32X4_PAIR_DOTADD(acc, a, b) aot_i32x4_pair_dotadd((acc), (a), (b))
#define AOT_I32X4_SDOTADD(acc, a, b) aot_i32x4_pair_dotadd((acc), (a), (b))
#endif
#ifndef AOT_I32X4_SDOTADD_LANE
/* AOT_I32X4_SDOTADD_LANE(acc, a, b, i): SDOTADD by lane i of b in every lane. */
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
#define AOT_I32X4_SDOTADD_LANE(acc, a, b, i) AOT_I32X4_SDOTADD((acc), (a), AOT_I32X4_SPLAT((b)[i]))
#else
#define AOT_I32X4_SDOTADD_LANE(acc, a, b, i) AOT_I32X4_SDOTADD((acc), (a), aot_i32x4_splat((b).lane[i]))
#endif
#endif
#ifndef AOT_I16X16_DEFINED
/* Eight quads' halves (kernel IR PairHalvesLoad, PairHalvesSplat) kept as two vectors of the
 * pair order above, quads 0-3 and 4-7: PAIR_DOTADD_LOW and _HIGH read the same sums from them. */
typedef struct { aot_i32x4 quads[2]; } aot_i16x16;
static inline aot_i16x16 aot_i16x16_pairs(const int8_t *p)
{ aot_i16x16 v; v.quads[0] = AOT_I32X4_PAIRS(p); v.quads[1] = AOT_I32X4_PAIRS(p + 16); return v; }
static inline aot_i16x16 aot_i16x16_splat_pairs(const int8_t *p)
{ aot_i16x16 v; v.quads[0] = AOT_I32X4_SPLAT_PAIRS(p); v.quads[1] = v.quads[0]; return v; }
#define AOT_I16X16_PAIRS(p) aot_i16x16_pairs(p)
#define AOT_I16X16_SPLAT_PAIRS(p) aot_i16x16_splat_pairs(p)
typedef struct { aot_i16x16 quad[2]; } aot_i16x32;
static inline aot_i16x32 aot_i16x32_splat_pairs(const int8_t *p)
{ aot_i16x32 v; v.quad[0] = aot_i16x16_splat_pairs(p); v.quad[1] = aot_i16x16_splat_pairs(p + 4); return v; }
#define AOT_I16X32_SPLAT_PAIRS(p) aot_i16x32_splat_pairs(p)
#define AOT_I16X32_PART(v, part) ((v).quad[part])
#define AOT_I32X4_PAIR_DOTADD_LOW(acc, a, b) AOT_I32X4_PAIR_DOTADD((acc), (a).quads[0], (b).quads[0])
#define AOT_I32X4_PAIR_DOTADD_HIGH(acc, a, b) AOT_I32X4_PAIR_DOTADD((acc), (a).quads[1], (b).quads[1])
#endif
/* A depthwise convolution's taps in pairs for 8 pixels (kernel IR TapProducts, WidenAdd; armv7):
 * AOT_I16X8_TAP(p, w) the 8 signed bytes at p times the int8 w, in 16 bits; AOT_I16X8_TAP_PAIR(p, w,
 * q, v) plus those at q times v (exact: neither weight is -128); AOT_I32X4_ADD_WIDE_LOW / _HIGH(acc,
 * a) acc plus elements 0-3 / 4-7 of a, sign-extended. NEON: vmull.s8, vmlal.s8 of d registers and
 * vaddw.s16, where gcc's own vectors of 16 pixels kept each weight in a q register and spilled
 * them (rpi3 int8 VWW) and LLVM's went through the stack. */
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) && defined(__ARM_NEON)
typedef int16x8_t aot_i16x8;
#define AOT_I16X8_TAP(p, w) vmull_s8(vld1_s8((const int8_t *)(p)), vdup_n_s8(w))
#define AOT_I16X8_TAP_PAIR(p, w, q, v) vmlal_s8(AOT_I16X8_TAP((p), (w)), vld1_s8((const int8_t *)(q)), vdup_n_s8(v))
#define AOT_I32X4_ADD_WIDE_LOW(acc, a) ((aot_i32x4)vaddw_s16((int32x4_t)(acc), vget_low_s16(a)))
#define AOT_I32X4_ADD_WIDE_HIGH(acc, a) ((aot_i32x4)vaddw_s16((int32x4_t)(acc), vget_high_s16(a)))
#elif defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int16_t aot_i16x8 __attribute__((vector_size(16)));
typedef int8_t aot_i8x8_bytes __attribute__((vector_size(8), aligned(1), may_alias));
static inline aot_i16x8 aot_i16x8_tap(const int8_t *p, int8_t w)
{ return __builtin_convertvector(*(const aot_i8x8_bytes *)(const void *)p, aot_i16x8) * (int16_t)w; }
#define AOT_I16X8_TAP(p, w) aot_i16x8_tap((p), (w))
#define AOT_I16X8_TAP_PAIR(p, w, q, v) (aot_i16x8_tap((p), (w)) + aot_i16x8_tap((q), (v)))
#define AOT_I32X4_ADD_WIDE_LOW(acc, a) \
    ((aot_i32x4)((aot_u32x4)(acc) + (aot_u32x4)((aot_i32x4){ (a)[0], (a)[1], (a)[2], (a)[3] })))
#define AOT_I32X4_ADD_WIDE_HIGH(acc, a) \
    ((aot_i32x4)((aot_u32x4)(acc) + (aot_u32x4)((aot_i32x4){ (a)[4], (a)[5], (a)[6], (a)[7] })))
#else
typedef struct { int16_t lane[8]; } aot_i16x8;
static inline aot_i16x8 aot_i16x8_tap(const int8_t *p, int8_t w)
{ aot_i16x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = (int16_t)(p[i] * w); return v; }
static inline aot_i16x8 aot_i16x8_tap_pair(const int8_t *p, int8_t w, const int8_t *q, int8_t v)
{ aot_i16x8 r; int i; for (i = 0; i < 8; ++i) r.lane[i] = (int16_t)(p[i] * w + q[i] * v); return r; }
static inline aot_i32x4 aot_i32x4_add_wide(aot_i32x4 acc, aot_i16x8 a, int half)
{ int i; for (i = 0; i < 4; ++i) acc.lane[i] = aot_i32x4_wrap((uint32_t)acc.lane[i] + (uint32_t)(int32_t)a.lane[4 * half + i]);
  return acc; }
#define AOT_I16X8_TAP(p, w) aot_i16x8_tap((p), (w))
#define AOT_I16X8_TAP_PAIR(p, w, q, v) aot_i16x8_tap_pair((p), (w), (q), (v))
#define AOT_I32X4_ADD_WIDE_LOW(acc, a) aot_i32x4_add_wide((acc), (a), 0)
#define AOT_I32X4_ADD_WIDE_HIGH(acc, a) aot_i32x4_add_wide((acc), (a), 1)
#endif
#endif /* AOT_WANT_I32X4 */

/*
 * An int8 tile's requantisation in registers, 4 lanes (the NEON targets' tiles; kernel IR int32
 * VecArith, VecConvert, VecRoundEven, NarrowStore): AOT_I32X4_ADD(a, b), AOT_I32X4_SUB(a, b) (wrapping),
 * AOT_F32X4_CONVERT(v) (int32 lanes to float, rounded to nearest as C's cast),
 * AOT_I32X4_CONVERT(v) (float lanes, integral and in range, to int32), AOT_F32X4_ROUND_EVEN(v)
 * (half to even) and AOT_I32X4_STORE_NARROW(p, v) (the lanes, each within the type's range, as
 * the four int8_t or uint8_t at p); for int8 depthwise loops AOT_I32X4_MUL(a, b) (wrapping) and
 * AOT_I32X4_EXTEND_I8(p) / _U8(p) (the four int8_t / uint8_t at p, extended to int32 lanes;
 * kernel IR ExtendLoad). gcc vectorises no float loop on armv7 (NEON flushes
 * denormals), so the scalar requantisation loop after a tile ran as VFP instructions, a tenth
 * of the int8 tiles' instructions on rpi3.
 */
#if (defined(AOT_WANT_I32X4) && defined(AOT_WANT_F32X4)) || (defined(AOT_WANT_I32X8) && defined(AOT_WANT_F32X8)) \
    || (defined(AOT_WANT_I32X16) && defined(AOT_WANT_F32X16))
/* x rounded half to even without libm: 2^23 with x's sign added and taken away where |x| < 2^23
 * (larger floats are integers), x's sign kept (-0.4 gives -0). Assumes float arithmetic in
 * float precision, rounding to nearest (FLT_EVAL_METHOD 0, the default mode). */
static inline float aot_round_even_f32(float x)
{
    float magic = x < 0.0f ? -8388608.0f : 8388608.0f, r;
    if (!(x < 8388608.0f && x > -8388608.0f))
        return x;
    r = (x + magic) - magic;
    return r == 0.0f ? x * 0.0f : r;
}
#endif
#if defined(AOT_WANT_I32X4) && defined(AOT_WANT_F32X4)
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
#define AOT_I32X4_ADD(a, b) ((aot_i32x4)((aot_u32x4)(a) + (aot_u32x4)(b)))
#define AOT_I32X4_SUB(a, b) ((aot_i32x4)((aot_u32x4)(a) - (aot_u32x4)(b)))
#define AOT_I32X4_MUL(a, b) ((aot_i32x4)((aot_u32x4)(a) * (aot_u32x4)(b)))
#if defined(__ARM_NEON) && (defined(__aarch64__) || !defined(AOT_NO_NEON_INTRINSICS))
/* Four bytes loaded as one 32-bit word, widened twice (vmovl). */
static inline aot_i32x4 aot_i32x4_extend_i8(const int8_t *p)
{ int32_t w; __builtin_memcpy(&w, p, 4);
  return (aot_i32x4)vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w))))); }
static inline aot_i32x4 aot_i32x4_extend_u8(const uint8_t *p)
{ uint32_t w; __builtin_memcpy(&w, p, 4);
  return (aot_i32x4)vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(w))))); }
#define AOT_F32X4_CONVERT(v) ((aot_f32x4)vcvtq_f32_s32((int32x4_t)(v)))
#define AOT_I32X4_CONVERT(v) ((aot_i32x4)vcvtq_s32_f32((float32x4_t)(v)))
#if defined(__aarch64__) || defined(__ARM_FEATURE_DIRECTED_ROUNDING) || defined(__ARM_FEATURE_NUMERIC_MAXMIN)
/* vrintn: aarch64, and 32-bit code for an ARMv8 core with its FP-ARMv8 (rpi3's Cortex-A53:
 * -mfpu=neon-fp-armv8), where gcc 12 defines __ARM_FEATURE_NUMERIC_MAXMIN (vmaxnm and vminnm
 * come with the same extension) but not __ARM_FEATURE_DIRECTED_ROUNDING as clang does. */
#define AOT_F32X4_ROUND_EVEN(v) ((aot_f32x4)vrndnq_f32((float32x4_t)(v)))
#else
/* ARMv7 NEON has no rounding instruction: 2^23 with v's sign added and taken away where
 * |v| < 2^23 (NEON always rounds to nearest even; larger values are integers already), then v's
 * sign put back (-0.4 gives -0). */
static inline float32x4_t aot_f32x4_round_even(float32x4_t v)
{
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    const float32x4_t big = vdupq_n_f32(8388608.0f), magic = vbslq_f32(sign, v, big);
    float32x4_t rounded = vbslq_f32(vcaltq_f32(v, big), vsubq_f32(vaddq_f32(v, magic), magic), v);
    return vbslq_f32(sign, v, rounded);
}
#define AOT_F32X4_ROUND_EVEN(v) aot_f32x4_round_even(v)
#endif
/* Narrowed twice (vmovn), the four bytes stored as one 32-bit word (at any alignment). */
static inline void aot_i32x4_store_narrow(void *p, aot_i32x4 v)
{
    int16x4_t h = vmovn_s32((int32x4_t)v);
    int32_t bytes = vget_lane_s32(vreinterpret_s32_s8(vmovn_s16(vcombine_s16(h, h))), 0);
    __builtin_memcpy(p, &bytes, 4);
}
#else
static inline aot_f32x4 aot_f32x4_round_even(aot_f32x4 v)
{ return (aot_f32x4){ aot_round_even_f32(v[0]), aot_round_even_f32(v[1]), aot_round_even_f32(v[2]),
                      aot_round_even_f32(v[3]) }; }
static inline void aot_i32x4_store_narrow(void *p, aot_i32x4 v)
{ unsigned char *b = (unsigned char *)p; int i; for (i = 0; i < 4; ++i) b[i] = (unsigned char)(v[i] & 0xff); }
static inline aot_i32x4 aot_i32x4_extend_i8(const int8_t *p) { return (aot_i32x4){ p[0], p[1], p[2], p[3] }; }
static inline aot_i32x4 aot_i32x4_extend_u8(const uint8_t *p) { return (aot_i32x4){ p[0], p[1], p[2], p[3] }; }
#define AOT_F32X4_CONVERT(v) __builtin_convertvector((v), aot_f32x4)
#define AOT_I32X4_CONVERT(v) __builtin_convertvector((v), aot_i32x4)
#define AOT_F32X4_ROUND_EVEN(v) aot_f32x4_round_even(v)
#endif
#define AOT_I32X4_EXTEND_I8(p) aot_i32x4_extend_i8(p)
#define AOT_I32X4_EXTEND_U8(p) aot_i32x4_extend_u8(p)
#define AOT_I32X4_STORE_NARROW(p, v) aot_i32x4_store_narrow((void *)(p), (v))
#else
static inline aot_i32x4 aot_i32x4_add(aot_i32x4 a, aot_i32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = aot_i32x4_wrap((uint32_t)a.lane[i] + (uint32_t)b.lane[i]); return a; }
static inline aot_i32x4 aot_i32x4_sub(aot_i32x4 a, aot_i32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = aot_i32x4_wrap((uint32_t)a.lane[i] - (uint32_t)b.lane[i]); return a; }
static inline aot_i32x4 aot_i32x4_mul(aot_i32x4 a, aot_i32x4 b)
{ int i; for (i = 0; i < 4; ++i) a.lane[i] = aot_i32x4_wrap((uint32_t)a.lane[i] * (uint32_t)b.lane[i]); return a; }
static inline aot_i32x4 aot_i32x4_extend_i8(const int8_t *p)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = p[i]; return v; }
static inline aot_i32x4 aot_i32x4_extend_u8(const uint8_t *p)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = p[i]; return v; }
static inline aot_f32x4 aot_f32x4_convert(aot_i32x4 v)
{ aot_f32x4 f; int i; for (i = 0; i < 4; ++i) f.lane[i] = (float)v.lane[i]; return f; }
static inline aot_i32x4 aot_i32x4_convert(aot_f32x4 f)
{ aot_i32x4 v; int i; for (i = 0; i < 4; ++i) v.lane[i] = (int32_t)f.lane[i]; return v; }
static inline aot_f32x4 aot_f32x4_round_even(aot_f32x4 v)
{ int i; for (i = 0; i < 4; ++i) v.lane[i] = aot_round_even_f32(v.lane[i]); return v; }
static inline void aot_i32x4_store_narrow(void *p, aot_i32x4 v)
{ unsigned char *b = (unsigned char *)p; int i; for (i = 0; i < 4; ++i) b[i] = (unsigned char)((uint32_t)v.lane[i] & 0xffu); }
#define AOT_I32X4_ADD(a, b) aot_i32x4_add((a), (b))
#define AOT_I32X4_SUB(a, b) aot_i32x4_sub((a), (b))
#define AOT_I32X4_MUL(a, b) aot_i32x4_mul((a), (b))
#define AOT_I32X4_EXTEND_I8(p) aot_i32x4_extend_i8(p)
#define AOT_I32X4_EXTEND_U8(p) aot_i32x4_extend_u8(p)
#define AOT_F32X4_CONVERT(v) aot_f32x4_convert(v)
#define AOT_I32X4_CONVERT(v) aot_i32x4_convert(v)
#define AOT_F32X4_ROUND_EVEN(v) aot_f32x4_round_even(v)
#define AOT_I32X4_STORE_NARROW(p, v) aot_i32x4_store_narrow((void *)(p), (v))
#endif
#endif

#ifdef AOT_WANT_I32X8
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int32_t aot_i32x8 __attribute__((vector_size(32)));
typedef uint32_t aot_u32x8 __attribute__((vector_size(32)));
typedef int32_t aot_i32x8_unaligned __attribute__((vector_size(32), aligned(1), may_alias));
#ifndef AOT_I32_QUAD_DEFINED
#define AOT_I32_QUAD_DEFINED
typedef int32_t aot_i32_quad __attribute__((aligned(1), may_alias));
#endif
#define AOT_I32X8_QUADS(p) (*(const aot_i32x8_unaligned *)(const void *)(p))
#define AOT_I32X8_STORE(p, v) (*(aot_i32x8_unaligned *)(void *)(p) = (v))
#define AOT_I32X8_LOAD(p) (*(const aot_i32x8_unaligned *)(const void *)(p))
#define AOT_I32X8_SPLAT(x) ((aot_i32x8){ (x), (x), (x), (x), (x), (x), (x), (x) })
#define AOT_I32X8_SPLAT_QUAD(p) (((aot_i32x8){ 0 }) + *(const aot_i32_quad *)(const void *)(p))
/* Byte i of each lane, sign-extended, by shifts (an arithmetic right shift, as gcc and clang
 * define it): the portable dot products' operands. */
#define AOT_I32X8_BYTE(v, i) ((aot_i32x8)((aot_u32x8)(v) << (24 - 8 * (i))) >> 24)
#if defined(__x86_64__) && (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define AOT_I32X8_DOTADD(acc, a, b) ((aot_i32x8)_mm256_dpbusd_epi32((__m256i)(acc), (__m256i)(a), (__m256i)(b)))
#elif defined(__AVXVNNI__)
#define AOT_I32X8_DOTADD(acc, a, b) ((aot_i32x8)_mm256_dpbusd_avx_epi32((__m256i)(acc), (__m256i)(a), (__m256i)(b)))
#elif defined(__x86_64__) && defined(__AVX2__)
static inline __m256i aot_i32x8_dotadd(__m256i acc, __m256i a, __m256i b)
{
    const __m256i low_bytes = _mm256_set1_epi16(0x00ff);
    __m256i even = _mm256_madd_epi16(_mm256_and_si256(a, low_bytes), _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8));
    __m256i odd = _mm256_madd_epi16(_mm256_srli_epi16(a, 8), _mm256_srai_epi16(b, 8));
    return _mm256_add_epi32(acc, _mm256_add_epi32(even, odd));
}
#define AOT_I32X8_DOTADD(acc, a, b) ((aot_i32x8)aot_i32x8_dotadd((__m256i)(acc), (__m256i)(a), (__m256i)(b)))
#else
/* a's bytes unsigned (masked), b's signed (AOT_I32X8_BYTE); the sum in unsigned arithmetic,
 * which wraps. */
#define AOT_I32X8_DOTADD(acc, a, b) ((aot_i32x8)((aot_u32x8)(acc) + (aot_u32x8)( \
    ((aot_i32x8)((aot_u32x8)(a) & 0xffu)) * AOT_I32X8_BYTE(b, 0) \
    + ((aot_i32x8)(((aot_u32x8)(a) >> 8) & 0xffu)) * AOT_I32X8_BYTE(b, 1) \
    + ((aot_i32x8)(((aot_u32x8)(a) >> 16) & 0xffu)) * AOT_I32X8_BYTE(b, 2) \
    + ((aot_i32x8)((aot_u32x8)(a) >> 24)) * AOT_I32X8_BYTE(b, 3))))
#endif
#if defined(__x86_64__) && defined(__AVX2__)
static inline __m256i aot_i32x8_sdotadd(__m256i acc, __m256i a, __m256i b)
{
    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(b, a));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#define AOT_I32X8_SDOTADD(acc, a, b) ((aot_i32x8)aot_i32x8_sdotadd((__m256i)(acc), (__m256i)(a), (__m256i)(b)))
#else
#define AOT_I32X8_SDOTADD(acc, a, b) ((aot_i32x8)((aot_u32x8)(acc) + (aot_u32x8)( \
    AOT_I32X8_BYTE(a, 0) * AOT_I32X8_BYTE(b, 0) + AOT_I32X8_BYTE(a, 1) * AOT_I32X8_BYTE(b, 1) \
    + AOT_I32X8_BYTE(a, 2) * AOT_I32X8_BYTE(b, 2) + AOT_I32X8_BYTE(a, 3) * AOT_I32X8_BYTE(b, 3))))
#endif
#else
typedef struct { int32_t lane[8]; } aot_i32x8;
/* The int32 of two's complement bits u (a conversion of a value over INT32_MAX is
 * implementation-defined). */
static inline int32_t aot_i32x8_wrap(uint32_t u) { return u > 0x7fffffffu ? -(int32_t)(0xffffffffu - u) - 1 : (int32_t)u; }
static inline int32_t aot_i32x8_quad(const void *p)
{ const uint8_t *b = (const uint8_t *)p;
  return aot_i32x8_wrap((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24); }
static inline aot_i32x8 aot_i32x8_quads(const uint8_t *p)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = aot_i32x8_quad(p + 4 * i); return v; }
static inline aot_i32x8 aot_i32x8_splat(int32_t x)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = x; return v; }
static inline aot_i32x8 aot_i32x8_load(const int32_t *p)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_i32x8_store(int32_t *p, aot_i32x8 v)
{ int i; for (i = 0; i < 8; ++i) p[i] = v.lane[i]; }
static inline aot_i32x8 aot_i32x8_dotadd(aot_i32x8 acc, aot_i32x8 a, aot_i32x8 b)
{ int i; for (i = 0; i < 8; ++i) { uint32_t ua = (uint32_t)a.lane[i], ub = (uint32_t)b.lane[i], sum = 0; int j;
    for (j = 0; j < 4; ++j) { int32_t x = (int32_t)((ua >> (8 * j)) & 0xffu);
      int32_t w = (int32_t)((ub >> (8 * j)) & 0xffu); sum += (uint32_t)(x * (w > 127 ? w - 256 : w)); }
    acc.lane[i] = aot_i32x8_wrap((uint32_t)acc.lane[i] + sum); }
  return acc; }
#define AOT_I32X8_QUADS(p) aot_i32x8_quads(p)
#define AOT_I32X8_STORE(p, v) aot_i32x8_store((p), (v))
#define AOT_I32X8_LOAD(p) aot_i32x8_load(p)
#define AOT_I32X8_SPLAT(x) aot_i32x8_splat(x)
#define AOT_I32X8_SPLAT_QUAD(p) aot_i32x8_splat(aot_i32x8_quad(p))
static inline aot_i32x8 aot_i32x8_sdotadd(aot_i32x8 acc, aot_i32x8 a, aot_i32x8 b)
{ int i; for (i = 0; i < 8; ++i) { uint32_t ua = (uint32_t)a.lane[i], ub = (uint32_t)b.lane[i], sum = 0; int j;
    for (j = 0; j < 4; ++j) { int32_t x = (int32_t)((ua >> (8 * j)) & 0xffu);
      int32_t w = (int32_t)((ub >> (8 * j)) & 0xffu); sum += (uint32_t)((x > 127 ? x - 256 : x) * (w > 127 ? w - 256 : w)); }
    acc.lane[i] = aot_i32x8_wrap((uint32_t)acc.lane[i] + sum); }
  return acc; }
#define AOT_I32X8_DOTADD(acc, a, b) aot_i32x8_dotadd((acc), (a), (b))
#define AOT_I32X8_SDOTADD(acc, a, b) aot_i32x8_sdotadd((acc), (a), (b))
#endif
#endif /* AOT_WANT_I32X8 */

#ifdef AOT_WANT_I32X16
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int32_t aot_i32x16 __attribute__((vector_size(64)));
typedef uint32_t aot_u32x16 __attribute__((vector_size(64)));
typedef int32_t aot_i32x16_unaligned __attribute__((vector_size(64), aligned(1), may_alias));
#ifndef AOT_I32_QUAD_DEFINED
#define AOT_I32_QUAD_DEFINED
typedef int32_t aot_i32_quad __attribute__((aligned(1), may_alias));
#endif
#define AOT_I32X16_QUADS(p) (*(const aot_i32x16_unaligned *)(const void *)(p))
#define AOT_I32X16_STORE(p, v) (*(aot_i32x16_unaligned *)(void *)(p) = (v))
#define AOT_I32X16_LOAD(p) (*(const aot_i32x16_unaligned *)(const void *)(p))
#define AOT_I32X16_SPLAT(x) ((aot_i32x16){ (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x) })
#define AOT_I32X16_SPLAT_QUAD(p) (((aot_i32x16){ 0 }) + *(const aot_i32_quad *)(const void *)(p))
#if defined(__x86_64__) && defined(__AVX512VNNI__)
#define AOT_I32X16_DOTADD(acc, a, b) ((aot_i32x16)_mm512_dpbusd_epi32((__m512i)(acc), (__m512i)(a), (__m512i)(b)))
#elif defined(__x86_64__) && defined(__AVX512BW__)
static inline __m512i aot_i32x16_dotadd(__m512i acc, __m512i a, __m512i b)
{
    const __m512i low_bytes = _mm512_set1_epi16(0x00ff);
    __m512i even = _mm512_madd_epi16(_mm512_and_si512(a, low_bytes), _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8));
    __m512i odd = _mm512_madd_epi16(_mm512_srli_epi16(a, 8), _mm512_srai_epi16(b, 8));
    return _mm512_add_epi32(acc, _mm512_add_epi32(even, odd));
}
#define AOT_I32X16_DOTADD(acc, a, b) ((aot_i32x16)aot_i32x16_dotadd((__m512i)(acc), (__m512i)(a), (__m512i)(b)))
#else
/* Each byte of a lane by shifts: a's unsigned, b's signed (an arithmetic right shift, as gcc and
 * clang define it); the sum in unsigned arithmetic, which wraps. */
#define AOT_I32X16_BYTE(v, i) ((aot_i32x16)((aot_u32x16)(v) << (24 - 8 * (i))) >> 24)
#define AOT_I32X16_DOTADD(acc, a, b) ((aot_i32x16)((aot_u32x16)(acc) + (aot_u32x16)( \
    ((aot_i32x16)((aot_u32x16)(a) & 0xffu)) * AOT_I32X16_BYTE(b, 0) \
    + ((aot_i32x16)(((aot_u32x16)(a) >> 8) & 0xffu)) * AOT_I32X16_BYTE(b, 1) \
    + ((aot_i32x16)(((aot_u32x16)(a) >> 16) & 0xffu)) * AOT_I32X16_BYTE(b, 2) \
    + ((aot_i32x16)((aot_u32x16)(a) >> 24)) * AOT_I32X16_BYTE(b, 3))))
#endif
#else
typedef struct { int32_t lane[16]; } aot_i32x16;
/* The int32 of two's complement bits u (a conversion of a value over INT32_MAX is
 * implementation-defined). */
static inline int32_t aot_i32x16_wrap(uint32_t u) { return u > 0x7fffffffu ? -(int32_t)(0xffffffffu - u) - 1 : (int32_t)u; }
static inline int32_t aot_i32x16_quad(const void *p)
{ const uint8_t *b = (const uint8_t *)p;
  return aot_i32x16_wrap((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24); }
static inline aot_i32x16 aot_i32x16_quads(const uint8_t *p)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = aot_i32x16_quad(p + 4 * i); return v; }
static inline aot_i32x16 aot_i32x16_splat(int32_t x)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = x; return v; }
static inline aot_i32x16 aot_i32x16_load(const int32_t *p)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = p[i]; return v; }
static inline void aot_i32x16_store(int32_t *p, aot_i32x16 v)
{ int i; for (i = 0; i < 16; ++i) p[i] = v.lane[i]; }
static inline aot_i32x16 aot_i32x16_dotadd(aot_i32x16 acc, aot_i32x16 a, aot_i32x16 b)
{ int i; for (i = 0; i < 16; ++i) { uint32_t ua = (uint32_t)a.lane[i], ub = (uint32_t)b.lane[i], sum = 0; int j;
    for (j = 0; j < 4; ++j) { int32_t x = (int32_t)((ua >> (8 * j)) & 0xffu);
      int32_t w = (int32_t)((ub >> (8 * j)) & 0xffu); sum += (uint32_t)(x * (w > 127 ? w - 256 : w)); }
    acc.lane[i] = aot_i32x16_wrap((uint32_t)acc.lane[i] + sum); }
  return acc; }
#define AOT_I32X16_QUADS(p) aot_i32x16_quads(p)
#define AOT_I32X16_STORE(p, v) aot_i32x16_store((p), (v))
#define AOT_I32X16_LOAD(p) aot_i32x16_load(p)
#define AOT_I32X16_SPLAT(x) aot_i32x16_splat(x)
#define AOT_I32X16_SPLAT_QUAD(p) aot_i32x16_splat(aot_i32x16_quad(p))
#define AOT_I32X16_DOTADD(acc, a, b) aot_i32x16_dotadd((acc), (a), (b))
#endif
#endif /* AOT_WANT_I32X16 */

/*
 * The same requantisation in registers for x86's 8 and 16 lanes (AOT_I32X8_ADD ...
 * AOT_I32X16_STORE_NARROW, as the 4-lane forms above): without it a tile stored its int32 sums
 * and a loop reloaded them, and over an 8-pixel row gcc left that loop scalar. Rounding is
 * vroundps / vrndscaleps to nearest even (what nearbyintf gives in the default mode); the narrow
 * store is vpmovdb with AVX-512, a byte shuffle with AVX2. AOT_I32X<n>_STORE_NARROW_FIRST(p, v,
 * count) stores only the first `count` lanes: a tile over a row narrower than a vector (13x13,
 * 8x8 planes with 16 lanes), which would otherwise store its sums for a scalar loop.
 */
#if defined(AOT_WANT_I32X8) && defined(AOT_WANT_F32X8)
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int8_t aot_i8x8 __attribute__((vector_size(8)));
typedef uint8_t aot_u8x8 __attribute__((vector_size(8)));
typedef int8_t aot_i8x8_unaligned __attribute__((vector_size(8), aligned(1), may_alias));
typedef uint8_t aot_u8x8_unaligned __attribute__((vector_size(8), aligned(1), may_alias));
#define AOT_I32X8_ADD(a, b) ((aot_i32x8)((aot_u32x8)(a) + (aot_u32x8)(b)))
#define AOT_I32X8_SUB(a, b) ((aot_i32x8)((aot_u32x8)(a) - (aot_u32x8)(b)))
#define AOT_I32X8_MUL(a, b) ((aot_i32x8)((aot_u32x8)(a) * (aot_u32x8)(b)))
#define AOT_F32X8_CONVERT(v) __builtin_convertvector((v), aot_f32x8)
#define AOT_I32X8_CONVERT(v) __builtin_convertvector((v), aot_i32x8)
/* gcc 12 widens bytes to int32 lanes by __builtin_convertvector one byte at a time (movsbl,
 * vpinsrd: 36 instructions for 16 lanes), so x86 takes vpmovsxbd / vpmovzxbd. */
#if defined(__x86_64__) && defined(__AVX2__)
#define AOT_I32X8_EXTEND_I8(p) ((aot_i32x8)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define AOT_I32X8_EXTEND_U8(p) ((aot_i32x8)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#else
#define AOT_I32X8_EXTEND_I8(p) __builtin_convertvector(*(const aot_i8x8_unaligned *)(const void *)(p), aot_i32x8)
#define AOT_I32X8_EXTEND_U8(p) __builtin_convertvector(*(const aot_u8x8_unaligned *)(const void *)(p), aot_i32x8)
#endif
#if defined(__x86_64__) && defined(__AVX2__)
#define AOT_F32X8_ROUND_EVEN(v) ((aot_f32x8)_mm256_round_ps((__m256)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#else
#define AOT_F32X8_ROUND_EVEN(v) (__extension__ ({ aot_f32x8 aot_r_ = (v); int aot_i_; \
    for (aot_i_ = 0; aot_i_ < 8; ++aot_i_) aot_r_[aot_i_] = aot_round_even_f32(aot_r_[aot_i_]); aot_r_; }))
#endif
/* The lanes' low bytes (each lane within the type's range), stored at any alignment. Macros, not
 * functions: a vector argument wider than the compiler's flags allow changes the ABI (-Wpsabi).
 * AVX2 has no vpmovdb: there gcc moves the lanes out one by one and joins them by shifts (most of
 * int8 VWW's depthwise kernels' time), so vpshufb gathers each half's low bytes and vpunpckldq joins
 * the halves. */
#if defined(__x86_64__) && defined(__AVX2__) && !defined(__AVX512VL__)
static inline __m128i aot_i32x8_low_bytes(__m256i v)
{
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i bytes = _mm256_shuffle_epi8(v, pick);
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}
#define AOT_I32X8_STORE_NARROW(p, v) _mm_storel_epi64((__m128i *)(void *)(p), aot_i32x8_low_bytes((__m256i)(v)))
#define AOT_I32X8_STORE_NARROW_FIRST(p, v, n) do { __m128i aot_b_ = aot_i32x8_low_bytes((__m256i)(v)); \
    __builtin_memcpy((void *)(p), &aot_b_, (n)); } while (0)
#elif defined(__x86_64__) && defined(__AVX512VL__)
/* vpmovdb, written out (see AOT_I32X16_STORE_NARROW). */
#define AOT_I32X8_STORE_NARROW(p, v) _mm256_mask_cvtepi32_storeu_epi8((void *)(p), (__mmask8)0xff, (__m256i)(v))
#define AOT_I32X8_STORE_NARROW_FIRST(p, v, n) \
    _mm256_mask_cvtepi32_storeu_epi8((void *)(p), (__mmask8)((1u << (n)) - 1u), (__m256i)(v))
#else
#define AOT_I32X8_STORE_NARROW(p, v) do { aot_i8x8 aot_b_ = __builtin_convertvector((v), aot_i8x8); \
    __builtin_memcpy((void *)(p), &aot_b_, 8); } while (0)
#define AOT_I32X8_STORE_NARROW_FIRST(p, v, n) do { aot_i8x8 aot_b_ = __builtin_convertvector((v), aot_i8x8); \
    __builtin_memcpy((void *)(p), &aot_b_, (n)); } while (0)
#endif
#else
static inline aot_i32x8 aot_i32x8_add(aot_i32x8 a, aot_i32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = aot_i32x8_wrap((uint32_t)a.lane[i] + (uint32_t)b.lane[i]); return a; }
static inline aot_i32x8 aot_i32x8_sub(aot_i32x8 a, aot_i32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = aot_i32x8_wrap((uint32_t)a.lane[i] - (uint32_t)b.lane[i]); return a; }
static inline aot_i32x8 aot_i32x8_mul(aot_i32x8 a, aot_i32x8 b)
{ int i; for (i = 0; i < 8; ++i) a.lane[i] = aot_i32x8_wrap((uint32_t)a.lane[i] * (uint32_t)b.lane[i]); return a; }
static inline aot_i32x8 aot_i32x8_extend_i8(const int8_t *p)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = p[i]; return v; }
static inline aot_i32x8 aot_i32x8_extend_u8(const uint8_t *p)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = p[i]; return v; }
static inline aot_f32x8 aot_f32x8_convert(aot_i32x8 v)
{ aot_f32x8 f; int i; for (i = 0; i < 8; ++i) f.lane[i] = (float)v.lane[i]; return f; }
static inline aot_i32x8 aot_i32x8_convert(aot_f32x8 f)
{ aot_i32x8 v; int i; for (i = 0; i < 8; ++i) v.lane[i] = (int32_t)f.lane[i]; return v; }
static inline aot_f32x8 aot_f32x8_round_even(aot_f32x8 v)
{ int i; for (i = 0; i < 8; ++i) v.lane[i] = aot_round_even_f32(v.lane[i]); return v; }
static inline void aot_i32x8_store_narrow_first(void *p, aot_i32x8 v, int n)
{ unsigned char *b = (unsigned char *)p; int i; for (i = 0; i < n; ++i) b[i] = (unsigned char)((uint32_t)v.lane[i] & 0xffu); }
#define AOT_I32X8_ADD(a, b) aot_i32x8_add((a), (b))
#define AOT_I32X8_SUB(a, b) aot_i32x8_sub((a), (b))
#define AOT_I32X8_MUL(a, b) aot_i32x8_mul((a), (b))
#define AOT_I32X8_EXTEND_I8(p) aot_i32x8_extend_i8(p)
#define AOT_I32X8_EXTEND_U8(p) aot_i32x8_extend_u8(p)
#define AOT_F32X8_CONVERT(v) aot_f32x8_convert(v)
#define AOT_I32X8_CONVERT(v) aot_i32x8_convert(v)
#define AOT_F32X8_ROUND_EVEN(v) aot_f32x8_round_even(v)
#define AOT_I32X8_STORE_NARROW(p, v) aot_i32x8_store_narrow_first((void *)(p), (v), 8)
#define AOT_I32X8_STORE_NARROW_FIRST(p, v, n) aot_i32x8_store_narrow_first((void *)(p), (v), (n))
#endif
#endif

#if defined(AOT_WANT_I32X16) && defined(AOT_WANT_F32X16)
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
typedef int8_t aot_i8x16 __attribute__((vector_size(16)));
typedef uint8_t aot_u8x16 __attribute__((vector_size(16)));
typedef int8_t aot_i8x16_unaligned __attribute__((vector_size(16), aligned(1), may_alias));
typedef uint8_t aot_u8x16_unaligned __attribute__((vector_size(16), aligned(1), may_alias));
#define AOT_I32X16_ADD(a, b) ((aot_i32x16)((aot_u32x16)(a) + (aot_u32x16)(b)))
#define AOT_I32X16_SUB(a, b) ((aot_i32x16)((aot_u32x16)(a) - (aot_u32x16)(b)))
#define AOT_I32X16_MUL(a, b) ((aot_i32x16)((aot_u32x16)(a) * (aot_u32x16)(b)))
#define AOT_F32X16_CONVERT(v) __builtin_convertvector((v), aot_f32x16)
#define AOT_I32X16_CONVERT(v) __builtin_convertvector((v), aot_i32x16)
#if defined(__x86_64__) && defined(__AVX512F__)  /* as AOT_I32X8_EXTEND_I8 */
#define AOT_I32X16_EXTEND_I8(p) ((aot_i32x16)_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define AOT_I32X16_EXTEND_U8(p) ((aot_i32x16)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#else
#define AOT_I32X16_EXTEND_I8(p) __builtin_convertvector(*(const aot_i8x16_unaligned *)(const void *)(p), aot_i32x16)
#define AOT_I32X16_EXTEND_U8(p) __builtin_convertvector(*(const aot_u8x16_unaligned *)(const void *)(p), aot_i32x16)
#endif
#if defined(__x86_64__) && defined(__AVX512F__)
#define AOT_F32X16_ROUND_EVEN(v) ((aot_f32x16)_mm512_roundscale_ps((__m512)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#else
#define AOT_F32X16_ROUND_EVEN(v) (__extension__ ({ aot_f32x16 aot_r_ = (v); int aot_i_; \
    for (aot_i_ = 0; aot_i_ < 16; ++aot_i_) aot_r_[aot_i_] = aot_round_even_f32(aot_r_[aot_i_]); aot_r_; }))
#endif
/* The lanes' low bytes (each lane within the type's range), stored at any alignment. Macros, not
 * functions: a vector argument wider than the compiler's flags allow changes the ABI (-Wpsabi). */
#if defined(__x86_64__) && defined(__AVX512F__)
/* vpmovdb, written out: gcc 12 compiled the conversion below lane by lane when its operand came
 * from an intrinsic (AOT_I32X16_ROUND_CONVERT), 60 instructions where this is one. */
#define AOT_I32X16_STORE_NARROW(p, v) _mm512_mask_cvtepi32_storeu_epi8((void *)(p), (__mmask16)0xffff, (__m512i)(v))
#define AOT_I32X16_STORE_NARROW_FIRST(p, v, n) \
    _mm512_mask_cvtepi32_storeu_epi8((void *)(p), (__mmask16)((1u << (n)) - 1u), (__m512i)(v))
#else
#define AOT_I32X16_STORE_NARROW(p, v) do { aot_i8x16 aot_b_ = __builtin_convertvector((v), aot_i8x16); \
    __builtin_memcpy((void *)(p), &aot_b_, 16); } while (0)
#define AOT_I32X16_STORE_NARROW_FIRST(p, v, n) do { aot_i8x16 aot_b_ = __builtin_convertvector((v), aot_i8x16); \
    __builtin_memcpy((void *)(p), &aot_b_, (n)); } while (0)
#endif
#else
static inline aot_i32x16 aot_i32x16_add(aot_i32x16 a, aot_i32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = aot_i32x16_wrap((uint32_t)a.lane[i] + (uint32_t)b.lane[i]); return a; }
static inline aot_i32x16 aot_i32x16_sub(aot_i32x16 a, aot_i32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = aot_i32x16_wrap((uint32_t)a.lane[i] - (uint32_t)b.lane[i]); return a; }
static inline aot_i32x16 aot_i32x16_mul(aot_i32x16 a, aot_i32x16 b)
{ int i; for (i = 0; i < 16; ++i) a.lane[i] = aot_i32x16_wrap((uint32_t)a.lane[i] * (uint32_t)b.lane[i]); return a; }
static inline aot_i32x16 aot_i32x16_extend_i8(const int8_t *p)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = p[i]; return v; }
static inline aot_i32x16 aot_i32x16_extend_u8(const uint8_t *p)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = p[i]; return v; }
static inline aot_f32x16 aot_f32x16_convert(aot_i32x16 v)
{ aot_f32x16 f; int i; for (i = 0; i < 16; ++i) f.lane[i] = (float)v.lane[i]; return f; }
static inline aot_i32x16 aot_i32x16_convert(aot_f32x16 f)
{ aot_i32x16 v; int i; for (i = 0; i < 16; ++i) v.lane[i] = (int32_t)f.lane[i]; return v; }
static inline aot_f32x16 aot_f32x16_round_even(aot_f32x16 v)
{ int i; for (i = 0; i < 16; ++i) v.lane[i] = aot_round_even_f32(v.lane[i]); return v; }
static inline void aot_i32x16_store_narrow_first(void *p, aot_i32x16 v, int n)
{ unsigned char *b = (unsigned char *)p; int i; for (i = 0; i < n; ++i) b[i] = (unsigned char)((uint32_t)v.lane[i] & 0xffu); }
#define AOT_I32X16_ADD(a, b) aot_i32x16_add((a), (b))
#define AOT_I32X16_SUB(a, b) aot_i32x16_sub((a), (b))
#define AOT_I32X16_MUL(a, b) aot_i32x16_mul((a), (b))
#define AOT_I32X16_EXTEND_I8(p) aot_i32x16_extend_i8(p)
#define AOT_I32X16_EXTEND_U8(p) aot_i32x16_extend_u8(p)
#define AOT_F32X16_CONVERT(v) aot_f32x16_convert(v)
#define AOT_I32X16_CONVERT(v) aot_i32x16_convert(v)
#define AOT_F32X16_ROUND_EVEN(v) aot_f32x16_round_even(v)
#define AOT_I32X16_STORE_NARROW(p, v) aot_i32x16_store_narrow_first((void *)(p), (v), 16)
#define AOT_I32X16_STORE_NARROW_FIRST(p, v, n) aot_i32x16_store_narrow_first((void *)(p), (v), (n))
#endif
#endif

/*
 * AOT_I32X<lanes>_ROUND_CONVERT(v): float lanes rounded half to even and converted to int32, each
 * rounded value within int32's range (a requantisation clamps first: arithmetic.clamped_round).
 * One instruction where the conversion can round to nearest even whatever the rounding mode:
 * AVX-512's vcvtps2dq with its rounding in the instruction, aarch64's fcvtns; elsewhere the
 * rounding, then the conversion of an integral value.
 */
#if defined(AOT_WANT_I32X16) && defined(AOT_WANT_F32X16)
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) && defined(__AVX512F__)
#define AOT_I32X16_ROUND_CONVERT(v) \
    ((aot_i32x16)_mm512_cvt_roundps_epi32((__m512)(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#else
#define AOT_I32X16_ROUND_CONVERT(v) AOT_I32X16_CONVERT(AOT_F32X16_ROUND_EVEN(v))
#endif
#endif
#if defined(AOT_WANT_I32X8) && defined(AOT_WANT_F32X8)
#define AOT_I32X8_ROUND_CONVERT(v) AOT_I32X8_CONVERT(AOT_F32X8_ROUND_EVEN(v))
#endif
#if defined(AOT_WANT_I32X4) && defined(AOT_WANT_F32X4)
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) && defined(__ARM_NEON) && defined(__aarch64__)
#define AOT_I32X4_ROUND_CONVERT(v) ((aot_i32x4)vcvtnq_s32_f32((float32x4_t)(v)))
#else
#define AOT_I32X4_ROUND_CONVERT(v) AOT_I32X4_CONVERT(AOT_F32X4_ROUND_EVEN(v))
#endif
#endif

/*
 * AOT_F32X<lanes>_PICK_LESS(a, b) and _PICK_GREATER(a, b): a < b ? a : b and a > b ? a : b, lane by
 * lane (b where either is NaN): a requantisation's clamps (arithmetic.saturate_finite). They are
 * exactly x86's minps and maxps, which gcc did not see in the select: a compare and a blend per
 * bound, 4 instructions per output vector where 2 do. Elsewhere they are the selects.
 */
#if defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS) && defined(__x86_64__)
#if defined(AOT_WANT_F32X4) || defined(AOT_WANT_F32X8) || defined(AOT_WANT_F32X16)
#include <immintrin.h>
#endif
#ifdef AOT_WANT_F32X4
#define AOT_F32X4_PICK_LESS(a, b) ((aot_f32x4)_mm_min_ps((__m128)(a), (__m128)(b)))
#define AOT_F32X4_PICK_GREATER(a, b) ((aot_f32x4)_mm_max_ps((__m128)(a), (__m128)(b)))
#endif
#if defined(AOT_WANT_F32X8) && defined(__AVX__)
#define AOT_F32X8_PICK_LESS(a, b) ((aot_f32x8)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define AOT_F32X8_PICK_GREATER(a, b) ((aot_f32x8)_mm256_max_ps((__m256)(a), (__m256)(b)))
#endif
#if defined(AOT_WANT_F32X16) && defined(__AVX512F__)
#define AOT_F32X16_PICK_LESS(a, b) ((aot_f32x16)_mm512_min_ps((__m512)(a), (__m512)(b)))
#define AOT_F32X16_PICK_GREATER(a, b) ((aot_f32x16)_mm512_max_ps((__m512)(a), (__m512)(b)))
#endif
#endif
#if defined(AOT_WANT_F32X4) && !defined(AOT_F32X4_PICK_LESS)
#define AOT_F32X4_PICK_LESS(a, b) AOT_F32X4_SELECT_LT((a), (b), (a), (b))
#define AOT_F32X4_PICK_GREATER(a, b) AOT_F32X4_SELECT_GT((a), (b), (a), (b))
#endif
#if defined(AOT_WANT_F32X8) && !defined(AOT_F32X8_PICK_LESS)
#define AOT_F32X8_PICK_LESS(a, b) AOT_F32X8_SELECT_LT((a), (b), (a), (b))
#define AOT_F32X8_PICK_GREATER(a, b) AOT_F32X8_SELECT_GT((a), (b), (a), (b))
#endif
#if defined(AOT_WANT_F32X16) && !defined(AOT_F32X16_PICK_LESS)
#define AOT_F32X16_PICK_LESS(a, b) AOT_F32X16_SELECT_LT((a), (b), (a), (b))
#define AOT_F32X16_PICK_GREATER(a, b) AOT_F32X16_SELECT_GT((a), (b), (a), (b))
#endif
/* AOT_F32X<lanes>_MIN_NUMBERS(a, b), _MAX_NUMBERS(a, b): the same picks of numbers, neither ever
 * NaN (kernel IR VecSelect with `numbers`: the requantisation's clamps): aarch64's fminnm and
 * fmaxnm (rpi3's ARMv8 NEON in 32-bit mode: vminnm.f32, vmaxnm.f32), one instruction where the
 * select took two; elsewhere the picks. */
#if defined(AOT_WANT_F32X4) && (defined(__aarch64__) || (defined(__ARM_NEON) && defined(__ARM_FEATURE_NUMERIC_MAXMIN))) \
    && defined(__GNUC__) && !defined(AOT_NO_VECTOR_EXTENSIONS)
#include <arm_neon.h>
#define AOT_F32X4_MIN_NUMBERS(a, b) ((aot_f32x4)vminnmq_f32((float32x4_t)(a), (float32x4_t)(b)))
#define AOT_F32X4_MAX_NUMBERS(a, b) ((aot_f32x4)vmaxnmq_f32((float32x4_t)(a), (float32x4_t)(b)))
#endif
#if defined(AOT_WANT_F32X4) && !defined(AOT_F32X4_MIN_NUMBERS)
#define AOT_F32X4_MIN_NUMBERS(a, b) AOT_F32X4_PICK_LESS(a, b)
#define AOT_F32X4_MAX_NUMBERS(a, b) AOT_F32X4_PICK_GREATER(a, b)
#endif
#if defined(AOT_WANT_F32X8)
#define AOT_F32X8_MIN_NUMBERS(a, b) AOT_F32X8_PICK_LESS(a, b)
#define AOT_F32X8_MAX_NUMBERS(a, b) AOT_F32X8_PICK_GREATER(a, b)
#endif
#if defined(AOT_WANT_F32X16)
#define AOT_F32X16_MIN_NUMBERS(a, b) AOT_F32X16_PICK_LESS(a, b)
#define AOT_F32X16_MAX_NUMBERS(a, b) AOT_F32X16_PICK_GREATER(a, b)
#endif

#endif /* AOT_KERNELS_H_INCLUDED */
