// `vtensor validate-gpu`: the manager over the cuda backend on a real GPU, checked with kernels.
// See print_help's text for what each check proves; Note [Pattern segments] (gpu_kernels.hpp)
// for how memory is written and compared.

#include "tools/cli.hpp"
#include "tools/gpu_kernels.hpp"

#include "backends/units.hpp"
#include "core/kv_geometry.hpp"
#include "core/manager.hpp"
#include "traces/atomic_output_file.hpp"

#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "validate-gpu";
struct validate_options {
  int device = 0;                       ///< CUDA device index
  std::optional<std::uint64_t> memory;  ///< cap on chunk memory; nullopt: free memory minus a margin
  kv_layout layout = kv_layout::kv_fused;
  std::uint64_t seed = 1;
  std::string json;                           ///< summary file, "" for none
  std::uint64_t context_tokens = 8192;        ///< max context of every vTensor
  std::uint64_t requests = 24;                ///< requests of the contiguity check
  std::uint64_t overhead_bytes = 64 * k_mib;  ///< bound of check 4
};

#if VTENSOR_HAVE_CUDA && VTENSOR_HAVE_GPU_KERNELS

using steady = std::chrono::steady_clock;

/// One line of the summary.
struct check_outcome {
  int number = 0;
  std::string title;
  bool pass = true;
  std::string detail;
  nlohmann::ordered_json figures = nlohmann::ordered_json::object();
};

/// A live request as the validator sees it: what its memory must hold.
struct tracked_request {
  std::uint32_t shared_pages = 0;   ///< leading pages shared (immutable)
  std::vector<gpu_segment> expect;  ///< segments and the pattern each must hold
};

/// A copy the manager asked for (copy-on-write).
struct copy_call {
  device_addr dst = 0;
  device_addr src = 0;
  std::uint64_t bytes = 0;
};

class validator {
 public:
  validator(const validate_options& o, const cli_streams& io) : o_(o), io_(io), rng_(o.seed) {}

  int run() {
    const auto t0 = steady::now();
    const device_facts device = open_device();
    check_contiguous();
    sample_memory("after check 1");
    check_fork();
    sample_memory("after check 2");
    check_cow();
    sample_memory("after check 3");
    check_fill_to_oom();  // also samples at full memory and after shutdown
    finish_memory_check();
    return report(device, std::chrono::duration<double>(steady::now() - t0).count());
  }

 private:
  /// What the device said at the start.
  struct device_facts {
    std::string name;
    int driver = 0;
    cuda_mem_info start;
    std::uint64_t cap = 0;
  };

  /// The backend, the kernels' workspace and the manager, on a chunk cap of --memory or the free
  /// memory minus a margin; prints the device line.
  device_facts open_device() {
    // The backend first: without a GPU this is what says so (cuda_unavailable names the backend).
    auto probe = std::make_unique<cuda_backend>(o_.device, k_chunk_bytes);
    ws_ = std::make_unique<gpu_workspace>(o_.device);
    device_facts d{probe->device_name(), probe->driver_version(), probe->mem_info(), 0};
    const std::uint64_t margin = 2 * k_gib;
    d.cap = o_.memory.value_or(d.start.free_bytes > margin ? d.start.free_bytes - margin : 0);
    d.cap = std::min(d.cap, d.start.free_bytes) / k_chunk_bytes * k_chunk_bytes;
    if (d.cap < 64 * k_chunk_bytes)
      throw std::runtime_error(fmt::format("--memory: {} is too little to validate", bytes_text(d.cap)));
    probe.reset();
    backend_ = std::make_unique<cuda_backend>(o_.device, d.cap);
    baseline_used_ = used_now();

    manager_config config{kv_geometry(*model_preset("llama-3-8b"), o_.layout), {}, "lru"};
    config.scheduler.max_context_tokens = o_.context_tokens;
    config.scheduler.partial = partial_page_policy::cow;
    m_ = std::make_unique<manager>(*backend_, config);
    m_->set_device_copy([this](device_addr dst, device_addr src, std::uint64_t bytes) { copy(dst, src, bytes); });
    const kv_geometry& g = m_->geometry();
    bpt_ = g.bytes_per_token_per_tensor();
    tensors_ = g.tensors();
    tokens_per_chunk_ = g.tokens_per_chunk();

    io_.out << fmt::format(
        "validate-gpu: {} (device {}, driver {}.{}), llama-3-8b {}: {} tensors, {} tokens a chunk, "
        "context {} tokens, seed {}\n",
        d.name, o_.device, d.driver / 1000, d.driver % 1000 / 10, to_string(o_.layout), tensors_, tokens_per_chunk_,
        o_.context_tokens, o_.seed);
    io_.out << fmt::format("memory: {} total, {} free at start; chunk cap {} ({} chunks){}\n",
                           bytes_text(d.start.total_bytes), bytes_text(d.start.free_bytes), bytes_text(d.cap),
                           d.cap / k_chunk_bytes, o_.memory ? " (--memory)" : " (free minus 2 GiB)");
    io_.out.flush();
    return d;
  }

