#include "sim/accounting_backend.hpp"

#include <numeric>

namespace vtensor::sim {

std::uint64_t vmm_side::total_charged_ns() const {
  return std::accumulate(charged_ns.begin(), charged_ns.end(), std::uint64_t{0});
}

std::uint64_t vmm_side::total_model_ns() const {
  return std::accumulate(model_ns.begin(), model_ns.end(), std::uint64_t{0});
}

/// The worker's view (Note [Whose call is it]): forwards each call to the adaptor, which runs it
/// on the inner backend, books it to the worker side and charges it here.
class accounting_backend::worker_backend final : public vmm_backend {
 public:
  explicit worker_backend(accounting_backend& owner) : owner_(owner) {}
  /// Adds `ns` to the time this view charged for `call` (the adaptor runs the calls).
  void add_charge(vmm_call call, std::uint64_t ns) { charge(call, ns); }

 private:
  [[nodiscard]] std::string do_name() const override { return owner_.name() + "/worker"; }
  [[nodiscard]] std::uint64_t do_granularity_bytes() const override { return owner_.granularity_bytes(); }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return owner_.capacity_bytes(); }
  [[nodiscard]] vmm_live do_live() const override { return owner_.live(); }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override {
    return owner_.reserve_as(vmm_caller::worker, bytes);
  }
  void do_free_range(device_addr base) override { owner_.free_range_as(vmm_caller::worker, base); }
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override {
    return owner_.create_chunk_as(vmm_caller::worker);
  }
  void do_release_chunk(chunk_handle h) override { owner_.release_chunk_as(vmm_caller::worker, h); }
  void do_map(device_addr va, chunk_handle h) override { owner_.map_as(vmm_caller::worker, va, h); }
  void do_set_access(device_addr va, std::uint64_t bytes) override {
    owner_.set_access_as(vmm_caller::worker, va, bytes);
  }
  void do_unmap(device_addr va, std::uint64_t bytes) override { owner_.unmap_as(vmm_caller::worker, va, bytes); }
  void do_map_with_access(device_addr va, chunk_handle h) override {
    owner_.map_with_access_as(vmm_caller::worker, va, h);
  }
  void do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) override {
    owner_.map_run_with_access_as(vmm_caller::worker, va, handles, mapped);
  }
  void do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) override {
    owner_.map_runs_with_access_as(vmm_caller::worker, maps, done);
  }

  accounting_backend& owner_;
};

accounting_backend::accounting_backend(std::unique_ptr<vmm_backend> inner, latency_model model)
    : backend_adaptor(std::move(inner)),
      model_(std::move(model)),
      worker_view_(std::make_unique<worker_backend>(*this)) {}

accounting_backend::~accounting_backend() = default;

vmm_backend& accounting_backend::worker_view() { return *worker_view_; }

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

void accounting_backend::charge_side(vmm_caller side, vmm_call call, std::uint64_t ns) {
  if (side == vmm_caller::step) {
    charge(call, ns);
  } else {
    worker_view_->add_charge(call, ns);
  }
}

template <typename F>
decltype(auto) accounting_backend::booked(vmm_caller side, vmm_call call, std::uint64_t chunks, F&& fn) {
  struct book_guard {  // books and charges also when the call throws
    accounting_backend& self;
    vmm_caller side;
    vmm_call call;
    std::uint64_t chunks;
    std::uint64_t before;
    ~book_guard() {
      const std::uint64_t charged = self.inner().counters().time_ns_of(call) - before;
      self.book(side, call, 1, charged, self.price_ns(call, chunks));
      self.charge_side(side, call, charged);
    }
  } guard{*this, side, call, chunks, inner().counters().time_ns_of(call)};
  return std::forward<F>(fn)();
}

