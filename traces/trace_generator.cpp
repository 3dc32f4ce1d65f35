#include "traces/trace_generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace vtensor::traces {
namespace {

std::string_view to_string(arrival_process process) {
  return process == arrival_process::poisson ? "poisson" : "gamma";
}

}  // namespace

void generator_params::validate() const {
  const auto bad = [](const std::string& why) { throw std::invalid_argument(why); };
  if ((requests == 0) == (sessions == 0)) bad("give either a number of requests or of sessions");
  if (block_tokens == 0) bad("block_tokens must be at least 1");
  if (!(session_rate_per_s > 0) || !std::isfinite(session_rate_per_s)) bad("rate must be positive");
  if (arrival == arrival_process::gamma && !(arrival_cv > 0)) bad("arrival CV must be positive");
  if (!(system_zipf >= 0)) bad("system prompt Zipf exponent must not be negative");
  if (!(fanout_probability >= 0 && fanout_probability <= 1)) bad("fan-out probability must be in [0, 1]");
  if (max_context_tokens < 2) bad("max context must be at least 2 tokens");
}

nlohmann::json generator_params::to_json() const {
  return {{"seed", seed},
          {"requests", requests},
          {"sessions", sessions},
          {"arrival", to_string(arrival)},
          {"rate_per_s", session_rate_per_s},
          {"arrival_cv", arrival_cv},
          {"turns", turns.to_string()},
          {"turn_gap_ms", turn_gap_ms.to_string()},
          {"user_tokens", user_tokens.to_string()},
          {"output_tokens", output_tokens.to_string()},
          {"system_prompts", system_prompts},
          {"system_tokens", system_tokens.to_string()},
          {"system_zipf", system_zipf},
          {"fanout_probability", fanout_probability},
          {"fanout", fanout.to_string()},
          {"fanout_suffix_tokens", fanout_suffix_tokens.to_string()},
          {"max_context_tokens", max_context_tokens}};
}

trace_generator::trace_generator(generator_params params)
    : trace_reader("<generated>", trace_format::vtensor, {"arrival_us", "input_tokens", "block_keys"},
                   params.block_tokens),
      params_(std::move(params)),
      engine_(params_.seed) {
  params_.validate();
  double total_weight = 0;
  for (std::uint32_t i = 0; i < params_.system_prompts; ++i) {
    const std::uint64_t tokens = std::max<std::uint64_t>(1, params_.system_tokens.sample(engine_));
    system_tokens_.push_back(tokens);
    std::vector<std::uint64_t> keys(tokens / params_.block_tokens);
    for (auto& key : keys) key = next_key_++;
    system_keys_.push_back(std::move(keys));
    total_weight += std::pow(static_cast<double>(i + 1), -params_.system_zipf);
    system_cdf_.push_back(total_weight);
  }
  for (double& weight : system_cdf_) weight /= total_weight;
}

std::uint32_t trace_generator::pick_system_prompt() {
  const double u = uniform_01(engine_);
  const auto found = std::upper_bound(system_cdf_.begin(), system_cdf_.end(), u);
  return static_cast<std::uint32_t>(
      std::min<std::ptrdiff_t>(found - system_cdf_.begin(), static_cast<std::ptrdiff_t>(system_cdf_.size()) - 1));
}

std::uint64_t trace_generator::sample_session_gap_us() {
  const double mean_us = 1e6 / params_.session_rate_per_s;
  double gap_us = 0;
  if (params_.arrival == arrival_process::poisson) {
    gap_us = sample_exponential(engine_, mean_us);
  } else {
    const double shape = 1.0 / (params_.arrival_cv * params_.arrival_cv);
    gap_us = sample_gamma(engine_, shape, mean_us / shape);
  }
  return static_cast<std::uint64_t>(std::llround(gap_us));
}

void trace_generator::fill_keys(std::vector<std::uint64_t>& keys, std::uint64_t tokens,
                                std::span<const std::uint64_t> inherited) {
  const std::uint64_t blocks = blocks_for_tokens(tokens, params_.block_tokens);
  const std::uint64_t shared = std::min<std::uint64_t>(inherited.size(), tokens / params_.block_tokens);
  keys.assign(inherited.begin(), inherited.begin() + static_cast<std::ptrdiff_t>(shared));
  while (keys.size() < blocks) keys.push_back(next_key_++);
}