  /// VMM calls by kind, as a line and as JSON.
  std::pair<std::string, nlohmann::ordered_json> vmm_summary() const {
    const vmm_counters& calls = backend_->counters();
    std::string line = "VMM calls (count, mean us):";
    nlohmann::ordered_json json = nlohmann::ordered_json::object();
    for (const vmm_call call : k_vmm_calls) {
      const std::uint64_t n = calls.calls_of(call);
      const double mean_us = n == 0 ? 0.0 : static_cast<double>(calls.time_ns_of(call)) / static_cast<double>(n) / 1e3;
      line += fmt::format(" {} {} ({:.1f})", to_string(call), n, mean_us);
      json[std::string(to_string(call))] = {{"calls", n}, {"mean_us", mean_us}};
    }
    return {line, json};
  }

  /// Prints PASS/FAIL per check and the verdict, writes --json; the exit code.
  int report(const device_facts& d, double seconds) {
    std::size_t passed = 0;
    std::sort(outcomes_.begin(), outcomes_.end(), [](const auto& a, const auto& b) { return a.number < b.number; });
    for (const check_outcome& c : outcomes_) {
      io_.out << fmt::format("[{}] {} {}: {}\n", c.pass ? "PASS" : "FAIL", c.number, c.title, c.detail);
      passed += c.pass ? 1 : 0;
    }
    const auto [vmm_line, vmm_json] = vmm_summary();
    io_.out << vmm_line << '\n';
    const bool all = passed == outcomes_.size();
    io_.out << fmt::format("result: {} ({}/{} checks passed) in {:.1f} s\n", all ? "PASS" : "FAIL", passed,
                           outcomes_.size(), seconds);
    if (!o_.json.empty()) write_json(d, vmm_json, seconds, all);
    if (!all) {
      io_.err << fmt::format("vtensor {}: {} of {} checks failed\n", name, outcomes_.size() - passed, outcomes_.size());
      return exit_failure;
    }
    return exit_success;
  }

  void write_json(const device_facts& d, const nlohmann::ordered_json& vmm_json, double seconds, bool all) const {
    nlohmann::ordered_json j;
    j["device"] = d.name;
    j["device_index"] = o_.device;
    j["driver_version"] = d.driver;
    j["layout"] = to_string(o_.layout);
    j["tensors"] = tensors_;
    j["context_tokens"] = o_.context_tokens;
    j["seed"] = o_.seed;
    j["total_bytes"] = d.start.total_bytes;
    j["free_bytes_at_start"] = d.start.free_bytes;
    j["cap_bytes"] = d.cap;
    j["overhead_bound_bytes"] = o_.overhead_bytes;
    j["checks"] = nlohmann::ordered_json::array();
    for (const check_outcome& c : outcomes_) {
      j["checks"].push_back(
          {{"number", c.number}, {"name", c.title}, {"pass", c.pass}, {"detail", c.detail}, {"figures", c.figures}});
    }
    j["vmm"] = vmm_json;
    j["seconds"] = seconds;
    j["pass"] = all;
    traces::atomic_output_file file(o_.json);
    file.write(j.dump(2) + "\n");
    file.commit();
  }

