#pragma once
/// Boost.Intrusive link mode for the core's structures: safe mode (catches double insertion and
/// destruction of a linked node) in debug builds, plain links in release builds.

#include <boost/intrusive/link_mode.hpp>

namespace vtensor {
#ifdef NDEBUG
inline constexpr auto k_link_mode = boost::intrusive::normal_link;
#else
inline constexpr auto k_link_mode = boost::intrusive::safe_link;
#endif
using link_mode_t = boost::intrusive::link_mode<k_link_mode>;
}  // namespace vtensor
