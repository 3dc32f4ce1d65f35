// The same manager scenarios over every backend this build registers: on the simulated device
// everywhere, and on the real driver where a GPU is present (skipped, with a message, elsewhere).

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "backends/registry.hpp"
#include "core/manager.hpp"
#include "tests/core/manager_test_support.hpp"
#include "tests/support/backend_choice.hpp"

using namespace vtensor;
using namespace vtensor::core_testing;

namespace {

// Runs `body` over the GPU backends (`cuda`) when `gpu`, else over the others
// (tests/support/backend_choice.hpp), and checks the device is empty afterwards.
template <class F>
void on_every_backend(bool gpu, std::uint64_t capacity_bytes, F&& body) {
  for (const std::string& name : vtensor::testing::backends_for(gpu)) {
    INFO("backend: " << name);
    backend_config config;
    config.capacity_bytes = capacity_bytes;
    const std::unique_ptr<vmm_backend> backend = vtensor::testing::make_backend_or_skip(name, config);
    if (!backend) return;
    body(*backend);
    const vmm_live live = backend->live();
    CHECK(live.chunks == 0);
    CHECK(live.ranges == 0);
    CHECK(live.mappings == 0);
  }
}

}  // namespace

void conversation_fork_full_shutdown(bool gpu) {
  const std::uint64_t page_bytes = 32 * k_chunk_bytes;  // kv-fused Llama-3-8B
  on_every_backend(gpu, 12 * page_bytes, [&](vmm_backend& b) {
    manager m(b, llama_config(kv_layout::kv_fused, 1));
    REQUIRE(m.create(request_id{1}, run_of_blocks(0, 4), 2100).ok());
    REQUIRE(m.extend(request_id{1}, 700).ok());
    m.finish(request_id{1});
    m.check_invariants();
    auto r2 = m.create(request_id{2}, run_of_blocks(0, 4) + run_of_blocks(10, 1), 2600);
    REQUIRE(r2.ok());
    CHECK(r2.hit_tokens == 2048);
    auto f = m.fork(request_id{2}, request_id{3});
    REQUIRE(f.ok());
    CHECK(f.shared_pages == 5);
    m.check_invariants();
    // Fill the device (the cached prefix is pinned by requests 2 and 3): the caller is told to preempt.
    create_result big{};
    std::uint64_t id = 10;
    while ((big = m.create(request_id{id}, {}, 2 * 512)).ok()) ++id;
    CHECK(big.status == alloc_status::needs_preemption);
    CHECK(m.stats().memory.physical_bytes <= 12 * page_bytes);
    m.check_invariants();
    m.preempt(request_id{2});
    m.preempt(request_id{3});
    CHECK(m.create(request_id{id}, {}, 2 * 512).ok());
    m.check_invariants();
    const auto s = m.stats();
    CHECK(s.preemption_signals >= 1);
    MESSAGE(b.name() << ": VMM time " << s.vmm.total_time_ns() / 1000 << " us over " << s.vmm.total_calls()
                     << " calls");
    m.shutdown();
  });
}

TEST_CASE("manager on every backend: conversation, fork, eviction, preemption, shutdown") {
  conversation_fork_full_shutdown(false);
}

TEST_CASE("manager on cuda: conversation, fork, eviction, preemption, shutdown" * doctest::test_suite("gpu")) {
  conversation_fork_full_shutdown(true);
}
