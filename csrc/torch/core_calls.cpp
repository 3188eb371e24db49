// The core functions that the Python front calls directly, bound from one
// table (CSPMD_PY_CALL_LIST in include/cspmd.h) with one marshaller: a row
// needs no wrapper here.  Each C parameter is read by its C type:
//   an integer, an id or an enum     <- a Python int (range-checked)
//   const char *                      <- a Python str
//   cspmd_ctype_t                     <- a pair (local type, shard dim)
//   const T * (a run of them) + int n <- one Python list each; n is their
//                                        common length, not a Python argument
//   T * (not const)                   -> an output: returned, not passed;
//                                        inside a run of lists (before its
//                                        int n), a list of n outputs
// A cspmd_status_t result is checked (the core's error raised as its Python
// exception) and the outputs returned (None, one value, or a tuple); any
// other result is returned as it is, followed by the outputs if there are
// any: (result, output, ...).
#include <Python.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "shim.h"
#include "shim_internal.h"

namespace cspmd {
namespace {

namespace py = pybind11;

template <class T> using Pointee = std::remove_cv_t<std::remove_pointer_t<T>>;
template <class T> constexpr bool is_text_v = std::is_same_v<T, const char *>;
template <class T>
constexpr bool is_list_v =
    std::is_pointer_v<T> && std::is_const_v<std::remove_pointer_t<T>> && !is_text_v<T>;
template <class T>
constexpr bool is_out_v = std::is_pointer_v<T> && !std::is_const_v<std::remove_pointer_t<T>>;
template <class T> constexpr bool is_ctype_v = std::is_same_v<T, cspmd_ctype_t>;

// Where a C parameter's value is held while the call is made (an output
// inside a run is a list: held as a vector, see CoreCall::HeldAt).
template <class T>
using HeldOne = std::conditional_t<
    is_text_v<T>, std::string,
    std::conditional_t<is_list_v<T>, std::vector<Pointee<T>>,
                       std::conditional_t<is_out_v<T>, Pointee<T>, T>>>;

[[noreturn]] void bad_argument(cspmd_status_t st, const char *fn, size_t i, const char *what) {
    throw_core_error(st, std::string("cspmd._C.") + fn + ": argument " + std::to_string(i + 1) +
                             " " + what);
}

// A Python int as the C integer or enum T, refused when out of T's range.
template <class T> T to_c(py::handle h, const char *fn, size_t i) {
    using U = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>,
                                          std::enable_if<true, T>>::type;
    static_assert(std::is_integral_v<U>, "a core parameter of an unsupported type");
    int64_t v;
    try {
        v = h.cast<int64_t>();
    } catch (const py::cast_error &) {
        bad_argument(CSPMD_ERR_TYPE, fn, i, "must be an int");
    }
    using L = std::numeric_limits<U>;
    if ((std::is_signed_v<U> ? v < static_cast<int64_t>(L::min()) : v < 0) ||
        (sizeof(U) < 8 && v > static_cast<int64_t>(L::max())))
        bad_argument(CSPMD_ERR_MISUSE, fn, i, "out of range");
    return static_cast<T>(v);
}

template <class T> py::object to_py(T v) {
    if constexpr (is_ctype_v<T>)
        return py::make_tuple(static_cast<int64_t>(v.ltype), v.shard_dim);
    else if constexpr (is_text_v<T>)
        return v ? py::object(py::str(v)) : py::object(py::none());
    else if constexpr (std::is_same_v<T, bool>)
        return py::bool_(v);
    else if constexpr (std::is_enum_v<T>)
        return py::int_(static_cast<int64_t>(v));
    else
        return py::int_(v);
}

template <class F, F Fn> struct CoreCall;

template <class R, class... A, R (*Fn)(A...)> struct CoreCall<R (*)(A...), Fn> {
    using Params = std::tuple<A...>;
    template <size_t I> using At = std::tuple_element_t<I, Params>;

    static constexpr size_t N = sizeof...(A);

    // An output followed (through other outputs) by an int, and preceded
    // (through other outputs) by a list: an output list of the run.
    template <size_t I> static constexpr bool ends_run_after() {
        if constexpr (I + 1 >= N)
            return false;
        else if constexpr (std::is_same_v<At<I + 1>, int>)
            return true;
        else if constexpr (is_out_v<At<I + 1>>)
            return ends_run_after<I + 1>();
        else
            return false;
    }
    template <size_t I> static constexpr bool in_run_before() {
        if constexpr (I == 0)
            return false;
        else if constexpr (is_list_v<At<I - 1>>)
            return true;
        else if constexpr (is_out_v<At<I - 1>>)
            return in_run_before<I - 1>();
        else
            return false;
    }
    template <size_t I> static constexpr bool is_out_list() {
        return is_out_v<At<I>> && ends_run_after<I>() && in_run_before<I>();
    }
    // An int right after a list parameter (or an output list) is the
    // lists' length.
    template <size_t I> static constexpr bool is_count() {
        if constexpr (I == 0)
            return false;
        else
            return std::is_same_v<At<I>, int> &&
                   (is_list_v<At<I - 1>> || is_out_list<I - 1>());
    }
    template <size_t I> static constexpr bool takes_arg() {
        return !is_count<I>() && !is_out_v<At<I>>;
    }
    template <size_t I>
    using HeldAt = std::conditional_t<is_out_list<I>(), std::vector<Pointee<At<I>>>,
                                      HeldOne<At<I>>>;
    template <size_t... I> static auto held_tuple(std::index_sequence<I...>)
        -> std::tuple<HeldAt<I>...>;
    template <size_t... I> static constexpr size_t n_args(std::index_sequence<I...>) {
        return (0 + ... + (takes_arg<I>() ? 1 : 0));
    }
    template <size_t... I> static constexpr size_t n_outs(std::index_sequence<I...>) {
        return (0 + ... + (is_out_v<At<I>> ? 1 : 0));
    }
    using Seq = std::index_sequence_for<A...>;
    static constexpr size_t kArgs = n_args(Seq{});
    static constexpr size_t kOuts = n_outs(Seq{});

    struct State {
        decltype(held_tuple(Seq{})) held;
        size_t next = 0;      // the next Python argument
        int64_t run_len = -1; // the length of the current run of lists
    };

    template <size_t I> static void load(State &s, const py::args &args, const char *fn) {
        using T = At<I>;
        auto &h = std::get<I>(s.held);
        if constexpr (is_out_v<T>) {
            h = {};
        } else if constexpr (is_count<I>()) {
            if (s.run_len > INT_MAX)
                bad_argument(CSPMD_ERR_VALUE, fn, s.next - 1, "is too long");
            h = static_cast<int>(s.run_len);
            size_lists<I - 1>(s);
            s.run_len = -1;
        } else {
            size_t i = s.next++;
            py::handle a = args[i];
            if constexpr (is_text_v<T>) {
                if (!py::isinstance<py::str>(a))
                    bad_argument(CSPMD_ERR_TYPE, fn, i, "must be a str");
                h = a.cast<std::string>();
            } else if constexpr (is_list_v<T>) {
                if (!py::isinstance<py::sequence>(a) || py::isinstance<py::str>(a))
                    bad_argument(CSPMD_ERR_TYPE, fn, i, "must be a list of ints");
                py::sequence seq = py::reinterpret_borrow<py::sequence>(a);
                int64_t n = static_cast<int64_t>(seq.size());
                if (s.run_len >= 0 && n != s.run_len)
                    bad_argument(CSPMD_ERR_VALUE, fn, i, "differs in length from the list before it");
                s.run_len = n;
                h.clear();
                h.reserve(static_cast<size_t>(n));
                for (py::handle e : seq)
                    h.push_back(to_c<Pointee<T>>(e, fn, i));
            } else if constexpr (is_ctype_v<T>) {
                if (!py::isinstance<py::sequence>(a) || py::isinstance<py::str>(a) ||
                    py::len(a) != 2)
                    bad_argument(CSPMD_ERR_TYPE, fn, i,
                                 "must be a pair (local type, shard dim)");
                py::sequence pair = py::reinterpret_borrow<py::sequence>(a);
                h.ltype = to_c<cspmd_ltype_t>(pair[0], fn, i);
                h.shard_dim = to_c<int32_t>(pair[1], fn, i);
            } else {
                h = to_c<T>(a, fn, i);
            }
        }
    }

    // The output lists just before the count I + 1, sized to the run.
    template <size_t I> static void size_lists(State &s) {
        if constexpr (is_out_list<I>()) {
            std::get<I>(s.held).assign(static_cast<size_t>(s.run_len), {});
            if constexpr (I > 0)
                size_lists<I - 1>(s);
        }
    }

    template <size_t I> static auto pass(State &s) {
        using T = At<I>;
        auto &h = std::get<I>(s.held);
        if constexpr (is_text_v<T>)
            return h.c_str();
        else if constexpr (is_list_v<T> || is_out_list<I>())
            return static_cast<T>(h.data());
        else if constexpr (is_out_v<T>)
            return &h;
        else
            return h;
    }

    template <size_t I> static void add_out(State &s, py::list &out) {
        if constexpr (is_out_list<I>()) {
            py::list l;
            for (const auto &v : std::get<I>(s.held))
                l.append(to_py(v));
            out.append(l);
        } else if constexpr (is_out_v<At<I>>) {
            out.append(to_py(std::get<I>(s.held)));
        }
    }
    template <size_t... I> static py::object outputs(State &s, std::index_sequence<I...>) {
        py::list out;
        (add_out<I>(s, out), ...);
        if (kOuts == 1)
            return out[0];
        return py::tuple(out);
    }

    template <size_t... I>
    static py::object run(const char *fn, const py::args &args, std::index_sequence<I...> seq) {
        if (args.size() != kArgs)
            throw_core_error(CSPMD_ERR_TYPE, std::string("cspmd._C.") + fn + " takes " +
                                                 std::to_string(kArgs) + " arguments, got " +
                                                 std::to_string(args.size()));
        State s;
        (load<I>(s, args, fn), ...);
        if constexpr (std::is_same_v<R, cspmd_status_t>) {
            check(Fn(pass<I>(s)...));
            if constexpr (kOuts == 0)
                return py::none();
            else
                return outputs(s, seq);
        } else if constexpr (std::is_void_v<R>) {
            static_assert(kOuts == 0, "outputs need a status result");
            Fn(pass<I>(s)...);
            return py::none();
        } else {
            py::object r = to_py(Fn(pass<I>(s)...));
            if constexpr (kOuts == 0) {
                return r;
            } else {
                py::list out;
                out.append(r);
                (add_out<I>(s, out), ...);
                return py::tuple(out);
            }
        }
    }

    static py::object call(const char *fn, const py::args &args) { return run(fn, args, Seq{}); }
};

} // namespace

void bind_core_calls(pybind11::module_ &m) {
#define CSPMD_PY_CALL_BIND_(name)                                                             \
    m.def(#name, torch::wrap_pybind_function([](py::args args) {                              \
              return CoreCall<decltype(&cspmd_##name), &cspmd_##name>::call(#name, args);     \
          }));
    CSPMD_PY_CALL_LIST(CSPMD_PY_CALL_BIND_)
#undef CSPMD_PY_CALL_BIND_
}

} // namespace cspmd
