#pragma once
/// Routers: where a cluster of replicas sends each arriving request (Note [Routers]). A router is
/// a small class behind one interface, chosen by name from the registry below, as policies are.
///
/// Note [Routers]
/// Each arrival is placed on one replica when it arrives, by what the router reads at that
/// instant (Note [Replica load] in sim/replica.cpp), and never moves. Five routers, after the
/// serving systems users run:
/// - `round-robin`: replicas in turn (vLLM's and most load balancers' default);
/// - `least-loaded`: the fewest tokens queued and running (replica_load::tokens()), the lowest
///   index on a tie (llm-d's load-aware scorer reads queue depth and KV use the same way);
/// - `session`: a session's later turns go where its first went; a first turn goes to the least
///   loaded (sticky sessions at a load balancer). Traces without session ids (Mooncake, Azure)
///   give every request its own session, so there it routes as least-loaded;
/// - `prefix-approx`: SGLang's cache-aware router. It keeps its own tree of the prompts it sent
///   to each replica (not what the replica holds), each replica's bounded by
///   `tree_tokens` with least-recently-used blocks dropped first; when the load is unbalanced
///   (the most loaded replica has more than `balance_abs` requests above the least and more
///   than `balance_rel` times it) it sends to the least loaded ("balance"); otherwise to the
///   replica whose tree matches the longest prefix when that covers more than
///   `cache_threshold` of the prompt ("prefix-match"), else to the replica with the smallest
///   tree ("smallest-tree"). Defaults are sgl-router's as its start-up line prints them in 2026
///   (cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5); its load is the
///   requests a worker has in flight, here the replica's waiting and running requests;
/// - `prefix-precise`: reads each replica's actual cache (kv_policy::cached_tokens()), as llm-d's
///   precise prefix-cache scorer and NVIDIA Dynamo's KV router do from the engines' KV events,
///   and picks the least cost = prefill ahead (queued and unfinished prefill tokens, plus this
///   prompt's tokens the replica does not hold) + `decode_weight` x decode load (the running
///   requests' context tokens), Dynamo's cost with its overlap weight on the other term. With
///   `temperature` 0 the cheapest replica (lowest index on a tie); above 0 a replica is drawn
///   with probability proportional to exp(-cost / (temperature x the largest cost)), from a
///   generator seeded by the replay's seed (Dynamo's softmax sampling). Its reasons: the replica
///   holding the longest cached prefix ("longest-prefix"), one holding less because the load
///   outweighed it ("load"), or no replica holding any of the prompt ("no-hit").
/// Every router is deterministic given the trace and the seed. The decisions are counted by
/// reason (route_choice::reason) in the cluster's summary.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ids.hpp"
#include "sim/replica.hpp"
#include "traces/trace_request.hpp"

namespace vtensor::sim {

/// What a router reads of the cluster when it places a request.
class cluster_view {
 public:
  virtual ~cluster_view() = default;
  /// Number of replicas (at least 1).
  [[nodiscard]] virtual std::size_t replicas() const = 0;
  /// Replica `i`'s load now.
  [[nodiscard]] virtual replica_load load(std::size_t i) const = 0;
  /// Leading prompt tokens of the request being routed that replica `i`'s cache holds now
  /// (kv_policy::cached_tokens(); 0 for a policy without a prefix cache).
  [[nodiscard]] virtual std::uint64_t cached_tokens(std::size_t i) const = 0;
};

/// A request to place: the trace's request, and its prompt's blocks as a replica keys them.
struct routed_request {
  const traces::trace_request& trace;
  std::span<const token_block> blocks;
};

/// Where a request goes, and why (one of the router's reasons()).
struct route_choice {
  std::uint32_t replica = 0;
  std::string_view reason;
};

/// The routers' settings (Note [Routers]); each router reads its own.
struct router_options {
  double cache_threshold = 0.3;    ///< prefix-approx: share of the prompt a match must exceed
  std::uint32_t balance_abs = 64;  ///< prefix-approx: requests of imbalance, absolute
  double balance_rel = 1.5;        ///< prefix-approx: and relative
  std::uint64_t tree_tokens = 0;   ///< prefix-approx: tokens each replica's tree keeps (0: unlimited)
  double decode_weight = 1.0;      ///< prefix-precise: weight of the decode load
  double temperature = 0.0;        ///< prefix-precise: 0 picks the cheapest; above 0 samples
  std::uint64_t seed = 0;          ///< prefix-precise with a temperature: the draw's seed
};

/// The interface.
class router {
 public:
  virtual ~router() = default;
  router() = default;
  router(const router&) = delete;
  router& operator=(const router&) = delete;

  /// Places `r` on one of `cluster`'s replicas.
  [[nodiscard]] virtual route_choice route(const routed_request& r, const cluster_view& cluster) = 0;
  /// Whether route() reads cluster_view::cached_tokens() (the cluster asks only then).
  [[nodiscard]] virtual bool reads_caches() const { return false; }
  /// Registry name.
  [[nodiscard]] virtual std::string_view name() const = 0;
  /// Every reason route() may give, in a fixed order (the summary lists them all).
  [[nodiscard]] virtual std::vector<std::string_view> reasons() const = 0;
  /// The settings it reads, for the run's config.
  [[nodiscard]] virtual nlohmann::ordered_json describe() const { return nlohmann::ordered_json::object(); }
};

/// The routers' names, in registry order.
[[nodiscard]] std::vector<std::string> router_names();
/// One line per router for --help.
[[nodiscard]] std::string router_help();
/// Router `name` with `options`. Throws std::invalid_argument for an unknown name (listing the
/// known ones) or a bad option (naming it).
[[nodiscard]] std::unique_ptr<router> make_router(std::string_view name, const router_options& options);

}  // namespace vtensor::sim
