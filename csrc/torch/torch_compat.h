// Everything that differs between the torch minors cspmd builds against, in
// one place: the shim's other files name these and never test a version.
// The build picks the C++ standard from the same version (csrc/torch/
// meson.build): torch 2.14's and newer headers need C++20, older ones build as C++17.
#pragma once

#include <c10/core/DispatchKey.h>
#include <torch/csrc/autograd/function.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR != 2 || TORCH_VERSION_MINOR < 10
#error "cspmd supports torch 2.10 and newer 2.x releases"
#endif

namespace cspmd::compat {

// The checker's dispatch key.  The same on every supported minor, 2.10 to
// 2.15: measured per minor (tools/key_probe), Fake reaches every tensor kind
// and sees ops whole on all of them, and nothing in torch registers on it;
// docs/dev/architecture.md ("The dispatch key") has the table and the other
// candidates.  A minor that needs another key gets its own #if here.
#define CSPMD_CHECKER_KEY Fake
inline constexpr c10::DispatchKey kCheckerKey = c10::DispatchKey::CSPMD_CHECKER_KEY;
// Where the key sits: above the Python key through 2.12 (ops reach the
// checker before tensor subclasses and dispatch modes), below it from 2.13,
// where torch moved Fake under Python (python_handlers.cpp).
inline constexpr bool kCheckerBelowPython = TORCH_VERSION_MINOR >= 13;

// A handle on an autograd node, as get_current_node() and grad_fn() return
// it: std::shared_ptr<Node> through 2.12, c10::intrusive_ptr<Node> from 2.13.
using NodeRef = decltype(torch::autograd::get_current_node());

} // namespace cspmd::compat