void accounting_backend::book(vmm_caller side, vmm_call call, std::uint64_t calls, std::uint64_t charged,
                              std::uint64_t price) {
  const auto k = static_cast<std::size_t>(call);
  if (side == vmm_caller::step) {
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
void accounting_backend::booked_mapping_calls(vmm_caller side, F&& fn) {
  const vmm_counters before = inner().counters();
  struct book_guard {  // books also when the call throws
    accounting_backend& self;
    vmm_caller side;
    const vmm_counters& before;
    ~book_guard() {
      const vmm_counters& after = self.inner().counters();
      for (const vmm_call call : {vmm_call::map, vmm_call::set_access, vmm_call::unmap}) {
        const std::uint64_t calls = after.calls_of(call) - before.calls_of(call);
        const std::uint64_t charged = after.time_ns_of(call) - before.time_ns_of(call);
        if (calls == 0) continue;
        self.book(side, call, calls, charged, self.price_ns(call, calls));
        self.charge_side(side, call, charged);
      }
    }
  } guard{*this, side, before};
  std::forward<F>(fn)();
}

// The public map_with_access counts the calls (Note [Counting in the base class]); the calls the
// inner backend counted are booked here. Every mapping call covers one chunk.
void accounting_backend::map_with_access_as(vmm_caller side, device_addr va, chunk_handle h) {
  booked_mapping_calls(side, [&] { inner().map_with_access(va, h); });
}

// A run, or a job's runs, is booked as the calls the inner backend counted for it (Note [Runs of
// maps] in backends/vmm_backend.cpp): the model prices each mapping call alike, so the prices add
// up.
void accounting_backend::map_run_with_access_as(vmm_caller side, device_addr va, std::span<const chunk_handle> handles,
                                                std::size_t& mapped) {
  booked_mapping_calls(side, [&] { inner().map_run_with_access(va, handles, mapped); });
}

void accounting_backend::map_runs_with_access_as(vmm_caller side, std::span<const mapping_entry> maps,
                                                 std::size_t& done) {
  booked_mapping_calls(side, [&] { inner().map_runs_with_access(maps, done); });
}

device_addr accounting_backend::reserve_as(vmm_caller side, std::uint64_t bytes) {
  return booked(side, vmm_call::reserve, 1, [&] { return inner().reserve(bytes); });
}

void accounting_backend::free_range_as(vmm_caller side, device_addr base) {
  booked(side, vmm_call::free_range, 1, [&] { inner().free_range(base); });
}

std::optional<chunk_handle> accounting_backend::create_chunk_as(vmm_caller side) {
  return booked(side, vmm_call::create, 1, [&] { return inner().create_chunk(); });
}

void accounting_backend::release_chunk_as(vmm_caller side, chunk_handle h) {
  booked(side, vmm_call::release, 1, [&] { inner().release_chunk(h); });
}

void accounting_backend::map_as(vmm_caller side, device_addr va, chunk_handle h) {
  booked(side, vmm_call::map, 1, [&] { inner().map(va, h); });
}

void accounting_backend::set_access_as(vmm_caller side, device_addr va, std::uint64_t bytes) {
  booked(side, vmm_call::set_access, bytes / k_chunk_bytes, [&] { inner().set_access(va, bytes); });
}

void accounting_backend::unmap_as(vmm_caller side, device_addr va, std::uint64_t bytes) {
  booked(side, vmm_call::unmap, bytes / k_chunk_bytes, [&] { inner().unmap(va, bytes); });
}

// The step view's hooks: every call made on the adaptor is the step's (Note [Whose call is it]).
device_addr accounting_backend::do_reserve(std::uint64_t bytes) { return reserve_as(vmm_caller::step, bytes); }
void accounting_backend::do_free_range(device_addr base) { free_range_as(vmm_caller::step, base); }
std::optional<chunk_handle> accounting_backend::do_create_chunk() { return create_chunk_as(vmm_caller::step); }
void accounting_backend::do_release_chunk(chunk_handle h) { release_chunk_as(vmm_caller::step, h); }
void accounting_backend::do_map(device_addr va, chunk_handle h) { map_as(vmm_caller::step, va, h); }
void accounting_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  set_access_as(vmm_caller::step, va, bytes);
}
void accounting_backend::do_unmap(device_addr va, std::uint64_t bytes) { unmap_as(vmm_caller::step, va, bytes); }
void accounting_backend::do_map_with_access(device_addr va, chunk_handle h) {
  map_with_access_as(vmm_caller::step, va, h);
}
void accounting_backend::do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles,
                                                std::size_t& mapped) {
  map_run_with_access_as(vmm_caller::step, va, handles, mapped);
}
void accounting_backend::do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  map_runs_with_access_as(vmm_caller::step, maps, done);
}

}  // namespace vtensor::sim
