// The modelled clocks of a policy with a mapping worker (sim/worker_clock.hpp): the step thread's
// clock moves by its booked calls and its waits, the worker's by its jobs, and the figures a VMM
// split reports count them.

#include <doctest/doctest.h>

#include "sim/worker_clock.hpp"

using namespace vtensor;
using namespace vtensor::sim;

TEST_CASE("worker_clock: calls and waits move the step thread's clock, jobs the worker's") {
  worker_clock c;
  c.advance_to(sim_ns{1000});
  CHECK(c.now() == sim_ns{1000});
  c.book_calls(sim_ns{30});  // 30 ns of step-thread calls so far
  CHECK(c.now() == sim_ns{1030});
  c.book_calls(sim_ns{30});  // nothing new
  CHECK(c.now() == sim_ns{1030});
  // Two jobs: the second queues behind the first on the one worker.
  CHECK(c.run_job(sim_ns{1030}, sim_ns{100}) == sim_ns{1130});
  CHECK(c.run_job(sim_ns{1040}, sim_ns{50}) == sim_ns{1180});
  // A wait for a job already done costs nothing; one for a later job moves the clock to its end.
  c.wait(c.now(), sim_ns{1000});
  CHECK(c.waits == 0);
  c.wait(c.now(), sim_ns{1180});
  CHECK(c.now() == sim_ns{1180});
  CHECK(c.waits == 1);
  CHECK(c.wait_time == sim_ns{150});
  // A new simulated time: the clock restarts from it, keeping what the step thread spent.
  CHECK_FALSE(c.passes(sim_ns{1000}));
  REQUIRE(c.passes(sim_ns{5000}));
  c.advance_to(sim_ns{5000});
  CHECK(c.now() == sim_ns{5000});
  c.book_calls(sim_ns{40});
  CHECK(c.now() == sim_ns{5010});
  vmm_split_report r;
  c.report(r);
  CHECK(r.critical_model_ns == 30 + 150 + 10);
  CHECK(r.jobs == 2);
  CHECK(r.job_model_ns == 150);
  CHECK(r.modelled_waits == 1);
  CHECK(r.modelled_wait_ns == 150);
}
