// Global mode's fallback for an op with no C shard rule: DTensor's own
// sharding propagation of the op on one mesh axis, run by the Python front
// (cspmd._dtensor_prop.fallback) on meta DTensors.  It only supplies the
// results' placements; the core decides the types.  Slow (a Python call
// and a DTensor dispatch per axis), so only ops without a C rule take it.
#include <Python.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <string>

#include "shim.h"
#include "shim_internal.h"

extern "C" int cspmd_call_dtensor_placements(const cspmd_call_t *call, const int8_t *in, int nin,
                                             int64_t size, int8_t *out, int8_t *ndim, int nout,
                                             char *why, size_t whylen) {
    namespace py = pybind11;
    bool was = cspmd::key_pause(true);  // the meta DTensor ops are not checked
    int rc = CSPMD_OK;
    try {
        py::gil_scoped_acquire gil;
        const auto &schema = call->op->schema();
        size_t n = schema.arguments().size();
        py::tuple args(n);
        for (size_t i = 0; i < n; i++)
            args[i] = torch::jit::toPyObject(*(call->stack->end() - static_cast<ptrdiff_t>(n) +
                                               static_cast<ptrdiff_t>(i)));
        py::list places;
        for (int i = 0; i < nin; i++)
            places.append(static_cast<int>(in[i]));
        py::object res = py::module_::import("cspmd._dtensor_prop")
                             .attr("fallback")(schema.name(), schema.overload_name(), args,
                                               places, size);
        if (py::isinstance<py::str>(res)) {
            std::snprintf(why, whylen, "%s", res.cast<std::string>().c_str());
            rc = CSPMD_SHARD_NO_STRATEGY;
        } else {
            py::list l = res.cast<py::list>();
            for (int r = 0; r < nout; r++) {
                py::tuple pr = l[r].cast<py::tuple>();
                out[r] = static_cast<int8_t>(pr[0].cast<int>());
                ndim[r] = static_cast<int8_t>(pr[1].cast<int>());
            }
        }
    } catch (const std::exception &e) {
        std::snprintf(why, whylen, "the fallback propagation failed: %s", e.what());
        rc = CSPMD_SHARD_NO_STRATEGY;
    }
    cspmd::key_pause(was);
    return rc;
}
