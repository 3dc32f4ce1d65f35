#include "backends/counting_backend.hpp"

#include <type_traits>

namespace vtensor {

counting_backend::counting_backend(std::unique_ptr<vmm_backend> inner) : backend_adaptor(std::move(inner)) {}

void counting_backend::enable_trace(std::size_t max_records) {
  tracing_ = true;
  max_records_ = max_records;
}

std::vector<trace_record> counting_backend::take_trace() {
  std::vector<trace_record> out;
  out.swap(trace_);
  return out;
}

void counting_backend::emit(const trace_record& record) {
  if (tracing_) {
    if (trace_.size() < max_records_) {
      trace_.push_back(record);
    } else {
      ++dropped_;
    }
  }
  if (sink_) {
    sink_(record);
  }
}

template <typename F>
decltype(auto) counting_backend::traced(trace_record record, F&& fn) {
  if (!tracing_ && !sink_) {
    return forward(record.call, std::forward<F>(fn));
  }
  const std::uint64_t before = inner().counters().time_ns_of(record.call);
  const auto finish = [&] { record.charged_ns = inner().counters().time_ns_of(record.call) - before; };
  try {
    using result_type = decltype(forward(record.call, std::forward<F>(fn)));
    if constexpr (std::is_void_v<result_type>) {
      forward(record.call, std::forward<F>(fn));
      finish();
      emit(record);
    } else {
      result_type result = forward(record.call, std::forward<F>(fn));
      if constexpr (std::is_same_v<result_type, device_addr>) {
        record.va = result;
      } else {
        if (result) {
          record.handle = *result;
        } else {
          record.result = call_result::out_of_memory;
        }
      }
      finish();
      emit(record);
      return result;
    }
  } catch (...) {
    record.result = call_result::error;
    finish();
    emit(record);
    throw;
  }
}

device_addr counting_backend::do_reserve(std::uint64_t bytes) {
  return traced({.call = vmm_call::reserve, .bytes = bytes}, [&] { return inner().reserve(bytes); });
}

void counting_backend::do_free_range(device_addr base) {
  traced({.call = vmm_call::free_range, .va = base}, [&] { inner().free_range(base); });
}

std::optional<chunk_handle> counting_backend::do_create_chunk() {
  return traced({.call = vmm_call::create}, [&] { return inner().create_chunk(); });
}

void counting_backend::do_release_chunk(chunk_handle h) {
  traced({.call = vmm_call::release, .handle = h}, [&] { inner().release_chunk(h); });
}

void counting_backend::do_map(device_addr va, chunk_handle h) {
  traced({.call = vmm_call::map, .va = va, .bytes = chunk_bytes(), .handle = h}, [&] { inner().map(va, h); });
}

void counting_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  traced({.call = vmm_call::set_access, .va = va, .bytes = bytes}, [&] { inner().set_access(va, bytes); });
}

void counting_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  traced({.call = vmm_call::unmap, .va = va, .bytes = bytes}, [&] { inner().unmap(va, bytes); });
}

}  // namespace vtensor
