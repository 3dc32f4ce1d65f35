#pragma once
/// A condition variable waited on with a vtensor::mutex held (LevelDB's port::CondVar, told the
/// mutex at each wait so that the analysis checks the caller holds it). Waits are loops in the
/// caller (`while (!ready) cv.wait(mu);`), not predicate lambdas: the analysis checks a lambda's
/// body as a function of its own, holding nothing.

#include <condition_variable>
#include <mutex>

#include "core/mutex.hpp"
#include "core/thread_annotations.hpp"

namespace vtensor {

/// A std::condition_variable over vtensor::mutex.
class cond_var {
 public:
  cond_var() = default;
  cond_var(const cond_var&) = delete;
  cond_var& operator=(const cond_var&) = delete;

  /// Lets go of `mu` and blocks until notified (or woken spuriously); holds `mu` again on return.
  void wait(mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mutex_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's
  }
  /// Wakes one waiter.
  void notify_one() noexcept { cv_.notify_one(); }
  /// Wakes every waiter.
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace vtensor