  // --- helpers ---
  std::uint64_t used_now() const {
    const cuda_mem_info info = backend_->mem_info();
    return info.total_bytes - info.free_bytes;
  }
  std::uint64_t next_seed() { return seed_counter_++ * 0x100000001b3ULL ^ o_.seed << 40; }
  std::vector<token_block> fresh_blocks(std::uint64_t tokens) {
    std::vector<token_block> blocks;
    for (std::uint64_t t = 0; t + 512 <= tokens; t += 512) blocks.push_back({key_counter_++, 512});
    return blocks;
  }
  vtensor_view view_of(std::uint64_t id) const {
    const auto v = m_->view(request_id{id});
    if (!v) throw std::logic_error(fmt::format("request {} should be live", id));
    return *v;
  }
  std::uint64_t mapped_bytes(const vtensor_view& v) const { return round_up(v.mapped_tokens * bpt_, k_chunk_bytes); }
  /// Writes a fresh pattern over each tensor's [from, mapped) and records it as expected content.
  void write_own(std::uint64_t id, std::uint64_t from_bytes, std::vector<gpu_segment>& batch) {
    const vtensor_view v = view_of(id);
    const std::uint64_t end = mapped_bytes(v);
    tracked_request& r = live_[id];
    for (std::uint32_t t = 0; t < tensors_ && from_bytes < end; ++t) {
      const std::uint64_t seed = next_seed();
      const std::size_t before = batch.size();
      append_segments(batch, v.tensor(t) + from_bytes, end - from_bytes, seed, from_bytes / 4);
      r.expect.insert(r.expect.end(), batch.begin() + static_cast<std::ptrdiff_t>(before), batch.end());
    }
  }
  /// Drops expectations of `id` at or after `from_bytes` in each tensor (before a rewrite).
  void forget_from(std::uint64_t id, std::uint64_t from_bytes) {
    const vtensor_view v = view_of(id);
    auto& e = live_[id].expect;
    std::erase_if(e, [&](const gpu_segment& s) {
      const std::uint64_t t = (s.addr - v.base) / v.tensor_span_bytes;
      return s.addr - v.tensor(static_cast<std::uint32_t>(t)) >= from_bytes;
    });
  }
  gpu_check_result verify_all() {
    std::vector<gpu_segment> all;
    for (const auto& [id, r] : live_) all.insert(all.end(), r.expect.begin(), r.expect.end());
    return ws_->check(all);
  }
  static std::uint64_t segment_bytes(const std::vector<gpu_segment>& s) {
    std::uint64_t b = 0;
    for (const auto& x : s) b += x.bytes;
    return b;
  }
  std::string mismatch_text(const gpu_check_result& r) const {
    return fmt::format("{} mismatched words of {} (first: segment {}, word {})", r.mismatches, r.words_checked,
                       r.first_bad_segment, r.first_bad_word);
  }
  void copy(device_addr dst, device_addr src, std::uint64_t bytes) {
    if (poison_copies_) {
      // Known bytes over the whole destination chunk first, so a copy of more than `bytes` shows.
      std::vector<gpu_segment> poison;
      append_segments(poison, dst, k_chunk_bytes, k_poison_seed, 0);
      ws_->fill(poison);
    }
    copies_.push_back({dst, src, bytes});
    ws_->copy(dst, src, bytes);
  }
  void sample_memory(const std::string& where) {
    const manager_stats s = m_->stats();
    const std::uint64_t now = used_now();
    const std::uint64_t used = now - std::min(now, baseline_used_);
    const std::uint64_t live_bytes = backend_->live().chunks * k_chunk_bytes;
    const std::uint64_t diff =
        used > s.memory.physical_bytes ? used - s.memory.physical_bytes : s.memory.physical_bytes - used;
    mem_samples_.push_back({{"at", where},
                            {"physical_bytes", s.memory.physical_bytes},
                            {"driver_used_delta_bytes", used},
                            {"difference_bytes", diff},
                            {"backend_live_chunk_bytes", live_bytes}});
    max_diff_ = std::max(max_diff_, diff);
    if (diff > o_.overhead_bytes || live_bytes != s.memory.physical_bytes) {
      mem_ok_ = false;
      if (mem_fail_.empty()) {
        mem_fail_ = fmt::format("{}: driver used delta {} vs physical {} (backend holds {})", where, bytes_text(used),
                                bytes_text(s.memory.physical_bytes), bytes_text(live_bytes));
      }
    }
  }
  void finish_memory_check() {
    check_outcome c{4, "driver memory = manager physical bytes"};
    c.pass = mem_ok_;
    c.detail =
        fmt::format("{} samples, max |cuMemGetInfo used delta - physical| = {} (bound {}){}", mem_samples_.size(),
                    bytes_text(max_diff_), bytes_text(o_.overhead_bytes), mem_ok_ ? "" : "; " + mem_fail_);
    c.figures = {{"samples", mem_samples_}, {"max_difference_bytes", max_diff_}, {"bound_bytes", o_.overhead_bytes}};
    outcomes_.push_back(std::move(c));
  }

