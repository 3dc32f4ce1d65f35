#pragma once
/// Clang's thread-safety attributes (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html) as
/// macros, after LevelDB's port/thread_annotations.h and Abseil's thread_annotations.h. Clang
/// checks them with -Wthread-safety (the clang build turns violations into errors:
/// CMakeLists.txt); other compilers see nothing. A capability is a vtensor::mutex
/// (core/mutex.hpp): libstdc++'s std::mutex carries no attributes, so the analysis cannot see it.

#if defined(__clang__)
#define VTENSOR_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define VTENSOR_THREAD_ANNOTATION(x)
#endif

/// A type whose objects are capabilities (a mutex); `x` names the kind in diagnostics.
#ifndef CAPABILITY
#define CAPABILITY(x) VTENSOR_THREAD_ANNOTATION(capability(x))
#endif

/// An RAII type that holds a capability from its constructor to its destructor.
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY VTENSOR_THREAD_ANNOTATION(scoped_lockable)
#endif

/// A data member read or written only holding capability `x`.
#ifndef GUARDED_BY
#define GUARDED_BY(x) VTENSOR_THREAD_ANNOTATION(guarded_by(x))
#endif

/// A pointer member whose pointee is read or written only holding capability `x`.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) VTENSOR_THREAD_ANNOTATION(pt_guarded_by(x))
#endif

/// A function called only holding the capabilities named.
#ifndef REQUIRES
#define REQUIRES(...) VTENSOR_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif

/// A function that returns holding the capabilities named (no argument: `this`), not held before.
#ifndef ACQUIRE
#define ACQUIRE(...) VTENSOR_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif

/// A function that returns no longer holding the capabilities named (no argument: `this`).
#ifndef RELEASE
#define RELEASE(...) VTENSOR_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif

/// A function that acquires the capabilities named when it returns `b` (the first argument).
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) VTENSOR_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif

/// A function called not holding the capabilities named (it takes them itself).
#ifndef EXCLUDES
#define EXCLUDES(...) VTENSOR_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif

/// A function that tells the analysis the capability named is held (checked at run time or not).
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) VTENSOR_THREAD_ANNOTATION(assert_capability(x))
#endif

/// A function that returns a reference to capability `x`.
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) VTENSOR_THREAD_ANNOTATION(lock_returned(x))
#endif

/// A function the analysis does not check (say why where it is used).
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS VTENSOR_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
