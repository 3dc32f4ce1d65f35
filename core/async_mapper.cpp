#include "core/async_mapper.hpp"

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
    for (; done < job.maps.size(); ++done) backend.map_with_access(job.maps[done].va, job.maps[done].handle);
  } catch (...) {  // the failed call undid itself
    for (std::size_t i = 0; i < done; ++i) backend.unmap(job.maps[i].va, chunk);
    throw;
  }
}

async_mapper::async_mapper(vmm_backend& backend, std::mutex& backend_mutex)
    : backend_(backend), backend_mutex_(backend_mutex), thread_([this] { run(); }) {}

async_mapper::~async_mapper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

std::uint64_t async_mapper::submit(mapping_job job) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    ticket = ++submitted_;
    queue_.emplace_back(ticket, std::move(job));
  }
  work_cv_.notify_one();
  return ticket;
}

bool async_mapper::done(std::uint64_t ticket) const {
  std::lock_guard lock(mutex_);
  return completed_ >= ticket;
}

std::optional<std::size_t> async_mapper::idle_created() const {
  std::lock_guard lock(mutex_);
  if (completed_ < submitted_) return std::nullopt;
  return created_.size();
}

std::uint64_t async_mapper::last_ticket() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

void async_mapper::wait(std::uint64_t ticket, bool step_wait) {
  std::unique_lock lock(mutex_);
  if (completed_ < ticket) {
    const auto t0 = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return completed_ >= ticket; });
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
  std::lock_guard lock(mutex_);
  return std::exchange(created_, {});
}

async_counters async_mapper::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void async_mapper::run() {
  for (;;) {
    std::pair<std::uint64_t, mapping_job> item;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const mapping_job& job = item.second;
    std::vector<chunk_handle> created;
    std::uint64_t charged = 0;
    std::exception_ptr error;
    try {
      std::lock_guard backend_lock(backend_mutex_);
      const std::uint64_t before = backend_.counters().total_time_ns();
      run_mapping_job(backend_, job);
      for (std::uint32_t i = 0; i < job.create_chunks; ++i) {
        auto h = backend_.create_chunk();
        if (!h) break;  // out of memory: creating ahead is best effort
        created.push_back(*h);
      }
      charged = backend_.counters().total_time_ns() - before;
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      counters_.mapped_chunks += job.chunks();
      counters_.worker_vmm_ns += charged;
      created_.insert(created_.end(), created.begin(), created.end());
      if (error && !error_) error_ = error;
      completed_ = item.first;
    }
    done_cv_.notify_all();
  }
}

}  // namespace vtensor
