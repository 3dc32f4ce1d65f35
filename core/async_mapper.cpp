#include "core/async_mapper.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace vtensor {

// Note [One set-access per chunk]
// cuMemSetAccess may span many mappings, and costs per mapping whatever its span. On the GPU one
// call over a run of freshly mapped chunks measured dearer than one call per chunk, and a map +
// set-access per chunk cost no more than the raw driver loop (figures and their run: results/
// README.md, "Figures behind the notes of core/ and sim/"). So every chunk gets its set-access
// right after its map.
void run_mapping_job(vmm_backend& backend, const mapping_job& job) {
  const std::uint64_t chunk = backend.chunk_bytes();
  std::size_t done = 0;
  try {
    backend.map_runs_with_access(job.maps, done);
  } catch (...) {  // the failed call undid itself
    for (std::size_t i = 0; i < done; ++i) backend.unmap(job.maps[i].va, chunk);
    throw;
  }
}

async_mapper::async_mapper(vmm_backend& backend, mutex& backend_mutex, bool inline_jobs)
    : backend_(backend), backend_mutex_(backend_mutex), chunk_bytes_(backend.chunk_bytes()), inline_(inline_jobs) {
  if (!inline_) thread_ = std::thread([this] { run(); });
}

async_mapper::~async_mapper() {
  if (!thread_.joinable()) return;  // inline: every job ran in submit()
  {
    const mutex_lock lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

std::uint64_t async_mapper::submit(mapping_job job) {
  std::uint64_t ticket = 0;
  {
    const mutex_lock lock(mutex_);
    ticket = ++submitted_;
    if (!inline_) queue_.emplace_back(ticket, std::move(job));
  }
  if (inline_) {
    run_inline(ticket, job);
  } else {
    work_cv_.notify_one();
  }
  return ticket;
}

void async_mapper::run_inline(std::uint64_t ticket, const mapping_job& job) {
  std::vector<chunk_handle> created;
  std::uint64_t charged = 0;
  std::exception_ptr error;
  {
    const mutex_lock backend_lock(backend_mutex_);
    const std::uint64_t before = backend_.counters().total_time_ns();
    try {
      run_job(ticket, job, created, charged);
    } catch (...) {
      error = std::current_exception();
    }
    charged = backend_.counters().total_time_ns() - before;
  }
  complete(ticket, job, created, charged, error);
}

bool async_mapper::done(std::uint64_t ticket) const {
  const mutex_lock lock(mutex_);
  return completed_ >= ticket;
}

std::optional<std::size_t> async_mapper::idle_created() const {
  const mutex_lock lock(mutex_);
  if (completed_ < submitted_) return std::nullopt;
  return created_.size();
}

std::uint64_t async_mapper::last_ticket() const {
  const mutex_lock lock(mutex_);
  return submitted_;
}

void async_mapper::wait(std::uint64_t ticket, bool step_wait) {
  const mutex_lock lock(mutex_);
  if (completed_ < ticket) {
    // The worker cannot finish the job while the step thread holds the driver (Note [Driver
    // hand-over]): let go while blocked, take it back after.
    const bool held = step_holds_driver_.load(std::memory_order_acquire);
    if (held) release_driver();
    const auto t0 = std::chrono::steady_clock::now();
    while (completed_ < ticket) done_cv_.wait(mutex_);
    if (held) hold_driver();
    if (step_wait) {
      ++counters_.waits;
      counters_.wait_ns += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

std::vector<chunk_handle> async_mapper::take_created() {
  const mutex_lock lock(mutex_);
  return std::exchange(created_, {});
}

async_counters async_mapper::counters() const {
  const mutex_lock lock(mutex_);
  return counters_;
}

// Note [A map failing on the worker]
// The caller recorded a job's mappings when it submitted the job (Note [Deferred mappings]), so
// a map the driver refuses on the worker leaves bookkeeping that the driver does not back. The
// worker undoes the maps the job made, keeps the job (take_failed()) and remembers its pages. The
// step thread learns of it at its next wait for a job and retries the maps itself (a transient
// driver error then costs one retry); a retry that fails too rethrows there, and the pages stay
// remembered. A later unmap job skips remembered pages (the request was released before any
// retry): what was never mapped is not unmapped, and nothing leaks either way. A driver error in
// any other call of the worker (create, unmap, free) is kept and rethrown by the next wait().

// Note [Driver hand-over]
// The driver serialises VMM calls, and the core holds the backend lock around each one. A plain
// std::mutex is not fair: on the H200 the worker, taking the lock call after call in a tight
// loop, took it again before the waiting step thread woke, so a step-thread call waited 12-16 ms
// (hundreds of worker calls) instead of one call (results/gpu/2026-12-03-h200-issue11-contention).
// So the step thread takes the driver for a whole manager operation (hold_driver(), by
// vmm_gate::driver_scope in every manager call): the worker checks before each call and waits
// while the step thread holds it. A step-thread operation then waits at most for the one worker
// call in flight, and none of its later calls waits; the worker's next call waits for the whole
// operation. This is the form Note [Driver contention] in sim/vtensor_policy.hpp models. The
// step thread lets go while it waits for a worker job (wait()), or it would wait for ever.
template <class F>
void async_mapper::locked_call(std::uint64_t& charged, F&& f) {
  if (inline_) {  // run_inline holds the backend lock and measures the whole job
    backend_mutex_.assert_held();
    f(backend_);
    return;
  }
  step_holds_driver_.wait(true, std::memory_order_acquire);  // Note [Driver hand-over]
  const mutex_lock backend_lock(backend_mutex_);             // one driver call at a time (Note [Driver contention])
  const std::uint64_t before = backend_.counters().total_time_ns();
  f(backend_);
  charged += backend_.counters().total_time_ns() - before;
}

void async_mapper::unmap_skipping_failed(const unmap_entry& u, std::uint64_t& charged) {
  const std::uint64_t chunk = chunk_bytes_;
  std::vector<std::pair<device_addr, std::uint64_t>> runs;
  {
    const mutex_lock lock(mutex_);
    if (failed_vas_.empty()) {
      runs.emplace_back(u.va, u.bytes);
    } else {
      device_addr run_start = u.va;
      for (device_addr va = u.va; va < u.va + u.bytes; va += chunk) {
        const auto it = failed_vas_.find(va);
        if (it == failed_vas_.end()) continue;
        if (va > run_start) runs.emplace_back(run_start, va - run_start);
        run_start = va + chunk;
        for (failed_job& f : failed_) {
          if (f.ticket != it->second) continue;
          std::erase_if(f.job.maps, [va](const mapping_entry& m) { return m.va == va; });
        }
        failed_vas_.erase(it);
      }
      if (u.va + u.bytes > run_start) runs.emplace_back(run_start, u.va + u.bytes - run_start);
      std::erase_if(failed_, [](const failed_job& f) { return f.job.maps.empty(); });
    }
  }
  for (const auto& run : runs) locked_call(charged, [&](vmm_backend& b) { b.unmap(run.first, run.second); });
  const mutex_lock lock(mutex_);
  for (const auto& r : runs) counters_.unmapped_chunks += r.second / chunk;
}

// Note [Unmaps of an inline job]
// A release's job unmaps one run per tensor (32 for Llama-3-8B), and each run took the mapper's
// lock twice (the failed mappings it must skip, then the count of chunks unmapped) and a vector
// of runs: on a 5,000-request gen-trace replay the locks and vectors were 4% of the
// instructions (results/README.md, "Session 16"). An inline job runs alone (the step thread runs it, holding the
// backend lock), so when no mapping has failed it takes the lock once to see that, unmaps every run whole, and counts
// them once; a failed mapping sends every run the way of the worker's jobs.
void async_mapper::unmap_runs(const std::vector<unmap_entry>& unmaps, std::uint64_t& charged) {
  if (unmaps.empty()) return;
  bool any_failed = true;
  if (inline_) {
    const mutex_lock lock(mutex_);
    any_failed = !failed_vas_.empty();
  }
  if (any_failed) {
    for (const unmap_entry& u : unmaps) unmap_skipping_failed(u, charged);
    return;
  }
  const std::uint64_t chunk = chunk_bytes_;
  std::uint64_t chunks = 0;
  const auto count = [&] {
    const mutex_lock lock(mutex_);
    counters_.unmapped_chunks += chunks;
  };
  try {
    for (const unmap_entry& u : unmaps) {
      locked_call(charged, [&](vmm_backend& b) { b.unmap(u.va, u.bytes); });
      chunks += u.bytes / chunk;
    }
  } catch (...) {
    count();
    throw;
  }
  count();
}

void async_mapper::run_job(std::uint64_t ticket, const mapping_job& job, std::vector<chunk_handle>& created,
                           std::uint64_t& charged) {
  const std::uint64_t chunk = chunk_bytes_;
  std::size_t done = 0;
  try {
    if (inline_) {  // the backend lock is held: the job's runs at once (Note [Runs of maps])
      locked_call(charged, [&](vmm_backend& b) { b.map_runs_with_access(job.maps, done); });
    } else {  // one driver call per lock, so that the step thread's calls get in between
      for (; done < job.maps.size(); ++done) {
        locked_call(charged, [&](vmm_backend& b) { b.map_with_access(job.maps[done].va, job.maps[done].handle); });
      }
    }
  } catch (...) {  // the failed call undid itself; undo the others, keep the job for a retry
    for (std::size_t i = 0; i < done; ++i)
      locked_call(charged, [&](vmm_backend& b) { b.unmap(job.maps[i].va, chunk); });
    failed_job f{ticket, {}, std::current_exception()};
    f.job.maps = job.maps;
    const mutex_lock lock(mutex_);
    for (const mapping_entry& m : job.maps) failed_vas_[m.va] = ticket;
    failed_.push_back(std::move(f));
    ++counters_.failed_jobs;
  }
  for (std::uint32_t i = 0; i < job.create_chunks; ++i) {
    std::optional<chunk_handle> h;
    locked_call(charged, [&](vmm_backend& b) { h = b.create_chunk(); });
    if (!h) break;  // out of memory: creating ahead is best effort
    created.push_back(*h);
  }
  unmap_runs(job.unmaps, charged);
  for (device_addr base : job.free_ranges) locked_call(charged, [&](vmm_backend& b) { b.free_range(base); });
}

std::vector<failed_job> async_mapper::take_failed() {
  const mutex_lock lock(mutex_);
  failed_vas_.clear();
  return std::exchange(failed_, {});
}

void async_mapper::restore_failed(std::vector<failed_job> jobs) {
  const mutex_lock lock(mutex_);
  for (failed_job& f : jobs) {
    for (const mapping_entry& m : f.job.maps) failed_vas_[m.va] = f.ticket;
    failed_.push_back(std::move(f));
  }
}

std::vector<device_addr> async_mapper::forget_failed(device_addr lo, device_addr hi) {
  const mutex_lock lock(mutex_);
  std::vector<device_addr> out;
  if (failed_vas_.empty()) return out;
  for (auto it = failed_vas_.begin(); it != failed_vas_.end();) {
    if (it->first >= lo && it->first < hi) {
      out.push_back(it->first);
      it = failed_vas_.erase(it);
    } else {
      ++it;
    }
  }
  for (failed_job& f : failed_) {
    std::erase_if(f.job.maps, [&](const mapping_entry& m) { return m.va >= lo && m.va < hi; });
  }
  std::erase_if(failed_, [](const failed_job& f) { return f.job.maps.empty(); });
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t async_mapper::unmapped_failed() const {
  const mutex_lock lock(mutex_);
  return failed_vas_.size();
}

void async_mapper::run() {
  for (;;) {
    std::pair<std::uint64_t, mapping_job> item;
    {
      const mutex_lock lock(mutex_);
      while (!stop_ && queue_.empty()) work_cv_.wait(mutex_);
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const mapping_job& job = item.second;
    std::vector<chunk_handle> created;
    std::uint64_t charged = 0;
    std::exception_ptr error;
    try {
      run_job(item.first, job, created, charged);
    } catch (...) {
      error = std::current_exception();
    }
    complete(item.first, job, created, charged, error);
  }
}

void async_mapper::complete(std::uint64_t ticket, const mapping_job& job, std::vector<chunk_handle>& created,
                            std::uint64_t charged, std::exception_ptr error) {
  {
    const mutex_lock lock(mutex_);
    counters_.mapped_chunks += job.chunks();
    counters_.worker_vmm_ns += charged;
    created_.insert(created_.end(), created.begin(), created.end());
    if (error && !error_) error_ = error;
    completed_ = ticket;
  }
  if (!inline_) done_cv_.notify_all();
}

}  // namespace vtensor