  // --- check 1: every vTensor is one contiguous writable range over its mapped length ---
  void check_contiguous() {
    std::uniform_int_distribution<std::uint64_t> prompt(1, 3 * tokens_per_chunk_);
    std::uniform_int_distribution<std::uint64_t> grow(0, 2 * tokens_per_chunk_);
    std::vector<gpu_segment> batch;
    std::uint64_t ranges = 0;
    for (std::uint64_t i = 0; i < o_.requests; ++i) {
      const std::uint64_t id = next_id_++;
      const std::uint64_t tokens = std::min(prompt(rng_), o_.context_tokens / 2);
      if (!m_->create(request_id{id}, fresh_blocks(tokens), tokens).ok())
        throw std::runtime_error("check 1: create ran out of memory");
      if (m_->extend(request_id{id}, std::min(grow(rng_), o_.context_tokens / 2)).status != alloc_status::ok) {
        throw std::runtime_error("check 1: extend ran out of memory");
      }
      live_[id];
      write_own(id, 0, batch);  // each tensor written as one range: Note [Pattern segments]
      ranges += tensors_;
    }
    ws_->fill(batch);
    m_->check_invariants();
    const gpu_check_result r = ws_->check(batch);
    check_outcome c{1, "contiguous writable vTensors"};
    c.pass = r.ok();
    c.detail = fmt::format(
        "{} requests, {} tensor ranges ({} chunk pieces), {} written in one pattern per range and "
        "read back{}",
        o_.requests, ranges, batch.size(), bytes_text(segment_bytes(batch)),
        r.ok() ? ", 0 mismatches" : ": " + mismatch_text(r));
    c.figures = {{"requests", o_.requests},
                 {"tensor_ranges", ranges},
                 {"bytes", segment_bytes(batch)},
                 {"mismatched_words", r.mismatches}};
    outcomes_.push_back(std::move(c));
  }

  // --- check 2: a fork reads its parent's prefix; own writes reach no other live request ---
  void check_fork() {
    std::vector<gpu_segment> batch;
    const std::uint64_t parent = next_id_++;
    const std::uint64_t tokens = 2 * tokens_per_chunk_ + tokens_per_chunk_ / 2 + 3;  // ends inside a page
    if (!m_->create(request_id{parent}, fresh_blocks(tokens), tokens).ok())
      throw std::runtime_error("check 2: create failed");
    live_[parent];
    write_own(parent, 0, batch);
    ws_->fill(batch);
    const std::vector<gpu_segment> parent_pattern = live_[parent].expect;
    const vtensor_view pv = view_of(parent);

    // Children and a grandchild.
    std::vector<std::uint64_t> family{parent};
    std::uint64_t prefix_bytes_checked = 0;
    std::vector<gpu_segment> prefix_checks;
    const std::uint64_t c1 = next_id_++, c2 = next_id_++, g1 = next_id_++;
    for (auto [from, to] : {std::pair{parent, c1}, std::pair{parent, c2}, std::pair{c1, g1}}) {
      const create_result f = m_->fork(request_id{from}, request_id{to});
      if (!f.ok()) throw std::runtime_error("check 2: fork ran out of memory");
      const vtensor_view cv = view_of(to);
      // The child must read the parent's bytes of its valid tokens through its own pointer.
      for (const gpu_segment& s : parent_pattern) {
        const std::uint64_t t = (s.addr - pv.base) / pv.tensor_span_bytes;
        const std::uint64_t off = s.addr - pv.tensor(static_cast<std::uint32_t>(t));
        const std::uint64_t valid = tokens * bpt_;
        if (off >= valid) continue;
        const std::uint64_t len = std::min(s.bytes, valid - off);
        prefix_checks.push_back({cv.tensor(static_cast<std::uint32_t>(t)) + off, len, s.seed, s.first_word});
        prefix_bytes_checked += len;
      }
      tracked_request& tr = live_[to];
      tr.shared_pages = f.shared_pages;
      family.push_back(to);
    }
    const gpu_check_result prefix = ws_->check(prefix_checks);
    m_->check_invariants();

    // Every member grows, then writes a new pattern over its own (unshared) pages.
    batch.clear();
    std::uniform_int_distribution<std::uint64_t> grow(1, 2 * tokens_per_chunk_);
    for (std::uint64_t id : family) {
      if (m_->extend(request_id{id}, grow(rng_)).status != alloc_status::ok)
        throw std::runtime_error("check 2: extend failed");
      const std::uint32_t shared =
          id == parent ? static_cast<std::uint32_t>(tokens * bpt_ / k_chunk_bytes) : live_[id].shared_pages;
      const std::uint64_t own_from = std::uint64_t{shared} * k_chunk_bytes;
      if (id != parent) {
        // The shared pages hold the parent's pattern (checked above); the own pages get new data.
        auto& e = live_[id].expect;
        e.clear();
        const vtensor_view v = view_of(id);
        for (const gpu_segment& s : parent_pattern) {
          const std::uint64_t t = (s.addr - pv.base) / pv.tensor_span_bytes;
          const std::uint64_t off = s.addr - pv.tensor(static_cast<std::uint32_t>(t));
          if (off < own_from)
            e.push_back({v.tensor(static_cast<std::uint32_t>(t)) + off, s.bytes, s.seed, s.first_word});
        }
      } else {
        forget_from(id, own_from);
      }
      write_own(id, own_from, batch);
    }
    ws_->fill(batch);
    m_->check_invariants();
    const gpu_check_result after = verify_all();
    check_outcome c{2, "fork reads the parent's prefix; writes stay private"};
    c.pass = prefix.ok() && after.ok();
    c.detail = fmt::format(
        "3 forks (2 children, 1 grandchild) of a {}-token parent read {} of its prefix{}; "
        "each of 4 wrote {} in its own pages, then all {} live requests ({}) hold their data{}",
        tokens, bytes_text(prefix_bytes_checked), prefix.ok() ? "" : " WRONG: " + mismatch_text(prefix),
        bytes_text(segment_bytes(batch) / 4), live_.size(), bytes_text(after.words_checked * 4),
        after.ok() ? "" : " WRONG: " + mismatch_text(after));
    c.figures = {{"prefix_bytes_checked", prefix_bytes_checked}, {"prefix_mismatched_words", prefix.mismatches},
                 {"own_bytes_written", segment_bytes(batch)},    {"live_requests", live_.size()},
                 {"bytes_verified", after.words_checked * 4},    {"mismatched_words", after.mismatches}};
    outcomes_.push_back(std::move(c));
  }

