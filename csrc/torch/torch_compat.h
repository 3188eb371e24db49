// Everything that differs between the torch minors cspmd builds against, in
// one place: the shim's other files name these and never test a version.
// The build picks the C++ standard from the same version (csrc/torch/
// meson.build): torch 2.15's headers need C++20, older ones build as C++17.
#pragma once

#include <c10/core/DispatchKey.h>
#include <torch/csrc/autograd/function.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR != 2 || TORCH_VERSION_MINOR < 10
#error "cspmd supports torch 2.10 and newer 2.x releases"
#endif

namespace cspmd::compat {

// The checker's dispatch key, one per torch minor.  Why each, with what was
// measured on it, is in docs/dev/architecture.md ("The dispatch key").
#if TORCH_VERSION_MINOR <= 14
#define CSPMD_CHECKER_KEY Fake
#else
#define CSPMD_CHECKER_KEY Fake
#endif
inline constexpr c10::DispatchKey kCheckerKey = c10::DispatchKey::CSPMD_CHECKER_KEY;

// A handle on an autograd node, as get_current_node() and grad_fn() return
// it: std::shared_ptr<Node> through 2.14, c10::intrusive_ptr<Node> from 2.15.
using NodeRef = decltype(torch::autograd::get_current_node());

} // namespace cspmd::compat