void trace_generator::start_session() {
  const auto arrival_us = static_cast<std::uint64_t>(std::llround(next_session_us_));
  next_session_us_ += static_cast<double>(sample_session_gap_us());
  std::size_t slot = 0;
  if (free_slots_.empty()) {
    slot = slots_.size();
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  session_state& session = slots_[slot];
  session.id = sessions_started_++;
  session.turn = 0;
  session.turns = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(params_.turns.sample(engine_), 1, UINT32_MAX));
  session.context_tokens = 0;
  session.context_keys.clear();
  if (!system_tokens_.empty()) {
    const std::uint32_t prompt = pick_system_prompt();
    session.context_tokens = system_tokens_[prompt];
    session.context_keys = system_keys_[prompt];
  }
  emit_turn(slot, arrival_us);
}

void trace_generator::emit_turn(std::size_t slot, std::uint64_t arrival_us) {
  session_state& session = slots_[slot];
  const std::uint64_t max_context = params_.max_context_tokens;
  const std::uint64_t user = std::max<std::uint64_t>(1, params_.user_tokens.sample(engine_));
  std::uint64_t output = std::max<std::uint64_t>(1, params_.output_tokens.sample(engine_));
  std::uint64_t prompt = session.context_tokens + user;
  if (prompt + output > max_context) {
    if (session.turn > 0) {
      free_slots_.push_back(slot);
      return;
    }
    output = std::min(output, max_context - 1);
    prompt = std::min(prompt, max_context - output);
  }

  trace_request request;
  request.arrival_us = arrival_us;
  request.session = session.id;
  request.turn = session.turn;
  request.input_tokens = static_cast<std::uint32_t>(prompt);
  request.output_tokens = static_cast<std::uint32_t>(output);
  request.block_tokens = params_.block_tokens;
  fill_keys(request.block_keys, prompt, session.context_keys);
  const std::span<const std::uint64_t> prompt_full_keys =
      std::span<const std::uint64_t>(request.block_keys).first(prompt / params_.block_tokens);
  session.context_tokens = prompt + output;
  session.context_keys.assign(prompt_full_keys.begin(), prompt_full_keys.end());
  ready_.push_back(request);

  if (params_.fanout_probability > 0 && uniform_01(engine_) < params_.fanout_probability) {
    const std::uint64_t siblings = std::max<std::uint64_t>(2, params_.fanout.sample(engine_));
    for (std::uint64_t i = 1; i < siblings; ++i) {
      trace_request sibling = request;
      sibling.output_tokens = static_cast<std::uint32_t>(std::min<std::uint64_t>(
          std::max<std::uint64_t>(1, params_.output_tokens.sample(engine_)), max_context - prompt));
      const std::uint64_t suffix = std::min<std::uint64_t>(params_.fanout_suffix_tokens.sample(engine_),
                                                           max_context - prompt - sibling.output_tokens);
      if (suffix > 0) {
        sibling.input_tokens = static_cast<std::uint32_t>(prompt + suffix);
        fill_keys(sibling.block_keys, prompt + suffix, session.context_keys);
      }
      ready_.push_back(std::move(sibling));
    }
  }

  ++session.turn;
  if (session.turn < session.turns) {
    const std::uint64_t gap_us = params_.turn_gap_ms.sample(engine_) * 1000;
    waiting_.push(wake_up{arrival_us + gap_us, sequence_++, slot});
  } else {
    free_slots_.push_back(slot);
  }
}

bool trace_generator::do_next(trace_request& request) {
  while (ready_.empty()) {
    if (params_.requests > 0 && emitted_ >= params_.requests) return false;
    const bool can_start = params_.requests > 0 || sessions_started_ < params_.sessions;
    if (!can_start && waiting_.empty()) return false;
    const auto next_start_us = static_cast<std::uint64_t>(std::llround(next_session_us_));
    if (can_start && (waiting_.empty() || next_start_us <= waiting_.top().arrival_us)) {
      start_session();
    } else {
      const wake_up wake = waiting_.top();
      waiting_.pop();
      emit_turn(wake.slot, wake.arrival_us);
    }
  }
  if (params_.requests > 0 && emitted_ >= params_.requests) return false;
  request = std::move(ready_.front());
  ready_.pop_front();
  request.line = ++emitted_;
  return true;
}

}  // namespace vtensor::traces