  // --- check 3: copy-on-write copies exactly the valid bytes of a partial page ---
  /// Checks the copies of one create or fork into `child`: one per tensor, `partial` bytes each,
  /// into page `shared`; the destination holds the source pattern, then the poison.
  bool check_copies(const std::string& what, std::uint64_t child, std::uint32_t shared, std::uint64_t partial,
                    std::uint64_t cow_bytes, const std::vector<gpu_segment>& source_pattern, const vtensor_view& source,
                    std::vector<std::string>& problems, std::uint64_t& checked) {
    const vtensor_view cv = view_of(child);
    const std::uint64_t page_off = std::uint64_t{shared} * k_chunk_bytes;
    if (copies_.size() != tensors_)
      problems.push_back(fmt::format("{}: {} copies for {} tensors", what, copies_.size(), tensors_));
    if (cow_bytes != partial * tensors_)
      problems.push_back(fmt::format("{}: cow bytes {} != {}", what, cow_bytes, partial * tensors_));
    for (std::uint32_t t = 0; t < tensors_ && t < copies_.size(); ++t) {
      const copy_call& k = copies_[t];
      if (k.bytes != partial || k.dst != cv.tensor(t) + page_off) {
        problems.push_back(fmt::format("{}: copy {} wrote {} bytes at {:#x}, expected {} at {:#x}", what, t, k.bytes,
                                       k.dst, partial, cv.tensor(t) + page_off));
      }
    }
    std::vector<gpu_segment> expect;
    for (const gpu_segment& s : source_pattern) {
      const std::uint64_t t = (s.addr - source.base) / source.tensor_span_bytes;
      const std::uint64_t off = s.addr - source.tensor(static_cast<std::uint32_t>(t));
      if (off != page_off) continue;  // the source's partial page (segments are chunk pieces)
      expect.push_back({cv.tensor(static_cast<std::uint32_t>(t)) + page_off, partial, s.seed, s.first_word});
      append_segments(expect, cv.tensor(static_cast<std::uint32_t>(t)) + page_off + partial, k_chunk_bytes - partial,
                      k_poison_seed, partial / 4);
    }
    const gpu_check_result r = ws_->check(expect);
    checked += r.words_checked * 4;
    if (expect.size() != 2 * tensors_) problems.push_back(fmt::format("{}: {} expected segments", what, expect.size()));
    if (!r.ok()) problems.push_back(fmt::format("{}: {}", what, mismatch_text(r)));
    return problems.empty();
  }

