#pragma once
/// A std::mutex that Clang's thread-safety analysis knows as a capability, and its scoped lock
/// (LevelDB's port::Mutex and MutexLock). Members it guards say so with GUARDED_BY
/// (core/thread_annotations.hpp); the analysis cannot see libstdc++'s unannotated std::mutex.

#include <mutex>

#include "core/thread_annotations.hpp"

namespace vtensor {

class cond_var;

/// A std::mutex as a capability: same cost, same rules (not recursive, not fair). Also usable
/// with std::unique_lock and std::lock_guard, which the analysis does not follow.
class CAPABILITY("mutex") mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  /// Blocks until this thread holds the mutex.
  void lock() ACQUIRE() { mutex_.lock(); }
  /// Lets go of the mutex, which this thread holds.
  void unlock() RELEASE() { mutex_.unlock(); }
  /// Takes the mutex if free, without blocking; true when taken.
  [[nodiscard]] bool try_lock() TRY_ACQUIRE(true) { return mutex_.try_lock(); }
  /// Tells the analysis that this thread holds the mutex, where a caller took it out of its sight.
  /// Not checked at run time: std::mutex cannot tell who holds it.
  void assert_held() const ASSERT_CAPABILITY(this) {}

 private:
  friend class cond_var;  // waits on the std::mutex itself
  std::mutex mutex_;
};

/// Holds a vtensor::mutex for its lifetime (std::lock_guard, annotated).
class SCOPED_CAPABILITY mutex_lock {
 public:
  /// Takes `mu`.
  explicit mutex_lock(mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  /// Adopts `mu`, which this thread already holds.
  mutex_lock(mutex& mu, std::adopt_lock_t) REQUIRES(mu) : mu_(mu) {}
  ~mutex_lock() RELEASE() { mu_.unlock(); }
  mutex_lock(const mutex_lock&) = delete;
  mutex_lock& operator=(const mutex_lock&) = delete;

 private:
  mutex& mu_;
};

}  // namespace vtensor
