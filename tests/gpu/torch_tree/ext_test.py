import os, sys, torch, torch.utils.cpp_extension as ce
print("torch", torch.__version__, "cuda", torch.version.cuda, "CUDA_HOME seen by cpp_extension:", ce.CUDA_HOME)
assert os.path.realpath(ce.CUDA_HOME) == os.path.realpath(os.environ["CUDA_HOME"]), ce.CUDA_HOME
build = sys.argv[1]
ext = ce.load("cudaredist_ext", [os.path.join(os.path.dirname(__file__), "ext.cu")], build_directory=build, verbose=False)
ninja = open(os.path.join(build, "build.ninja")).read()
nvcc = [l for l in ninja.splitlines() if l.startswith("nvcc =")][0]
print("build.ninja:", nvcc)
assert os.environ["CUDA_HOME"] in nvcc
print("device:", ext.device_name())
x = torch.arange(8, dtype=torch.float32, device="cuda")
print("plus_one:", ext.plus_one(x).tolist())
a = torch.randn(256, 128, device="cuda"); b = torch.randn(128, 64, device="cuda")
c = ext.gemm(a, b); ref = a @ b
print("cuBLAS sgemm via torch's handle: max |c - a@b| =", (c - ref).abs().max().item())
assert torch.allclose(c, ref, atol=1e-3)
print("EXTENSION OK")
