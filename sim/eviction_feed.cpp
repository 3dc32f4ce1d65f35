#include "sim/eviction_feed.hpp"

namespace vtensor::sim {

const next_use_oracle* shared_foresight::get() {
  if (!index_) {
    auto index = std::make_unique<traces::next_use_index>();
    fill_(*index);
    index_ = std::move(index);
  }
  return index_.get();
}

void eviction_feed::attach(kv_policy_options& options) {
  options.clock = &clock_;
  if (foresight_ != nullptr) {
    options.oracle = [f = foresight_] { return f->get(); };
  } else {
    options.oracle = nullptr;
  }
}

}  // namespace vtensor::sim
