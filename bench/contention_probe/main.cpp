// vtensor_contention_probe: checks the form of Note [Driver contention] (sim/vtensor_policy.hpp)
// on a device, with many events where a replay sees a handful.
//
// The model says: a step-thread operation that finds the mapping worker busy waits once, for the
// rest of the worker's backend call in flight, booked as half a call (the call met at a uniformly
// random point), capped by the worker's remaining work; the call is one map + set-access of a
// chunk, or, for a release's unmaps, one backend unmap of a whole run. This probe drives the
// production path (core/async_mapper: the worker's locked calls, hold_driver, and the step
// thread's timed lock of vmm_gate::vmm) over a backend, and for each trial:
//   1. hands the worker a job: `--map-chunks` maps with access (a "map" trial) or the unmap of a
//      run of `--unmap-chunks` chunks in one backend call (an "unmap" trial);
//   2. waits a delay drawn uniformly from [0, the job's duration measured alone);
//   3. makes one step-thread VMM call the way vmm_gate::vmm() does (holding the driver, timing
//      a lock found taken), and records whether the job was still running and how long it waited.
// The model's booking for the same trial is min(rest of a call, the job's remaining time) when the
// job was not done, the rest being the model's fraction of the mean call (sim/contention_model.hpp)
// and the mean call the worker's own backend time over the warm-up jobs divided by their backend
// calls (the chunks of a map job, one for an unmap run). The probe prints both sums, and the
// measured rest per wait as a fraction of the mean call: what the model's fraction is set from.
// Usage: vtensor_contention_probe [--backend cuda] [--device N] [--trials N] [--seed S] [--json F|-]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "backends/registry.hpp"
#include "core/async_mapper.hpp"
#include "core/mutex.hpp"
#include "sim/contention_model.hpp"
#include "traces/atomic_output_file.hpp"

namespace po = boost::program_options;
using namespace vtensor;
using steady = std::chrono::steady_clock;

namespace {

constexpr int k_usage = 2;

double ns_since(steady::time_point t) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t).count());
}

struct kind_result {
  std::string kind;
  std::uint64_t calls_per_job = 0;
  double job_ns = 0;   // the job alone, wall time from submission (median of the warm-up)
  double call_ns = 0;  // the worker's mean backend call (its charged time over the warm-up's calls)
  double rest = 0;     // the model's fraction of a call
  std::uint64_t trials = 0, busy = 0, waits = 0;
  double measured_ns = 0;  // sum of the step thread's lock waits
  double modelled_ns = 0;  // sum of the model's bookings for the busy trials
};

class probe {
 public:
  probe(vmm_backend& b, std::uint32_t map_chunks, std::uint32_t unmap_chunks)
      : b_(b), mapper_(b, mutex_), map_chunks_(map_chunks), unmap_chunks_(unmap_chunks) {
    const std::uint32_t n = std::max(map_chunks, unmap_chunks);
    range_ = b_.reserve(std::uint64_t{n} * b_.chunk_bytes());
    spare_range_ = b_.reserve(b_.chunk_bytes());
    for (std::uint32_t i = 0; i < n + 1; ++i) {
      const auto h = b_.create_chunk();
      if (!h) throw std::runtime_error("contention probe: the device refused a chunk (out of memory?)");
      chunks_.push_back(*h);
    }
  }
  probe(const probe&) = delete;
  probe& operator=(const probe&) = delete;
  [[nodiscard]] double worker_ns() const { return static_cast<double>(mapper_.counters().worker_vmm_ns); }
  ~probe() {
    try {
      mapper_.drain();
      for (chunk_handle h : chunks_) b_.release_chunk(h);
      b_.free_range(spare_range_);
      b_.free_range(range_);
    } catch (const std::exception& e) {
      std::cerr << "contention probe: cleanup failed: " << e.what() << "\n";
    }
  }

