"""The two PTX kernels of the GPU floors, generated here and loaded by the driver (no compiler)."""
from __future__ import annotations

EMPTY = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry lenet_empty()
{
    ret;
}
"""
FMA_CHAINS, FMA_UNROLL = 8, 8      # FMAs per loop iteration = 64


def fma() -> bytes:
    """lenet_fma(float *out, u32 iters): each thread runs FMA_CHAINS independent chains
    x = x * m + m, FMA_UNROLL times per iteration, and stores their sum (nothing is dead code)."""
    regs = [f"x{k}" for k in range(FMA_CHAINS)]
    init = "\n".join(f"    add.f32 {r}, x0, 0f{0x3F800000 + k:08X};" for k, r in enumerate(regs) if k)
    body = "\n".join(f"    fma.rn.f32 {r}, {r}, m, m;" for _ in range(FMA_UNROLL) for r in regs)
    total = "\n".join(f"    add.f32 x0, x0, {r};" for r in regs[1:])
    return f"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry lenet_fma(.param .u64 out, .param .u32 iters)
{{
    .reg .pred p;
    .reg .b32 i, n, b, t;
    .reg .f32 x<{FMA_CHAINS}>, m;
    .reg .b64 a, o;
    mov.u32 b, %ctaid.x;
    mov.u32 n, %ntid.x;
    mov.u32 t, %tid.x;
    mad.lo.u32 t, b, n, t;
    cvt.rn.f32.u32 x0, t;
{init}
    mov.f32 m, 0f3F7FFFEF;
    ld.param.u32 n, [iters];
    mov.u32 i, 0;
LOOP:
{body}
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP;
{total}
    ld.param.u64 a, [out];
    cvta.to.global.u64 a, a;
    mul.wide.u32 o, t, 4;
    add.u64 a, a, o;
    st.global.f32 [a], x0;
    ret;
}}
""".encode()
