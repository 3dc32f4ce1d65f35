#pragma once
/// The rest of the mapping worker's backend call in flight that a step-thread operation waits
/// for (Note [Driver contention] in sim/vtensor_policy.hpp), as a fraction of the call's mean
/// price. Shared by the policy's model and bench/contention_probe, which measures it.
///
/// Note [Rest of a call in flight]
/// An operation arriving at a random moment lands in a call with a probability proportional to
/// the call's length, so the rest it waits for is E[L^2] / (2 E[L]) = (mean / 2)(1 + CV^2), CV
/// the calls' coefficient of variation: half a call only when all calls are equally long.
/// Measured on the H200 with bench/contention_probe (1,000 trials a run; the mean call is the
/// worker's charged driver time per backend call; results/gpu/2026-12-03-h200-issue11-model-v2/
/// probe-2/): behind jobs of 16 and 64 map + set-access calls the step thread waited 0.93, 0.98
/// and 1.12 of the mean call per wait (set-access has a long tail: p50 36 us, p99 629 us in
/// backends/calibration/h200.json, so CV is near 1), behind the unmap of a 32- or 128-chunk run in
/// one backend call 0.50-0.60 of the run (32 driver calls summed vary little: a half, and the
/// wake-up of the waiting thread). The factors below are those measurements, rounded; the check
/// against fresh seeds is probe-3/ beside it. Other devices are not measured: there the factors
/// are an assumption.

namespace vtensor::sim {

inline constexpr double k_rest_of_map_call = 1.0;     ///< of a map + set-access (H200, measured)
inline constexpr double k_rest_of_unmap_call = 0.55;  ///< of one run's unmap (H200, measured)

}  // namespace vtensor::sim
