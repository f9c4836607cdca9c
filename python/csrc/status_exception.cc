#include "python/csrc/status_exception.h"

#include <exception>

#include "pybind11/pybind11.h"

namespace reducer::python {

namespace py = pybind11;

void RegisterStatusErrorTranslator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object cls =
          py::module_::import("reducer._errors").attr("error_for_code")(e.code());
      py::object error = cls(py::str(e.what()));
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

}  // namespace reducer::python