  void check_cow() {
    std::vector<std::string> problems;
    std::uint64_t checked = 0;
    const std::uint64_t short_block = 200;
    const std::uint64_t tokens = 2 * 512 + short_block;  // 1224 tokens: ends inside a page on every layout
    const std::uint32_t shared = static_cast<std::uint32_t>(tokens * bpt_ / k_chunk_bytes);
    const std::uint64_t partial = tokens * bpt_ - std::uint64_t{shared} * k_chunk_bytes;

    // (a) fork: the source page is the parent's, mapped.
    std::vector<gpu_segment> batch;
    const std::uint64_t q = next_id_++, qc = next_id_++;
    if (!m_->create(request_id{q}, fresh_blocks(tokens), tokens).ok())
      throw std::runtime_error("check 3: create failed");
    live_[q];
    write_own(q, 0, batch);  // the whole mapped range: bytes past the valid ones hold data too
    ws_->fill(batch);
    const std::vector<gpu_segment> q_pattern = live_[q].expect;
    copies_.clear();
    poison_copies_ = true;
    const create_result f = m_->fork(request_id{q}, request_id{qc});
    poison_copies_ = false;
    if (!f.ok()) throw std::runtime_error("check 3: fork ran out of memory");
    live_[qc].shared_pages = f.shared_pages;
    check_copies("fork", qc, f.shared_pages, partial, f.cow_bytes, q_pattern, view_of(q), problems, checked);
    m_->preempt(request_id{qc});
    live_.erase(qc);

    // (b) create from a cached prefix: the source page is mapped nowhere (copied through scratch).
    batch.clear();
    const std::uint64_t s = next_id_++, tq = next_id_++;
    std::vector<token_block> blocks{
        {key_counter_++, 512}, {key_counter_++, 512}, {key_counter_++, static_cast<std::uint32_t>(short_block)}};
    if (!m_->create(request_id{s}, blocks, tokens).ok()) throw std::runtime_error("check 3: create failed");
    live_[s];
    write_own(s, 0, batch);
    ws_->fill(batch);
    const std::vector<gpu_segment> s_pattern = live_[s].expect;
    const vtensor_view sv = view_of(s);
    m_->finish(request_id{s});
    live_.erase(s);
    copies_.clear();
    poison_copies_ = true;
    const create_result cr = m_->create(request_id{tq}, blocks, tokens + 300);
    poison_copies_ = false;
    if (!cr.ok()) throw std::runtime_error("check 3: create from the cache ran out of memory");
    if (cr.hit_tokens != tokens)
      problems.push_back(fmt::format("cached: hit {} tokens, expected {}", cr.hit_tokens, tokens));
    check_copies("cached prefix", tq, cr.shared_pages, partial, cr.cow_bytes, s_pattern, sv, problems, checked);
    // Its shared pages read the finished request's bytes.
    {
      const vtensor_view tv = view_of(tq);
      std::vector<gpu_segment> shared_expect;
      for (const gpu_segment& seg : s_pattern) {
        const std::uint64_t t = (seg.addr - sv.base) / sv.tensor_span_bytes;
        const std::uint64_t off = seg.addr - sv.tensor(static_cast<std::uint32_t>(t));
        if (off < std::uint64_t{cr.shared_pages} * k_chunk_bytes) {
          shared_expect.push_back(
              {tv.tensor(static_cast<std::uint32_t>(t)) + off, seg.bytes, seg.seed, seg.first_word});
        }
      }
      const gpu_check_result r = ws_->check(shared_expect);
      checked += r.words_checked * 4;
      if (!r.ok()) problems.push_back("cached prefix shared pages: " + mismatch_text(r));
    }
    m_->preempt(request_id{tq});
    m_->check_invariants();
    check_outcome c{3, "copy-on-write copies exactly the valid bytes"};
    c.pass = problems.empty();
    c.detail = fmt::format(
        "{}-token prefix, {} whole pages + {} valid bytes per tensor; fork and cached-prefix create: "
        "{} copies each of exactly {} bytes, destination tail untouched; {} compared{}",
        tokens, shared, partial, tensors_, partial, bytes_text(checked),
        problems.empty() ? "" : "; " + fmt::format("{}", fmt::join(problems, "; ")));
    c.figures = {{"prefix_tokens", tokens},
                 {"valid_bytes_per_tensor", partial},
                 {"shared_pages", shared},
                 {"bytes_compared", checked},
                 {"problems", problems}};
    outcomes_.push_back(std::move(c));
  }

  // --- check 5: filling the device ends in eviction or a clean preemption signal, no leak ---

  /// What filling the device did.
  struct fill_result {
    std::uint64_t creates = 0, finished = 0;
    std::uint64_t failing_tokens = 0;     ///< the request that did not fit
    std::vector<std::uint64_t> fill_ids;  ///< live requests, oldest first
    double seconds = 0;
  };

  /// Creates requests until one does not fit; every other one finishes into the prefix cache.
  fill_result fill_until_oom() {
    const auto t0 = steady::now();
    // At least one 512-token block each, so that a finished request leaves an evictable prefix.
    std::uniform_int_distribution<std::uint64_t> prompt(513, std::max<std::uint64_t>(4 * tokens_per_chunk_, 1536));
    std::vector<gpu_segment> batch;
    fill_result f;
    const std::uint64_t limit = backend_->capacity_chunks() + 1000;
    for (std::uint64_t n = 0;; ++n) {
      if (n > limit) throw std::runtime_error("check 5: the device never ran out of memory");
      const std::uint64_t id = next_id_++;
      const std::uint64_t tokens = std::min(prompt(rng_), o_.context_tokens);
      if (!m_->create(request_id{id}, fresh_blocks(tokens), tokens).ok()) {
        f.failing_tokens = tokens;
        next_id_--;
        break;
      }
      ++f.creates;
      if (n % 2 == 1) {  // every other one finishes: its pages become an evictable cached prefix
        m_->finish(request_id{id});
        ++f.finished;
        continue;
      }
      live_[id];
      write_own(id, 0, batch);
      f.fill_ids.push_back(id);
      if (batch.size() >= 16384) {
        ws_->fill(batch);
        batch.clear();
      }
    }
    ws_->fill(batch);
    f.seconds = std::chrono::duration<double>(steady::now() - t0).count();
    return f;
  }

