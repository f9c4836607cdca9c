// REDUCER_KERNEL_CLONES: compiles a kernel function several times, for the
// baseline instruction set and for wider vectors, and picks the best clone
// for the CPU once, at load time (GCC function multi-versioning).
// Internal to the reduction kernels.
//
//   template <class Op>
//   REDUCER_KERNEL_CLONES void ReduceTile(float* out, ...);
//
// The clones add AVX2 only: no FMA, so no clone can contract a multiply and
// an add into one rounding, and every clone gives the same bits.
#ifndef REDUCER_CORE_KERNEL_CLONES_H_
#define REDUCER_CORE_KERNEL_CLONES_H_

// An attribute cannot be a constexpr value; a macro is the only spelling.
// GCC only: Clang (14) does not clone function templates, so a Clang build
// (the thread-safety check) runs the baseline code everywhere.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(REDUCER_NO_KERNEL_CLONES)
#define REDUCER_KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define REDUCER_KERNEL_CLONES
#endif

#endif  // REDUCER_CORE_KERNEL_CLONES_H_
