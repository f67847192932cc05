//! CUDA C sources of the kernels that the scenarios launch. The scenario suite (its own
//! issue) compiles them at run time; the core pipeline's test programs need none.