  /// Preempts the oldest until the request that failed fits, then retries it. Returns how many
  /// were preempted and whether the retry succeeded.
  std::pair<std::uint64_t, bool> preempt_until_fits(const fill_result& f) {
    std::uint64_t preempted = 0;
    bool retried = false;
    for (std::size_t i = 0; i < f.fill_ids.size() && !retried && preempted < 64; ++i) {
      m_->preempt(request_id{f.fill_ids[i]});
      live_.erase(f.fill_ids[i]);
      ++preempted;
      retried = m_->create(request_id{next_id_}, fresh_blocks(f.failing_tokens), f.failing_tokens).ok();
    }
    if (retried) {
      live_[next_id_];
      ++next_id_;
    }
    return {preempted, retried};
  }

  void check_fill_to_oom() {
    const manager_stats before = m_->stats();
    const fill_result f = fill_until_oom();
    const manager_stats full = m_->stats();
    sample_memory("at out-of-memory");
    m_->check_invariants();
    const gpu_check_result data = verify_all();
    const std::uint64_t evicted = full.evicted_nodes - before.evicted_nodes;
    const std::uint64_t signals = full.preemption_signals - before.preemption_signals;
    const std::uint64_t cap = backend_->capacity_bytes();
    const std::uint64_t request_bytes = geometry_pages(f.failing_tokens) * tensors_ * k_chunk_bytes;
    // Full: what the failed create needed exceeds what could still be created plus the free pool.
    const bool filled = full.memory.physical_bytes <= cap &&
                        cap - full.memory.physical_bytes + full.memory.free_pool_bytes < request_bytes;
    const auto [preempted, retried] = preempt_until_fits(f);
    m_->check_invariants();
    const gpu_check_result after = verify_all();

    m_->shutdown();
    live_.clear();
    const vmm_live left = backend_->live();
    const std::uint64_t used = used_now();
    const std::uint64_t leak = used > baseline_used_ ? used - baseline_used_ : baseline_used_ - used;
    sample_memory("after shutdown");
    const bool clean = left.chunks == 0 && left.ranges == 0 && left.mappings == 0 && leak <= o_.overhead_bytes;

    check_outcome c{5, "fill to out-of-memory, evict, preempt, no leak"};
    c.pass = data.ok() && after.ok() && signals >= 1 && evicted > 0 && filled && retried && clean;
    c.detail = fmt::format(
        "{} creates ({} finished into the cache) in {:.1f} s filled {} of {} ({} chunks), {} prefix evictions, then "
        "needs_preemption{}; {} verified{}; {} preempted, retry {}; after shutdown: backend holds {} ranges, {} "
        "chunks, "
        "{} mappings, driver used {} from start (bound {})",
        f.creates, f.finished, f.seconds, bytes_text(full.memory.physical_bytes), bytes_text(cap),
        full.memory.physical_bytes / k_chunk_bytes, evicted, filled ? "" : " (NOT full)",
        bytes_text(data.words_checked * 4),
        data.ok() && after.ok() ? ", 0 mismatches" : " WRONG: " + mismatch_text(data.ok() ? after : data), preempted,
        retried ? "ok" : "FAILED", left.ranges, left.chunks, left.mappings, bytes_text(leak),
        bytes_text(o_.overhead_bytes));
    c.figures = {
        {"creates", f.creates},
        {"finished", f.finished},
        {"fill_seconds", f.seconds},
        {"physical_bytes_full", full.memory.physical_bytes},
        {"cap_bytes", cap},
        {"evicted_nodes", evicted},
        {"preemption_signals", signals},
        {"bytes_verified", data.words_checked * 4},
        {"mismatched_words", data.mismatches + after.mismatches},
        {"preempted", preempted},
        {"retry_ok", retried},
        {"live_after_shutdown", {{"ranges", left.ranges}, {"chunks", left.chunks}, {"mappings", left.mappings}}},
        {"driver_used_after_shutdown_minus_start_bytes", leak}};
    outcomes_.push_back(std::move(c));
  }
  std::uint64_t geometry_pages(std::uint64_t tokens) const { return ceil_div(tokens * bpt_, k_chunk_bytes); }

  static constexpr std::uint64_t k_poison_seed = 0xdeadbeefcafef00dULL;

