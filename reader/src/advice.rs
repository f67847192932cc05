//! What to do about a call site: a remedy for the stall patterns syncspy can recognize with
//! certainty from the site's kind, its native op and its Python frames. No advice is better
//! than a wrong one, so a site gets advice only when its frames name the pattern.

/// The remedy for a site of `kind` and `api`, seen `count` times, with these frames (as in
/// the report: native `symbol (file:line)` and Python `file:line in function`, innermost
/// first); `None` when the pattern is not certain.
pub fn advice(kind: &str, api: &str, count: u64, frames: &[String]) -> Option<&'static str> {
    let has = |needle: &str| frames.iter().any(|f| f.contains(needle));
    // A Python frame of `file` (a path suffix) running `function`.
    let python = |file: &str, function: &str| {
        frames.iter().any(|f| {
            f.split_once(".py:").is_some_and(|(path, rest)| {
                format!("{path}.py").ends_with(file)
                    && rest
                        .split_once(" in ")
                        .is_some_and(|(_, func)| function.is_empty() || func == function)
            })
        })
    };
    match kind {
        "stream_sync" | "memcpy_pageable" | "memcpy_sync" if python("torch/_tensor_str.py", "") => {
            Some(PRINT)
        }
        "stream_sync" if has("repeat_interleave") => Some(REPEAT_INTERLEAVE),
        // `bool(t)` (`if (t > 3).any():`) goes through `is_nonzero`, which is no `nonzero`.
        "stream_sync" if has("is_nonzero") => Some(BOOL),
        "stream_sync" if has("nonzero") => Some(NONZERO),
        "stream_sync" if has("_local_scalar_dense") => Some(ITEM),
        "memcpy_pageable" => Some(PAGEABLE),
        "host_wait" if python("jax/_src/array.py", "ArrayImpl._value") => Some(JAX_TO_HOST),
        "device_sync" if python("torch/cuda/__init__.py", "synchronize") => Some(SYNCHRONIZE),
        "implicit_sync"
            if count >= 2
                && matches!(api, "cudaFree" | "cudaFreeHost" | "cudaFreeAsync")
                && has("CUDACachingAllocator") =>
        {
            Some(ALLOCATOR)
        }
        _ => None,
    }
}

/// A sync made while its stream was capturing a CUDA graph (`torch.cuda.graph`,
/// `cudaStreamBeginCapture`): the call fails and the capture with it.
pub const CAPTURE: &str =
    "this call ran while its stream was capturing a CUDA graph and broke the \
                           capture (error 900, cudaErrorStreamCaptureUnsupported): move the \
                           `.item()`, `nonzero`, blocking copy or synchronize out of the captured \
                           region, or read the value after the graph replays";
const ITEM: &str = "`.item()` (or `float()`, `int()`, `.tolist()`) waits for all GPU work queued \
                    before it: keep the value on the GPU (sum losses into a tensor) and read it \
                    once every N steps";
const BOOL: &str = "a CUDA tensor used as a Python `bool` (`if t:`, `if (x > 3).any():`, `while \
                    not done:`) is read on the host, which waits for the GPU: keep the decision \
                    on the GPU (`torch.where`, masks) or check it once every N steps";
const PRINT: &str = "printing a CUDA tensor copies it to the host piece by piece and waits each \
                     time: print less often, or copy once with `.cpu()` and print that";
const NONZERO: &str = "`nonzero` and boolean-mask indexing (`x[mask]`) must learn the result's \
                       size on the host, so they wait: use `torch.where(mask, x, 0)` or a \
                       fixed-size mask where the shape can stay fixed";
const REPEAT_INTERLEAVE: &str = "`repeat_interleave` reads the output size from the GPU: pass \
                                 `output_size=` when you know it";
const PAGEABLE: &str = "the host buffer is pageable, so the copy cannot run asynchronously: \
                        copy from pinned memory (`pin_memory()`, `DataLoader(pin_memory=True)`, \
                        or cudaMallocHost) with `non_blocking=True`";
const JAX_TO_HOST: &str = "reading a `jax.Array` on the host (`jax.device_get`, `float()`, \
                           `.item()`, `np.asarray`) waits for the computation that produces it: \
                           keep metrics on the device and fetch them every N steps, so the next \
                           steps are queued while the GPU works";
const SYNCHRONIZE: &str = "`torch.cuda.synchronize()` waits for every stream: drop it from the \
                           loop unless you are timing (time with CUDA events instead)";
