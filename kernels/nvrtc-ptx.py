#!/usr/bin/env python3
"""Compiles a CUDA C file to PTX with NVRTC (libnvrtc.so.13, no GPU needed), for
kernels/build-ptx.sh on machines without nvcc. Also prints the source hash the PTX header
records (--hash), which kernels/src/lib.rs checks to catch a stale PTX.

  nvrtc-ptx.py --arch compute_75 IN.cu OUT.ptx     (NVRTC_LIB names the library, if needed)
  nvrtc-ptx.py --hash IN.cu
"""
import ctypes
import glob
import os
import sys


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def find_nvrtc():
    if os.environ.get("NVRTC_LIB"):
        return os.environ["NVRTC_LIB"]
    for d in sys.path:
        hits = glob.glob(os.path.join(d, "nvidia", "cu13", "lib", "libnvrtc.so.13"))
        if hits:
            return hits[0]
    return "libnvrtc.so.13"


def compile_ptx(src_path, arch):
    path = find_nvrtc()
    # libnvrtc dlopens its builtins library by name; load it from the same folder first.
    for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    prog = ctypes.c_void_p()
    src = open(src_path, "rb").read()
    name = os.path.basename(src_path).encode()

    def ok(rc, what):
        if rc != 0:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise SystemExit(f"{what}: {lib.nvrtcGetErrorString(rc).decode()}")

    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src, name, 0, None, None), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if log.value.strip():
        sys.stderr.write(log.value.decode())
    ok(rc, "nvrtcCompileProgram")
    ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(size.value)
    ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value


def main():
    args = sys.argv[1:]
    if args[:1] == ["--hash"]:
        print(fnv1a64(open(args[1], "rb").read()))
        return
    if len(args) != 4 or args[0] != "--arch":
        raise SystemExit(__doc__)
    open(args[3], "wb").write(compile_ptx(args[2], args[1]))


if __name__ == "__main__":
    main()
