#include "sim/step_emulator.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

namespace vtensor::sim {

std::uint64_t spend_wall_ns(std::uint64_t ns) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto until = start + std::chrono::nanoseconds(ns);
  constexpr auto k_spin = std::chrono::microseconds(200);  // sleep's wake-up slack
  if (std::chrono::nanoseconds(ns) > k_spin) std::this_thread::sleep_until(until - k_spin);
  while (clock::now() < until) {
  }
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count());
}

step_emulator::step_emulator(double scale) : scale_(scale) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw std::invalid_argument(fmt::format("step time scale must be a positive number, not {}", scale));
  }
}

void step_emulator::on_step(const step_record& s) {
  const std::uint64_t vmm_us = std::chrono::ceil<sim_us>(s.vmm_critical).count();
  const std::uint64_t compute_us = s.duration_us > vmm_us ? s.duration_us - vmm_us : 0;
  const auto ns = static_cast<std::uint64_t>(std::llround(static_cast<double>(compute_us) * 1000.0 * scale_));
  emulated_ns_ += spend_wall_ns(ns);
}

}  // namespace vtensor::sim
