"""Export a small model for Windows with PyTorch's AOTInductor (cross_target_platform="windows"),
against the cudaredist tree in WINDOWS_CUDA_HOME, and list what the package's DLLs import.

    export.py OUT WINDOWS_TORCH_LIBS      (WINDOWS_TORCH_LIBS: torch.lib, torch_cpu.lib, torch_cuda.lib)
"""

import os
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path

import torch
import torch._inductor.config
import torch.utils.cpp_extension

out, win_libs = Path(sys.argv[1]), sys.argv[2]
home = os.environ["WINDOWS_CUDA_HOME"]  # read by torch.utils.cpp_extension at import: set before python
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: {torch.cuda.get_device_name(0)}")
print("WINDOWS_CUDA_HOME:", home, "; torch:", getattr(torch.utils.cpp_extension, "WINDOWS_CUDA_HOME", "?"))


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(x))))


# the settings of PyTorch's own test of the Windows cross-compile (TestAOTInductorWindowsCrossCompilation)
configs = {
    "aot_inductor.cross_target_platform": "windows",
    "aot_inductor.precompile_headers": False,
    "aot_inductor.package_constants_on_disk_format": "binary_blob",
    "aot_inductor.package_constants_in_so": False,
    "aot_inductor.aoti_shim_library_path": win_libs,
}
known = {k for k in configs if hasattr(torch._inductor.config.aot_inductor, k.split(".", 1)[1])}
if known != set(configs):
    print("not settings of this torch, left out:", sorted(set(configs) - known))
configs = {k: v for k, v in configs.items() if k in known}
out.mkdir(parents=True, exist_ok=True)
with torch.no_grad():
    model = Small().cuda().eval()
    x = torch.randn(8, 64, device="cuda")
    batch = torch.export.Dim("batch", min=1, max=1024)
    exported = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    try:
        package = torch._inductor.aoti_compile_and_package(
            exported, package_path=str(out / "small_windows.pt2"), inductor_configs=configs)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
print("package:", package, os.path.getsize(package), "bytes")
dlls = []
with zipfile.ZipFile(package) as z:
    for info in z.infolist():
        print(f"  {info.file_size:>10}  {info.filename}")
        with z.open(info) as fh:
            if fh.read(2) == b"MZ":
                dll = out / Path(info.filename).name
                dll.write_bytes(z.read(info))
                dlls.append(dll)
if not dlls:
    sys.exit("no PE file (MZ) in the package: nothing was built for Windows")
for dll in dlls:
    dump = subprocess.run(["x86_64-w64-mingw32-objdump", "-p", str(dll)], capture_output=True,
                          text=True).stdout
    names = sorted({line.split(":", 1)[1].strip() for line in dump.splitlines() if "DLL Name:" in line})
    kind = next((line.strip() for line in dump.splitlines() if "file format" in line), "?")
    print(f"{dll.name} ({dll.stat().st_size} bytes, {kind}): imports {', '.join(names)}")
    if "cudart64_13.dll" not in [n.lower() for n in names]:
        sys.exit(f"{dll.name} does not import cudart64_13.dll")
print("OK: the Windows model DLL imports cudart64_13.dll")
