"""1x1 stride-1 NHWC 16-bit convs as dense GEMMs on the TMA kernel vs cupyconv auto (graph us)."""
import sys; sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import cupy, cupyconv as cc, measure
from cupyconv._gemm import tma
from cupyconv._core.kernels import TMA_TILES

def t(body):
    body()
    return measure.cupy_graph_ms(body, repeat=3, target_ms=3) * 1e3

shapes = [(64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28), (512, 128, 28),
          (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7), (2048, 512, 7),
          (32, 16, 112), (16, 96, 112), (96, 24, 56), (144, 24, 56), (192, 768, 28), (768, 192, 28)]
for dt in ("bfloat16",):
    for cin, cout, hw in shapes:
        x = cupy.random.standard_normal((32, hw, hw, cin)).astype(dt)
        w = cupy.random.standard_normal((cout, 1, 1, cin)).astype(dt)
        dy = cupy.random.standard_normal((32, hw, hw, cout)).astype(dt)
        y = cc.conv(x, w, layout="NHWC"); dx = cc.conv_backward_data(dy, w, x.shape, layout="NHWC")
        a = x.reshape(-1, cin); w2 = w.reshape(cout, cin); dya = dy.reshape(-1, cout)
        ref_y = y.reshape(-1, cout).astype(cupy.float32); ref_dx = dx.reshape(-1, cin).astype(cupy.float32)
        row = f"{cin}->{cout} @{hw}: fwd auto {t(lambda: cc.conv(x, w, layout='NHWC', out=y)):7.1f}"
        for tile in TMA_TILES:
            try:
                yy = tma.gemm_tma(a, w2.T, tile=tile)
                err = float(cupy.abs(yy.astype(cupy.float32) - ref_y).max())
                row += f" tma{tile[1]} {t(lambda: tma.gemm_tma(a, w2.T, out=yy, tile=tile)):7.1f} (err {err:.2g})"
            except Exception as e:
                row += f" tma{tile[1]} {type(e).__name__}: {e}"[:80]
        row += f" | data auto {t(lambda: cc.conv_backward_data(dy, w, x.shape, layout='NHWC', out=dx)):7.1f}"
        for tile in TMA_TILES:
            try:
                xx = tma.gemm_tma(dya, w2, tile=tile)
                err = float(cupy.abs(xx.astype(cupy.float32) - ref_dx).max())
                row += f" tma{tile[1]} {t(lambda: tma.gemm_tma(dya, w2, out=xx, tile=tile)):7.1f} (err {err:.2g})"
            except Exception as e:
                row += f" tma{tile[1]} {type(e).__name__}: {e}"[:80]
        print(row, flush=True)
