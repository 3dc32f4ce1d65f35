#pragma once
/// The rest of the mapping worker's backend call in flight that a step-thread operation waits
/// for (Note [Driver contention] in sim/vtensor_policy.hpp), as a fraction of the call's mean
/// price. Shared by the policy's model and bench/contention_probe, which measures it.
///
/// Note [Rest of a call in flight]
/// An operation arriving at a random moment lands in a call with a probability proportional to
/// the call's length, so the rest it waits for is E[L^2] / (2 E[L]) = (mean / 2)(1 + CV^2), CV
/// the calls' coefficient of variation: half a call only when all calls are equally long. Measured
/// on the H200 (bench/contention_probe, 1,000 trials each, seeds 1 and 2,
/// results/gpu/2026-12-03-h200-issue11-model-v2/probe-1/): behind a map + set-access the step
/// thread waited 0.85-0.86 of the mean call (set-access has a long tail: p50 36 us, p99 629 us in
/// backends/calibration/h200.json), behind the unmap of a 32-chunk run 0.53-0.60 of the run (32
/// driver calls summed vary little; the excess over a half is the wake-up of the waiting thread).
/// Other devices are not measured: these factors are then an assumption.

namespace vtensor::sim {

inline constexpr double k_rest_of_map_call = 0.85;    ///< of a map + set-access (H200, measured)
inline constexpr double k_rest_of_unmap_call = 0.55;  ///< of one run's unmap (H200, measured)

}  // namespace vtensor::sim
