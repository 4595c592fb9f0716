import subprocess, sys, collections, re
from cupy._core import core
from cupy.cuda import compiler
from cupyconv._kernels import REGISTRY
from cupyconv.jit import COMPILE_OPTIONS
for src, ne in [("depthwise_plane.cu", "depthwise_plane<float, 4, 3>"), ("depthwise_plane.cu", "depthwise_plane_wgrad<float, 4, 3>")]:
    m = next(m for m in REGISTRY if m.source == src and ne in m.name_expressions)
    opts = core.assemble_cupy_compiler_options(COMPILE_OPTIONS) + ("-ftz=true", "--device-as-default-execution-space", "-arch=sm_90")
    prog = compiler._NVRTCProgram(m.code, "k.cu", name_expressions=[ne], method="cubin")
    cubin, _ = prog.compile(opts)
    open("/tmp/k.cubin", "wb").write(cubin)
    out = subprocess.run(["cuobjdump", "-sass", "/tmp/k.cubin"], capture_output=True, text=True)
    name = ne.split("<")[0]
    open(f"{sys.argv[1]}/{name}.sass", "w").write(out.stdout + out.stderr)
