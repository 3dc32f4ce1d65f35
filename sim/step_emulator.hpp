#pragma once
/// Emulated step compute for replays over a real backend: after each step is built, the step
/// thread spends the step's modelled compute time (roofline + overhead, without the VMM part,
/// which the real calls already took) times a scale in wall time, so that the mapping worker
/// works while the "GPU computes", as it would in a serving engine. Sleeps, then spins for the
/// last stretch for precision. Idle gaps between arrivals are not emulated (the worker gets no
/// more time than the steps give it: conservative).

#include <cstdint>

#include "sim/replica.hpp"

namespace vtensor::sim {

/// The emulating observer. Add it to the replica (last, so the others see the step first).
class step_emulator final : public replica_observer {
 public:
  /// `scale` multiplies the modelled compute time (1: real time); must be positive.
  explicit step_emulator(double scale);
  void on_step(const step_record& s) override;
  /// Wall time spent emulating, nanoseconds.
  [[nodiscard]] std::uint64_t emulated_ns() const { return emulated_ns_; }

 private:
  double scale_;
  std::uint64_t emulated_ns_ = 0;
};

/// Spends `ns` nanoseconds of wall time (sleep, then spin); returns the time actually spent.
std::uint64_t spend_wall_ns(std::uint64_t ns);

}  // namespace vtensor::sim
