#include "sim/accounting_backend.hpp"

#include <numeric>

#include "core/async_mapper.hpp"

namespace vtensor::sim {

std::uint64_t vmm_side::total_charged_ns() const {
  return std::accumulate(charged_ns.begin(), charged_ns.end(), std::uint64_t{0});
}

std::uint64_t vmm_side::total_model_ns() const {
  return std::accumulate(model_ns.begin(), model_ns.end(), std::uint64_t{0});
}

accounting_backend::accounting_backend(std::unique_ptr<vmm_backend> inner, latency_model model)
    : backend_adaptor(std::move(inner)), model_(std::move(model)), step_thread_(std::this_thread::get_id()) {}

vmm_side accounting_backend::worker_side() const {
  vmm_side w;
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    w.calls[k] = worker_calls_[k].load(std::memory_order_relaxed);
    w.charged_ns[k] = worker_charged_ns_[k].load(std::memory_order_relaxed);
    w.model_ns[k] = worker_model_ns_[k].load(std::memory_order_relaxed);
  }
  return w;
}

std::uint64_t accounting_backend::price_ns(vmm_call call, std::uint64_t chunks) const {
  return model_.cost_ns(call) * chunks;
}

template <typename F>
decltype(auto) accounting_backend::booked(vmm_call call, std::uint64_t chunks, F&& fn) {
  const std::uint64_t before = inner().counters().time_ns_of(call);
  struct book_guard {  // books also when the call throws
    accounting_backend& self;
    vmm_call call;
    std::uint64_t chunks;
    std::uint64_t before;
    ~book_guard() {
      self.book(call, 1, self.inner().counters().time_ns_of(call) - before, self.price_ns(call, chunks));
    }
  } guard{*this, call, chunks, before};
  return forward(call, std::forward<F>(fn));
}

void accounting_backend::book(vmm_call call, std::uint64_t calls, std::uint64_t charged, std::uint64_t price) {
  const auto k = static_cast<std::size_t>(call);
  if (!async_mapper::on_worker() && std::this_thread::get_id() == step_thread_) {
    step_.calls[k] += calls;
    step_.charged_ns[k] += charged;
    step_.model_ns[k] += price;
  } else {  // one writer at a time (the manager serialises backend calls): no read-modify-write
    const auto add = [](std::atomic<std::uint64_t>& a, std::uint64_t n) {
      a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    };
    add(worker_calls_[k], calls);
    add(worker_charged_ns_[k], charged);
    add(worker_model_ns_[k], price);
  }
}

template <typename F>
void accounting_backend::booked_mapping_calls(F&& fn) {
  const vmm_counters before = inner().counters();
  struct book_guard {  // books also when the call throws
    accounting_backend& self;
    const vmm_counters& before;
    ~book_guard() {
      const vmm_counters& after = self.inner().counters();
      for (const vmm_call call : {vmm_call::map, vmm_call::set_access, vmm_call::unmap}) {
        const std::uint64_t calls = after.calls_of(call) - before.calls_of(call);
        const std::uint64_t charged = after.time_ns_of(call) - before.time_ns_of(call);
        if (calls == 0) continue;
        self.book(call, calls, charged, self.price_ns(call, calls));
        self.charge(call, charged);
      }
    }
  } guard{*this, before};
  fn();
}

void accounting_backend::do_map_with_access(device_addr va, chunk_handle h) {
  // The public map_with_access counts the calls (Note [Counting in the base class]); the calls the
  // inner backend counted are booked here. Every mapping call covers one chunk.
  booked_mapping_calls([&] { inner().map_with_access(va, h); });
}

// A run, or a job's runs, is booked as the calls the inner backend counted for it (Note [Runs of
// maps] in backends/vmm_backend.cpp): the model prices each mapping call alike, so the prices add
// up.
void accounting_backend::do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles,
                                                std::size_t& mapped) {
  booked_mapping_calls([&] { inner().map_run_with_access(va, handles, mapped); });
}

void accounting_backend::do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  booked_mapping_calls([&] { inner().map_runs_with_access(maps, done); });
}

device_addr accounting_backend::do_reserve(std::uint64_t bytes) {
  return booked(vmm_call::reserve, 1, [&] { return inner().reserve(bytes); });
}

void accounting_backend::do_free_range(device_addr base) {
  booked(vmm_call::free_range, 1, [&] { inner().free_range(base); });
}

std::optional<chunk_handle> accounting_backend::do_create_chunk() {
  return booked(vmm_call::create, 1, [&] { return inner().create_chunk(); });
}

void accounting_backend::do_release_chunk(chunk_handle h) {
  booked(vmm_call::release, 1, [&] { inner().release_chunk(h); });
}

void accounting_backend::do_map(device_addr va, chunk_handle h) {
  booked(vmm_call::map, 1, [&] { inner().map(va, h); });
}

void accounting_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  booked(vmm_call::set_access, bytes / k_chunk_bytes, [&] { inner().set_access(va, bytes); });
}

void accounting_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  booked(vmm_call::unmap, bytes / k_chunk_bytes, [&] { inner().unmap(va, bytes); });
}

}  // namespace vtensor::sim
