"""Turns a kernels/*.cu file into C++ for the CPU emulation (tools/device/emulate.py):
kernel<<<grid, block, shared, stream>>>(args) becomes
::emu::launch(kernel, ::emu::Config(grid, block, shared, stream))(args), and the one
dynamic shared-memory declaration becomes a pointer to the emulator's buffer."""
import re
import sys

path = sys.argv[1]
src = open(path).read()
launch = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
src, launches = launch.subn(lambda m: f"::emu::launch({m.group(1)}, ::emu::Config({m.group(2)}))(", src)
shared = "extern __shared__ float4 shared_f4[];"
src = src.replace(shared, "float4* const shared_f4 = static_cast<float4*>(::emu::dynamic_shared());")
if "<<<" in src or "extern __shared__" in src:
    sys.exit(f"transform.py: {path}: a launch or shared declaration it does not understand")
sys.stdout.write(f'#line 1 "{path}"\n' + src)
sys.stderr.write(f"{path}: {launches} launches\n")