  // One trial; `delay_ns` < 0: the job alone (no step-thread call), returning its duration.
  double trial(bool unmap, double delay_ns, kind_result& r) {
    const std::uint64_t chunk = b_.chunk_bytes();
    mapping_job job;
    if (unmap) {
      {
        std::lock_guard lock(mutex_);
        for (std::uint32_t i = 0; i < unmap_chunks_; ++i) b_.map_with_access(range_ + i * chunk, chunks_[i]);
      }
      job.unmaps.push_back({range_, std::uint64_t{unmap_chunks_} * chunk});
    } else {
      for (std::uint32_t i = 0; i < map_chunks_; ++i) job.maps.push_back({range_ + i * chunk, chunks_[i]});
    }
    const steady::time_point t0 = steady::now();
    const std::uint64_t ticket = mapper_.submit(std::move(job));
    if (delay_ns < 0) {
      mapper_.wait(ticket, false);
      const double took = ns_since(t0);
      if (!unmap) unmap_all(map_chunks_);
      return took;
    }
    while (ns_since(t0) < delay_ns) {
    }
    // The step thread's operation, as vmm_gate::driver_scope + vmm_gate::vmm() make it.
    mapper_.hold_driver();
    const double at = ns_since(t0);
    const bool busy = !mapper_.done(ticket);
    double waited = 0;
    {
      std::unique_lock lock(mutex_, std::try_to_lock);
      if (!lock.owns_lock()) {
        const steady::time_point w = steady::now();
        lock.lock();
        waited = ns_since(w);
        ++r.waits;
      }
      b_.map_with_access(spare_range_, chunks_.back());
      b_.unmap(spare_range_, chunk);
    }
    mapper_.release_driver();
    mapper_.wait(ticket, false);
    if (!unmap) unmap_all(map_chunks_);
    ++r.trials;
    r.measured_ns += waited;
    if (busy) {
      ++r.busy;
      r.modelled_ns += std::min(r.rest * r.call_ns, std::max(0.0, r.job_ns - at));
    }
    return 0;
  }

 private:
  void unmap_all(std::uint32_t n) {
    std::lock_guard lock(mutex_);
    b_.unmap(range_, std::uint64_t{n} * b_.chunk_bytes());
  }

  vmm_backend& b_;
  vtensor::mutex mutex_;
  async_mapper mapper_;  // after mutex_, before the chunks: drained first
  std::uint32_t map_chunks_, unmap_chunks_;
  device_addr range_ = 0, spare_range_ = 0;
  std::vector<chunk_handle> chunks_;
};

kind_result run_kind(probe& p, bool unmap, std::uint32_t chunks, int trials, std::mt19937_64& rng) {
  kind_result r;
  r.kind = unmap ? "unmap" : "map";
  r.calls_per_job = unmap ? 1 : chunks;
  r.rest = unmap ? sim::k_rest_of_unmap_call : sim::k_rest_of_map_call;
  constexpr int k_warm_up = 15;
  std::vector<double> alone;
  const double worker_before = p.worker_ns();
  for (int i = 0; i < k_warm_up; ++i) alone.push_back(p.trial(unmap, -1, r));
  r.call_ns = (p.worker_ns() - worker_before) / (k_warm_up * static_cast<double>(r.calls_per_job));
  std::sort(alone.begin(), alone.end());
  r.job_ns = alone[alone.size() / 2];
  std::uniform_real_distribution<double> delay(0, r.job_ns);
  for (int i = 0; i < trials; ++i) p.trial(unmap, delay(rng), r);
  return r;
}

