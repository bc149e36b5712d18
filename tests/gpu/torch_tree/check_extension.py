"""Build ext.cu with torch.utils.cpp_extension against CUDA_HOME (the tree) and run it on the GPU."""

import os
import sys

import torch
import torch.utils.cpp_extension as ce


def main() -> None:
    print("torch", torch.__version__, "cuda", torch.version.cuda,
          "CUDA_HOME seen by cpp_extension:", ce.CUDA_HOME)
    assert os.path.realpath(str(ce.CUDA_HOME)) == os.path.realpath(os.environ["CUDA_HOME"]), ce.CUDA_HOME
    build = sys.argv[1]
    ext = ce.load("cudaredist_ext", [os.path.join(os.path.dirname(__file__), "ext.cu")],
                  build_directory=build, verbose=False)
    with open(os.path.join(build, "build.ninja")) as f:
        nvcc = next(line for line in f.read().splitlines() if line.startswith("nvcc ="))
    print("build.ninja:", nvcc)
    assert os.environ["CUDA_HOME"] in nvcc
    print("device:", ext.device_name())
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    print("plus_one:", ext.plus_one(x).tolist())
    a = torch.randn(256, 128, device="cuda")
    b = torch.randn(128, 64, device="cuda")
    c = ext.gemm(a, b)
    print("cuBLAS sgemm via torch's handle: max |c - a@b| =", (c - a @ b).abs().max().item())
    assert torch.allclose(c, a @ b, atol=1e-3)
    print("EXTENSION OK")


if __name__ == "__main__":
    main()