  validate_options o_;
  const cli_streams& io_;
  std::mt19937_64 rng_;
  std::unique_ptr<gpu_workspace> ws_;
  std::unique_ptr<cuda_backend> backend_;
  std::unique_ptr<manager> m_;
  std::uint64_t bpt_ = 0;
  std::uint32_t tensors_ = 0;
  std::uint64_t tokens_per_chunk_ = 0;
  std::uint64_t baseline_used_ = 0;
  std::map<std::uint64_t, tracked_request> live_;
  std::uint64_t next_id_ = 1;
  std::uint64_t key_counter_ = 1;
  std::uint64_t seed_counter_ = 1;
  bool poison_copies_ = false;
  std::vector<copy_call> copies_;
  std::vector<check_outcome> outcomes_;
  nlohmann::ordered_json mem_samples_ = nlohmann::ordered_json::array();
  std::uint64_t max_diff_ = 0;
  bool mem_ok_ = true;
  std::string mem_fail_;
};

#endif

}  // namespace

int cmd_validate_gpu(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::options_description options("options");
    options.add_options()("device", po::value<int>()->default_value(0), "CUDA device index")(
        "memory", po::value<std::string>(),
        "cap on the chunk memory the manager may create (e.g. 16GiB); default: all free memory minus 2 GiB")(
        "layout", po::value<std::string>()->default_value("kv-fused"),
        "KV layout of Llama-3-8B: kv-split (64 tensors), kv-fused (32), token-major (1)")(
        "seed", po::value<std::uint64_t>()->default_value(1), "seed of request sizes and patterns")(
        "context", po::value<std::uint64_t>()->default_value(8192), "max tokens of every vTensor")(
        "requests", po::value<std::uint64_t>()->default_value(24), "requests of the contiguity check")(
        "overhead", po::value<std::string>()->default_value("64MiB"),
        "bound on |driver used memory delta - manager physical bytes| (check 4) and on what\n"
        "shutdown may leave (check 5)")("json", po::value<std::string>(),
                                        "also write the summary as JSON to this file");
    const po::positional_options_description positional;
    const auto values = parse_command_line(
        name, "[--device N] [--memory SIZE] [--layout L] [--seed N] [--json FILE]",
        "Drives vTensors through the manager over the cuda backend on a GPU and checks with CUDA kernels:\n"
        "  1 every vTensor tensor is one contiguous writable range over its mapped length;\n"
        "  2 a fork reads its parent's prefix through its own pointer, and writes in its own pages\n"
        "    reach no other live request;\n"
        "  3 copy-on-write copies exactly the valid bytes of a partial page (fork, and create from a\n"
        "    cached prefix), nothing after them;\n"
        "  4 the driver's used memory (cuMemGetInfo) matches the manager's physical bytes within\n"
        "    --overhead;\n"
        "  5 filling the device to the cap ends in evictions and a clean needs_preemption, a preempted\n"
        "    request makes room, and shutdown leaves nothing (backend and driver).\n"
        "Prints PASS/FAIL per check with figures. Exit 0 when all pass, 1 on any mismatch or error\n"
        "(no GPU, a build without the cuda backend or the kernels), 2 on bad usage.",
        options, positional, args, io);
    if (!values) return exit_success;
    validate_options o;
    o.device = (*values)["device"].as<int>();
    if (o.device < 0) throw usage_error("--device must be 0 or more");
    if (values->count("memory") != 0) o.memory = parse_size_option("--memory", (*values)["memory"].as<std::string>());
    const std::string layout = (*values)["layout"].as<std::string>();
    const auto parsed = kv_layout_from_string(layout);
    if (!parsed) throw usage_error(fmt::format("--layout: unknown layout '{}' ({})", layout, k_kv_layout_names.list()));
    o.layout = *parsed;
    o.seed = (*values)["seed"].as<std::uint64_t>();
    o.context_tokens = (*values)["context"].as<std::uint64_t>();
    if (o.context_tokens < 4096) throw usage_error("--context must be at least 4096 tokens");
    o.requests = (*values)["requests"].as<std::uint64_t>();
    if (o.requests == 0) throw usage_error("--requests must be at least 1");
    o.overhead_bytes = parse_size_option("--overhead", (*values)["overhead"].as<std::string>());
    if (values->count("json") != 0) o.json = (*values)["json"].as<std::string>();
#if VTENSOR_HAVE_CUDA && VTENSOR_HAVE_GPU_KERNELS
    return validator(o, io).run();
#elif VTENSOR_HAVE_CUDA
    throw std::runtime_error("built without CUDA kernels (nvcc was not found at configure time): "
                             "the cuda backend cannot be validated by this build");
#else
    throw std::runtime_error("built without CUDA kernels and without the cuda backend (no CUDA toolkit at "
                             "configure time)");
#endif
  });
}

}  // namespace vtensor::tools