nlohmann::ordered_json to_json(const kind_result& r) {
  nlohmann::ordered_json j;
  j["kind"] = r.kind;
  j["backend_calls_per_job"] = r.calls_per_job;
  j["job_us"] = r.job_ns / 1e3;
  j["mean_call_us"] = r.call_ns / 1e3;
  j["model_rest_of_call"] = r.rest;
  j["trials"] = r.trials;
  j["busy_trials"] = r.busy;
  j["measured_waits"] = r.waits;
  j["measured_wait_us"] = r.measured_ns / 1e3;
  j["modelled_bookings"] = r.busy;
  j["modelled_us"] = r.modelled_ns / 1e3;
  j["modelled_over_measured"] = r.measured_ns > 0 ? r.modelled_ns / r.measured_ns : 0.0;
  j["measured_rest_of_call"] = r.waits > 0 ? r.measured_ns / static_cast<double>(r.waits) / r.call_ns : 0.0;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options("vtensor_contention_probe options");
  options.add_options()("help,h", "print this help")("backend", po::value<std::string>()->default_value("cuda"),
                                                     "backend to probe (cuda; sim runs the same code with no "
                                                     "wall-clock cost, a smoke test)")(
      "device", po::value<int>()->default_value(0), "GPU index (cuda)")("trials", po::value<int>()->default_value(400),
                                                                        "trials per kind (map, unmap)")(
      "map-chunks", po::value<std::uint32_t>()->default_value(16), "chunks a map job maps")(
      "unmap-chunks", po::value<std::uint32_t>()->default_value(32), "chunks of the run an unmap job unmaps")(
      "seed", po::value<std::uint64_t>()->default_value(1), "seed of the delays")(
      "json", po::value<std::string>(), "also write the figures as JSON to this file (- : standard output)");
  po::variables_map v;
  try {
    po::store(po::parse_command_line(argc, argv, options), v);
    po::notify(v);
    if (v.count("help")) {
      std::cout << "usage: vtensor_contention_probe [options]\n\n" << options;
      return 0;
    }
    if (v["trials"].as<int>() < 1) throw po::error("--trials must be at least 1");
    for (const char* k : {"map-chunks", "unmap-chunks"}) {
      const auto n = v[k].as<std::uint32_t>();
      if (n < 1 || n > 4096) throw po::error(fmt::format("--{} must be between 1 and 4096", k));
    }
  } catch (const po::error& e) {
    std::cerr << "vtensor_contention_probe: " << e.what() << "\n";
    return k_usage;
  }
  try {
    backend_config config;
    config.device_index = v["device"].as<int>();
    auto backend = make_backend(v["backend"].as<std::string>(), config);
    std::mt19937_64 rng(v["seed"].as<std::uint64_t>());
    const auto map_chunks = v["map-chunks"].as<std::uint32_t>();
    const auto unmap_chunks = v["unmap-chunks"].as<std::uint32_t>();
    const int trials = v["trials"].as<int>();
    std::vector<kind_result> results;
    {
      probe p(*backend, map_chunks, unmap_chunks);
      results.push_back(run_kind(p, false, map_chunks, trials, rng));
      results.push_back(run_kind(p, true, unmap_chunks, trials, rng));
    }
    nlohmann::ordered_json out;
    out["backend"] = backend->name();
    out["seed"] = v["seed"].as<std::uint64_t>();
    for (const kind_result& r : results) {
      out["kinds"].push_back(to_json(r));
      std::cout << fmt::format(
          "{:>5}: job {:.1f} us alone ({} backend calls of {:.1f} us); {} trials, {} with the job still running; "
          "measured {} waits, {:.1f} us ({:.3f} of a call each); modelled {} bookings ({:.2f} of a call), {:.1f} us "
          "(model / measured {:.3f})\n",
          r.kind, r.job_ns / 1e3, r.calls_per_job, r.call_ns / 1e3, r.trials, r.busy, r.waits, r.measured_ns / 1e3,
          r.waits > 0 ? r.measured_ns / static_cast<double>(r.waits) / r.call_ns : 0.0, r.busy, r.rest,
          r.modelled_ns / 1e3, r.measured_ns > 0 ? r.modelled_ns / r.measured_ns : 0.0);
    }
    if (v.count("json")) {
      traces::atomic_output_file f(v["json"].as<std::string>());
      f.write(out.dump(2) + "\n");
      f.commit();
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "vtensor_contention_probe: " << e.what() << "\n";
    return 1;
  }
}
