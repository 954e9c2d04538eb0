/*
 * aot runtime: the compiler hints the generated kernels are declared with, for <name>.c to include
 * after aot_kernels.h. Each hint is empty for compilers that need none; define
 * AOT_NO_SCHEDULE_HINTS to drop gcc's scheduling hints.
 */
#ifndef AOT_COMPILER_HINTS_H_INCLUDED
#define AOT_COMPILER_HINTS_H_INCLUDED

/* gcc spills tile loads it carries across iterations, and rep-movs row copies on x86 (bench: VWW, DS-CNN). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define AOT_KERNEL_OPTIONS , "no-predictive-commoning", "no-tree-loop-distribute-patterns"
#define AOT_KERNEL_OPTIONS_ATTRIBUTE \
    __attribute__((optimize("no-predictive-commoning", "no-tree-loop-distribute-patterns")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__aarch64__)
#define AOT_KERNEL_OPTIONS , "no-predictive-commoning"
#define AOT_KERNEL_OPTIONS_ATTRIBUTE __attribute__((optimize("no-predictive-commoning")))
#else
#define AOT_KERNEL_OPTIONS
#define AOT_KERNEL_OPTIONS_ATTRIBUTE
#endif

/* gcc schedules long multiply-add bodies minding register pressure, or spills (bench: ResNet-8 convs). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(AOT_NO_SCHEDULE_HINTS) && defined(__arm__) \
    && defined(__ARM_NEON)
/* armv7 gcc's early scheduling spills the loads it hoists (bench: tiny_cnn on rpi3). */
#pragma GCC optimize("no-schedule-insns")
#define AOT_LONG_FMA_BODY __attribute__((optimize("schedule-insns", "sched-pressure" AOT_KERNEL_OPTIONS)))
#elif defined(__GNUC__) && !defined(__clang__) && !defined(AOT_NO_SCHEDULE_HINTS)
#define AOT_LONG_FMA_BODY __attribute__((optimize("schedule-insns", "sched-pressure" AOT_KERNEL_OPTIONS)))
#else
#define AOT_LONG_FMA_BODY
#endif

/* Kernels stay functions where vector registers are few: inlined, their tiles spill (bench: ResNet-8). */
#if (defined(__GNUC__) || defined(__clang__)) \
    && (defined(__arm__) || defined(__aarch64__) || (defined(__x86_64__) && !defined(__AVX512F__)))
#define AOT_KERNEL __attribute__((noinline)) AOT_KERNEL_OPTIONS_ATTRIBUTE
#else
#define AOT_KERNEL AOT_KERNEL_OPTIONS_ATTRIBUTE
#endif

/* Parallel segments stay functions: inlined, their restrict pointers are lost (bench: ResNet-50, 2 threads). */
#if defined(__GNUC__) || defined(__clang__)
#define AOT_PARALLEL_SEGMENT __attribute__((noinline))
#else
#define AOT_PARALLEL_SEGMENT
#endif

/* armv7 gcc unrolls a tile's short reduction loop whole, as LLVM does (bench: ResNet-8 on rpi3). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__arm__)
#define AOT_UNROLL_STEPS _Pragma("GCC unroll 16")
#else
#define AOT_UNROLL_STEPS
#endif

#endif /* AOT_COMPILER_HINTS_H_INCLUDED */