const ALLOCATOR: &str = "torch's caching allocator gave memory back to CUDA (cudaFree \
                         synchronizes the device): avoid `torch.cuda.empty_cache()` in the loop \
                         and keep tensor shapes stable so blocks are reused";

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    fn py(file: &str, function: &str) -> String {
        format!("{file}:1 in {function}")
    }

    const SS: &str = "cudaStreamSynchronize";
    const DS: &str = "cudaDeviceSynchronize";

    #[test]
    fn each_pattern_is_named_by_its_frames() {
        let item = f(&[
            "train.py:47 in <module>",
            "at::native::_local_scalar_dense_cuda(at::Tensor const&) (libtorch_cuda.so)",
        ]);
        assert_eq!(advice("stream_sync", SS, 10, &item), Some(ITEM));
        // The same op under print: the print advice.
        let mut printing = item.clone();
        printing.push(py(
            "/v/lib/python3.12/site-packages/torch/_tensor_str.py",
            "_tensor_str",
        ));
        printing.push(py("/u/t.py", "<module>"));
        assert_eq!(advice("stream_sync", SS, 10, &printing), Some(PRINT));
        let nz = f(&["void at::native::nonzero_cuda_out_impl<bool>(at::Tensor const&, at::Tensor&) (libtorch_cuda.so)"]);
        assert_eq!(advice("stream_sync", SS, 5, &nz), Some(NONZERO));
        // `if (t > 3).any():`: a Python bool of a CUDA tensor, through is_nonzero and the
        // scalar read; not the nonzero op.
        let truth = f(&[
            "at::native::_local_scalar_dense_cuda(at::Tensor const&) (libtorch_cuda.so)",
            "at::native::is_nonzero(at::Tensor const&) (libtorch_cpu.so)",
        ]);
        assert_eq!(advice("stream_sync", SS, 5, &truth), Some(BOOL));
        let pageable = f(&["main (a.cu:3)"]);
        assert_eq!(
            advice("memcpy_pageable", "cudaMemcpyAsync", 5, &pageable),
            Some(PAGEABLE)
        );
        let sync = [py(
            "/v/lib/python3.12/site-packages/torch/cuda/__init__.py",
            "synchronize",
        )];
        assert_eq!(advice("device_sync", DS, 5, &sync), Some(SYNCHRONIZE));
        let free = f(&["c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks() (libc10_cuda.so)"]);
        assert_eq!(
            advice("implicit_sync", "cudaFree", 4, &free),
            Some(ALLOCATOR)
        );
        // `float(jax.device_get(m))`, as JAX 0.11 runs it (the waiting thread's frames).
        let to_host = [
            py(
                "/v/lib/python3.12/site-packages/jax/_src/array.py",
                "ArrayImpl._value",
            ),
            py(
                "/v/lib/python3.12/site-packages/jax/_src/api.py",
                "device_get",
            ),
            py("/u/t.py", "<module>"),
        ];
        assert_eq!(
            advice("host_wait", "cuLaunchHostFunc", 20, &to_host),
            Some(JAX_TO_HOST)
        );
        // `block_until_ready` has no Python frame of JAX's: nothing names it for certain.
        let ready = [py("/u/t.py", "<module>")];
        assert_eq!(advice("host_wait", "cuLaunchHostFunc", 20, &ready), None);
    }

    #[test]
    fn no_advice_without_certainty() {
        // A stream sync of a native program: nothing names a pattern.
        assert_eq!(advice("stream_sync", SS, 9, &f(&["run_op (x.cc:4)"])), None);
        // A device sync outside torch.cuda.synchronize.
        assert_eq!(advice("device_sync", DS, 9, &f(&["main (x.cc:9)"])), None);
        // Another function of torch's cuda module, or another file's `synchronize`.
        let other = [
            py(
                "/v/lib/python3.12/site-packages/torch/cuda/__init__.py",
                "current_stream",
            ),
            py("/u/my/cuda/__init__.py", "synchronize"),
        ];
        assert_eq!(advice("device_sync", DS, 5, &other), None);
        // One cudaFree (at exit, a one-off) is no churn.
        let free = f(&["c10::cuda::CUDACachingAllocator::emptyCache() (libc10_cuda.so)"]);
        assert_eq!(advice("implicit_sync", "cudaFree", 1, &free), None);
        // cudaFree outside torch's allocator: not certain.
        assert_eq!(
            advice("implicit_sync", "cudaFree", 9, &f(&["main (x.cc:9)"])),
            None
        );
    }
}
